"""Segmenting new images and volumes with a trained segmentation checkpoint.

The segmentation counterpart of :func:`nlnet.predict`::

    import nlnet

    model = nlnet.load_model("runs/unet3d/checkpoints/final.pt")
    (case,) = nlnet.segment(model, ["case_017.nii.gz"])      # or .npy (C, D, H, W), or a PNG
    case.mask                                                 # (D, H, W) class ids
    case.fractions()                                          # {"background": 0.93, ...}

The input is prepared as the checkpoint's training prepared it: an image is RGB, scaled to
[0, 1] and normalised with the stored ``mean``/``std``; a volume is z-scored over its nonzero
voxels per channel (:func:`~nlnet.data.segmentation.volumes.zscore_nonzero`). The network runs
on the whole input (padded to a multiple of a U-Net's stride) or, for inputs larger than
memory allows, on sliding windows whose logits are averaged where they overlap
(:func:`~nlnet.engine.tasks.segmentation.sliding_window.sliding_window_inference`, MONAI's placement); by default
it does what the checkpoint's own evaluation did (``data.sliding_window``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from nlnet.data.preprocessing import Preprocessing
from nlnet.models.checks import model_in_channels

__all__ = ["Segmentation", "segment", "read_input", "model_in_channels", "resolve_window"]

PathLike = str | os.PathLike
#: An input: an image or volume file, the files of one case's modalities, or an array
#: (an image ``(H, W, 3)`` uint8, a volume ``(C, D, H, W)``).
Input = PathLike | Sequence[PathLike] | np.ndarray


@dataclass
class Segmentation:
    """The segmentation of one input.

    Attributes:
        source: the file (or ``"array <i>"``) segmented.
        mask: class ids ``(H, W)`` or ``(D, H, W)``, ``int64`` (the model's classes).
        class_names: the checkpoint's class names.
        label_map: the training's ``data.label_map`` (raw label -> class id; e.g. BraTS's
            ``{4: 3}``); :meth:`raw_labels` undoes it.
        windows: sliding windows run (0: the whole input in one pass).
    """

    source: str
    mask: np.ndarray
    class_names: list[str]
    label_map: dict[int, int] = field(default_factory=dict)
    windows: int = 0

    def raw_labels(self) -> np.ndarray:
        """The mask in the labels of the training masks: each class that one key of
        ``label_map`` maps to gets that key back (BraTS's class 3 -> label 4).

        Raises:
            ValueError: the map is not one-to-one (several labels merged into one class, or a
                label merged into the background 0): the raw label of such a class is unknown.
        """
        sources: dict[int, list[int]] = {}
        for raw, cls in self.label_map.items():
            sources.setdefault(cls, []).append(raw)
        merged = {c: r for c, r in sources.items() if len(r) > 1 or c == 0}
        if merged:
            c, r = next(iter(merged.items()))
            raise ValueError(
                f"label_map: class {c} holds the labels {sorted(r) if c else [0, *r]} of the "
                "training masks; its raw label is unknown (use the class ids, .mask)"
            )
        out = self.mask.copy()
        for cls, (raw,) in sources.items():
            out[self.mask == cls] = raw
        return out

    def fractions(self) -> dict[str, float]:
        """Fraction of the pixels/voxels given to each class."""
        counts = np.bincount(self.mask.ravel(), minlength=len(self.class_names))
        return {n: float(c) / self.mask.size for n, c in zip(self.class_names, counts)}


def read_input(item: Input, *, volume: bool) -> np.ndarray:
    """An input as an array: an image ``(H, W, 3)`` uint8, or a volume ``(C, D, H, W)`` float32.

    Raises:
        ValueError: a missing or unreadable file, or an array of another shape (one line
            naming the input).
    """
    from nlnet.data.segmentation.volumes import read_case

    if isinstance(item, np.ndarray):
        return item
    files = [Path(f) for f in ([item] if isinstance(item, (str, os.PathLike)) else item)]
    for f in files:
        if not f.is_file():
            raise ValueError(f"{f}: no such file")
    if volume:
        return read_case(files, str(files[0]))
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(files[0]) as im:
            return np.asarray(im.convert("RGB"))
    except (OSError, UnidentifiedImageError) as exc:
        raise ValueError(f"{files[0]}: not a readable image ({exc})") from None


def _prepared(array: np.ndarray, prep: Preprocessing, volume: bool, name: str) -> torch.Tensor:
    """The network's input ``(1, C, *spatial)`` of an array (normalised as in training)."""
    from nlnet.data.segmentation.volumes import zscore_nonzero

    if volume:
        if array.ndim == 3:  # one channel (D, H, W)
            array = array[None]
        if array.ndim != 4:
            raise ValueError(f"{name}: expected a volume (C, D, H, W), got shape {array.shape}")
        return zscore_nonzero(torch.from_numpy(np.ascontiguousarray(array, np.float32)))[None]
    if array.ndim != 3 or array.shape[-1] != 3 or array.dtype != np.uint8:
        raise ValueError(f"{name}: expected an RGB image (H, W, 3) uint8, got {array.shape} "
                         f"{array.dtype}")  # fmt: skip
    image = torch.from_numpy(array.copy()).permute(2, 0, 1).float() / 255.0
    mean = torch.tensor(prep.mean).view(-1, 1, 1)
    std = torch.tensor(prep.std).view(-1, 1, 1)
    return ((image - mean) / std)[None]


def segmentation_info(model: nn.Module) -> Any:
    """``model.nlnet_info`` of a segmentation model from :func:`nlnet.load_model`.

    Raises:
        ValueError: a model without it, or a checkpoint of another task.
    """
    from nlnet.models.registry import model_facts

    info = getattr(model, "nlnet_info", None)
    if info is None:
        raise ValueError("model: expected a model from nlnet.load_model(checkpoint)")
    try:
        task = model_facts(info.model_name).task
    except ValueError:  # a network of your own: trust its checkpoint's preprocessing
        task = "segmentation"
    if task != "segmentation":
        raise ValueError(f"model: {info.model_name!r} is a {task} model, not a segmentation "
                         "one (nlnet.predict classifies)")  # fmt: skip
    return info


def resolve_window(
    model: nn.Module, window: Sequence[int] | bool | None, ndim: int | None = None
) -> tuple[int, ...]:
    """The sliding window :func:`segment` runs (``()``: whole inputs), checked once.

    Raises:
        ValueError: ``True`` and no stored window, a size below 1, or not ``ndim`` sizes.
    """
    prep = _record(segmentation_info(model))
    size = _window(prep, window)
    ndim = ndim or (3 if prep.kind == "volume" else 2)
    if size and (len(size) != ndim or min(size) < 1):
        raise ValueError(f"window: expected {ndim} sizes >= 1, got {list(size)}")
    return size


def _record(info: Any) -> Preprocessing:
    """The checkpoint's test-time record; without one, an RGB image normalised as the
    segmentation task's default (mean 0.5, std 0.25)."""
    return info.preprocessing or Preprocessing("image", (0.5,) * 3, (0.25,) * 3)


def _window(prep: Preprocessing, window: Sequence[int] | bool | None) -> tuple[int, ...]:
    """The sliding window to run (``()``: whole inputs): ``window`` as given, ``False`` for
    none, or (``None``) the checkpoint's evaluation choice."""
    if window is False:
        return ()
    if window is None or window is True:
        stored = prep.window or ()
        if window is True and not stored:
            raise ValueError("window: the checkpoint stores no window size; give one")
        return stored if (window or prep.sliding_window) else ()
    return tuple(int(v) for v in window)


@torch.no_grad()
def segment(
    model: nn.Module,
    inputs: Sequence[Input],
    *,
    window: Sequence[int] | bool | None = None,
    overlap: float | None = None,
    device: str | torch.device | None = None,
) -> list[Segmentation]:
    """Segment images or volumes with a model from :func:`nlnet.load_model`.

    Args:
        model: a segmentation network loaded by :func:`nlnet.load_model` (it carries the
            checkpoint's class names and preprocessing).
        inputs: image files (PNG, JPEG, ...) for a 2D model; for a 3D model ``.npy``
            ``(C, D, H, W)`` or NIfTI files, or per case the list of its modality files in
            the training's channel order; or arrays.
        window: sliding-window size per spatial axis; ``True``: the checkpoint's training
            crop/patch; ``False``: whole inputs; ``None`` (default): as the checkpoint's
            evaluation ran (``data.sliding_window``).
        overlap: overlap of neighbouring windows in ``[0, 1)`` (default: the checkpoint's, or
            0.25).
        device: where to run (default: the model's).

    Returns:
        one :class:`Segmentation` per input, in order.

    Raises:
        ValueError: a model without nlnet's checkpoint information, an unreadable input, or an
            input of another channel count or rank than the model's (naming the input).
    """
    from nlnet.engine.tasks.segmentation import forward_padded
    from nlnet.engine.tasks.segmentation.sliding_window import sliding_window_inference

    info = segmentation_info(model)
    prep = _record(info)
    volume = prep.kind == "volume"
    size = resolve_window(model, window)
    overlap = float(prep.window_overlap if overlap is None else overlap)
    label_map = dict(prep.label_map)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model = model.to(device).eval()
    channels = model_in_channels(model)
    out = []
    for i, item in enumerate(inputs):
        name = f"array {i}" if isinstance(item, np.ndarray) else str(
            item if isinstance(item, (str, os.PathLike)) else item[0])  # fmt: skip
        x = _prepared(read_input(item, volume=volume), prep, volume, name).to(device)
        if channels is not None and x.shape[1] != channels:
            raise ValueError(f"{name}: {x.shape[1]} channel(s), the model takes {channels}")
        if size and any(n > w for n, w in zip(x.shape[2:], size)):
            logits = sliding_window_inference(x, size, lambda w: forward_padded(model, w), overlap)
            windows = _count_windows(x.shape[2:], size, overlap)
        else:
            logits, windows = forward_padded(model, x), 0
        if isinstance(logits, Mapping):
            logits = logits["out"]
        mask = logits.argmax(1)[0].cpu().numpy().astype(np.int64)
        out.append(Segmentation(name, mask, list(info.class_names), label_map, windows))
    return out


def _count_windows(spatial: Sequence[int], window: Sequence[int], overlap: float) -> int:
    from nlnet.engine.tasks.segmentation.sliding_window import window_starts

    count = 1
    for n, w in zip(spatial, window):
        count *= len(window_starts(max(int(n), int(w)), int(w), overlap))
    return count
