"""``nlnet predict`` with a segmentation checkpoint: a mask and an overlay per input.

Each image (2D models) or volume (3D models: ``.npy`` ``(C, D, H, W)`` or NIfTI; with the
training's ``data.modalities``, the files ``<case>_<modality>.nii.gz`` of a case are grouped in
that order) is segmented by :func:`nlnet.segment`; the mask is written in the training masks'
labels (the training's ``data.label_map`` undone where it is one-to-one, else the class ids)
as ``<name>_mask.png`` for an image, ``<name>_mask.npy`` for a ``.npy`` volume and
``<name>_mask.nii.gz`` (with the input's affine) for a NIfTI volume, beside
``<name>_overlay.png`` (the image, or the slice of a volume with the most foreground, with the
classes other than 0 in colour).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["predict_masks", "overlay", "PALETTE"]

#: RGB colours of classes 1, 2, ... in overlays (class 0, the background, is left uncoloured).
PALETTE = np.array(
    [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
     (145, 30, 180), (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212)], np.uint8,
)  # fmt: skip


def overlay(image: np.ndarray, mask: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """``image`` ``(H, W)`` or ``(H, W, 3)`` (any range) with each class > 0 of ``mask``
    ``(H, W)`` blended in its :data:`PALETTE` colour; ``(H, W, 3)`` uint8."""
    img = image.astype(np.float64)
    if img.ndim == 2:
        lo, hi = float(img.min()), float(img.max())
        img = np.repeat(((img - lo) / (hi - lo or 1.0) * 255.0)[..., None], 3, axis=-1)
    colours = PALETTE[(np.maximum(mask, 1) - 1) % len(PALETTE)].astype(np.float64)
    blend = np.where((mask > 0)[..., None], (1 - alpha) * img + alpha * colours, img)
    return blend.clip(0, 255).round().astype(np.uint8)


def _volume_overlay(volume: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The overlay of the slice along the first spatial axis with the most foreground."""
    k = int(np.argmax((mask > 0).reshape(mask.shape[0], -1).sum(1)))
    return overlay(volume[0, k], mask[k])


def _case_stem(path: Path, modalities: tuple[str, ...] = ()) -> str:
    """The output name of an input file: its name without the extension (and the modality)."""
    name = path.name
    stem = name[: -len(".nii.gz")] if name.lower().endswith(".nii.gz") else path.stem
    mod = next((m for m in modalities if stem.endswith(f"_{m}")), None)
    return stem[: -len(mod) - 1] if mod else stem


def _write(stem: str, source: Path, array: np.ndarray, result: Any, out_dir: Path, raw: bool
           ) -> list[Path]:  # fmt: skip
    """Write the mask (``raw``: in the training masks' labels) and the overlay of the input
    ``source`` as ``<stem>_mask.*`` and ``<stem>_overlay.png``; their paths."""
    from PIL import Image

    labels = result.raw_labels() if raw else result.mask
    overlay_path = out_dir / f"{stem}_overlay.png"
    if labels.ndim == 2:
        mask_path = out_dir / f"{stem}_mask.png"
        dtype = np.uint8 if labels.max(initial=0) < 256 else np.uint16
        Image.fromarray(labels.astype(dtype)).save(mask_path)
        Image.fromarray(overlay(array, result.mask)).save(overlay_path)
        return [mask_path, overlay_path]
    if source.name.lower().endswith((".nii", ".nii.gz")):
        import nibabel

        ref = nibabel.load(str(source))
        mask_path = out_dir / f"{stem}_mask.nii.gz"
        nibabel.save(nibabel.Nifti1Image(labels.astype(np.int16), ref.affine), str(mask_path))
    else:
        mask_path = out_dir / f"{stem}_mask.npy"
        np.save(mask_path, labels)
    Image.fromarray(_volume_overlay(array, result.mask)).save(overlay_path)
    return [mask_path, overlay_path]


def _window_arg(text: str | None) -> Any:
    """``--window``: ``auto`` (None), ``none`` (False), ``patch`` (True) or sizes ``D,H,W``."""
    from nlnet.engine.errors import UserError

    if text in (None, "auto"):
        return None
    if text in ("none", "patch"):
        return text == "patch"
    try:
        sizes = [int(v) for v in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise UserError(
            f"--window: expected auto, none, patch or sizes like 96,96,96, got {text!r}"
        )
    return sizes


def predict_masks(args: argparse.Namespace, checkpoint: Any, device: Any) -> int:
    """Segment ``args.videos`` (files or folders) with a segmentation ``checkpoint``; prints
    one line per input and returns 1 if any input was skipped, else 0."""
    import sys

    from nlnet.commands.common import expand_inputs
    from nlnet.data.segmentation.volumes import VOLUME_EXTENSIONS
    from nlnet.engine.errors import UserError
    from nlnet.inference import IMAGE_EXTENSIONS, load_model
    from nlnet.segmentation import Segmentation, read_input, resolve_window, segment

    if args.overlap is not None and not 0 <= args.overlap < 1:
        raise UserError(f"--overlap: expected a fraction in [0, 1), got {args.overlap}")
    model = load_model(checkpoint, device)
    prep = model.nlnet_info.preprocessing
    volume = prep is not None and prep.kind == "volume"
    try:
        window = resolve_window(model, _window_arg(args.window))
    except ValueError as exc:
        raise UserError(f"--{exc}") from None
    files = expand_inputs(args.videos, VOLUME_EXTENSIONS if volume else IMAGE_EXTENSIONS,
                          "volume" if volume else "image")  # fmt: skip
    cases = _cases(files, prep.modalities if volume else ())
    out_dir = Path(args.output_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--output-dir: {str(out_dir)!r} is an existing file")
    out_dir.mkdir(parents=True, exist_ok=True)
    label_map = dict(prep.label_map) if prep is not None else {}
    try:
        Segmentation("", np.zeros(1, np.int64), [], label_map).raw_labels()
        raw = True
    except ValueError as exc:
        raw = False
        print(f"nlnet predict: note: masks in class ids ({exc})", file=sys.stderr)
    failed = 0
    for name, stem, group in cases:
        try:
            array = read_input(group, volume=volume)
            (result,) = segment(model, [array], window=window or False, overlap=args.overlap)
        except (ValueError, ModuleNotFoundError, RuntimeError) as exc:  # RuntimeError: memory
            failed += 1
            hint = " (try --window patch)" if isinstance(exc, RuntimeError) else ""
            print(f"{name}: skipped ({str(exc).splitlines()[0]}){hint}", file=sys.stderr)
            continue
        written = _write(stem, Path(group[0]), array, result, out_dir, raw)
        shares = sorted(result.fractions().items(), key=lambda kv: -kv[1])
        where = f"{result.windows} windows" if result.windows else "whole"
        print(f"{name} -> {written[0]} ({where}; " + ", ".join(
            f"{n} {100 * f:.1f}%" for n, f in shares[:4]) + f"); overlay {written[1]}")  # fmt: skip
    return 1 if failed else 0


def _cases(files: list[str], modalities: tuple[str, ...]) -> list[tuple[str, str, list[str]]]:
    """``(name, output stem, files)`` per case: one file each, or the modality files of a case
    grouped in ``modalities`` order; two cases of one output name are one line (they would
    overwrite each other)."""
    from nlnet.data.segmentation.volumes import group_cases
    from nlnet.engine.errors import UserError

    if modalities:
        try:
            names, groups = group_cases([Path(f) for f in files], modalities)
        except FileNotFoundError as exc:
            raise UserError(f"VIDEO: {str(exc).removeprefix('root: ')}") from None
        cases = [(n, [str(p) for p in g]) for n, g in zip(names, groups)]
    else:
        cases = [(f, [f]) for f in files]
    seen: dict[str, str] = {}
    out = []
    for name, group in cases:
        stem = _case_stem(Path(group[0]), modalities)
        if stem in seen:
            raise UserError(f"VIDEO: {seen[stem]} and {name} would both write {stem}_mask.*; "
                            "segment them into separate --output-dir folders")  # fmt: skip
        seen[stem] = name
        out.append((name, stem, group))
    return out
