"""3D segmentation data: folders of volumes (NumPy or NIfTI) and their voxel label masks.

The layout is the 2D one of :mod:`nlnet.data.segmentation.images` with volumes in place of images (the
way MONAI and nnU-Net folders look, reduced to its essentials)::

    root/<split>/images/<case>.npy        float (C, D, H, W): C modalities (channels)
    root/<split>/masks/<case>.npy         integer (D, H, W): one class id per voxel

or NIfTI files (``.nii``/``.nii.gz``, read with nibabel: ``pip install 'nlnet[medical]'``), as
BraTS ships them, one file per modality and case::

    root/<split>/images/<case>_t1.nii.gz, <case>_t1ce.nii.gz, <case>_t2.nii.gz, <case>_flair.nii.gz
    root/<split>/masks/<case>_seg.nii.gz  (or <case>.nii.gz)

with ``modalities=("t1", "t1ce", "t2", "flair")`` giving the channel order (nnU-Net's
``<case>_0000.nii.gz`` .. names work the same way with ``("0000", "0001", ...)``). Without
``modalities`` every image file is one case: a 3D file is one channel, a 4D file holds its
channels on the last axis (the Medical Segmentation Decathlon's layout). NIfTI arrays keep the
axis order of the file (nibabel's ``i, j, k``), as MONAI's loader does; the image and mask of a
case must have the same grid (the affine is not used).

Each item is a dict ``{"image", "mask", "index"}``: ``image`` (the volume) float32 ``(C, D, H, W)`` normalised per case
and channel with :func:`zscore_nonzero`, ``mask`` int64 ``(D, H, W)`` after ``label_map``
(BraTS labels ``{0, 1, 2, 4}`` -> ``{4: 3}``). For training, ``patch`` crops a random
``(d, h, w)`` patch and ``flip`` mirrors each spatial axis with that probability (nnU-Net's
mirroring); for testing, the whole volume is returned and :func:`collate_volumes` pads the
volumes of a batch to a common size (the pad is ``ignore_index`` in the masks, so it never
counts in the loss or the metrics).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from nlnet.data.segmentation.images import SkipBadItems, check_labels, split_dirs

__all__ = [
    "VOLUME_EXTENSIONS",
    "VolumeFolder",
    "case_channels",
    "collate_volumes",
    "common_channels",
    "group_cases",
    "random_flip",
    "random_patch",
    "read_case",
    "read_nifti",
    "zscore_nonzero",
]

VOLUME_EXTENSIONS: tuple[str, ...] = (".npy", ".nii", ".nii.gz")
NIFTI_HINT = "pip install 'nlnet[medical]'"


def _suffix(path: Path) -> str:
    """The volume extension of ``path`` (``.nii.gz`` counts as one), or ``""``."""
    name = path.name.lower()
    return next((ext for ext in (".nii.gz", ".nii", ".npy") if name.endswith(ext)), "")


def _stem(path: Path) -> str:
    return path.name[: len(path.name) - len(_suffix(path))]


def read_nifti(path: str | os.PathLike) -> np.ndarray:
    """The voxel array of a NIfTI file (axis order as stored), through nibabel.

    Raises:
        ModuleNotFoundError: nibabel is missing (``"... needs nibabel: pip install
            'nlnet[medical]'"``; the engine re-raises it as a user error).
    """
    try:
        import nibabel
    except ImportError:
        raise ModuleNotFoundError(
            f"{Path(path).name}: NIfTI volumes need nibabel: {NIFTI_HINT}", name="nibabel"
        ) from None
    try:
        return np.asanyarray(nibabel.load(str(path)).dataobj)
    except (nibabel.filebasedimages.ImageFileError, EOFError) as exc:
        raise ValueError(f"{path}: not a readable NIfTI file ({exc})") from None


def read_volume(path: Path) -> np.ndarray:
    """A ``.npy`` or NIfTI file as a NumPy array.

    Raises:
        ValueError: an unreadable file (a bad case: skipped by ``skip_bad``).
    """
    if _suffix(path) != ".npy":
        return read_nifti(path)
    try:
        return np.load(path)
    except EOFError:
        raise ValueError(f"{path}: empty or truncated .npy file") from None


def read_case(files: Sequence[Path], name: str = "case") -> np.ndarray:
    """A case's raw volume ``(C, D, H, W)`` float32: one ``.npy`` ``(C, D, H, W)`` file, one
    NIfTI file (3D: one channel; 4D: channels last), or one 3D file per channel (modality).

    Raises:
        ValueError: an unreadable file or a volume of another shape (naming the file).
    """
    files = [Path(f) for f in files]
    arrays = [read_volume(p).astype(np.float32, copy=False) for p in files]
    if len(files) > 1:  # one 3D file per modality
        shapes = {a.shape for a in arrays}
        if len(shapes) != 1 or arrays[0].ndim != 3:
            raise ValueError(f"{name}: modalities of shapes {shapes}")
        return np.stack(arrays)
    (vol,) = arrays
    if _suffix(files[0]) != ".npy":  # NIfTI: 3D, or 4D with the channels last
        vol = vol[None] if vol.ndim == 3 else np.moveaxis(vol, -1, 0)
    if vol.ndim != 4:
        raise ValueError(f"{files[0]}: expected a (C, D, H, W) volume, got {vol.shape}")
    return vol


def case_channels(files: Sequence[Path]) -> int | None:
    """The channel count of a case from its files' headers (nothing else is read): one per file
    for one file per modality, ``C`` of a ``.npy`` ``(C, D, H, W)``, 1 or the last axis of a
    NIfTI file; ``None`` for a file that cannot be read (the case fails when it is loaded)."""
    if len(files) > 1:
        return len(files)
    path = Path(files[0])
    if _suffix(path) == ".npy":
        try:
            shape = np.load(path, mmap_mode="r").shape
        except (OSError, ValueError, EOFError):
            return None
        return int(shape[0]) if len(shape) == 4 else None
    try:
        import nibabel

        shape = nibabel.load(str(path)).shape
    except Exception:  # noqa: BLE001  (nibabel's header errors are plain Exceptions: the case fails when loaded)
        return None
    return 1 if len(shape) == 3 else int(shape[-1]) if len(shape) == 4 else None


def common_channels(images: Sequence[Sequence[Path]]) -> int | None:
    """The channel count most cases have (the first case's on a tie; ``None``: none readable),
    so that one case with a modality missing or an extra one is a bad case, not the rule."""
    counts = [c for c in (case_channels(files) for files in images) if c is not None]
    return max(dict.fromkeys(counts), key=counts.count) if counts else None


def zscore_nonzero(volume: torch.Tensor) -> torch.Tensor:
    """Per-channel z-score over the case's foreground: ``(x - mean) / std`` with ``mean`` and
    ``std`` of each channel over the nonzero voxels (voxels where any channel is nonzero: the
    brain in skull-stripped MRI), and 0 outside them, as nnU-Net and the BraTS pipelines
    normalise MRI (intensities have no absolute scale). A case without nonzero voxels is
    normalised over all of them. Non-finite voxels (NaN, inf: a scanner's or a converter's
    holes) are left out of the statistics and set to 0, like the background.

    Args:
        volume: ``(C, D, H, W)`` float.
    """
    finite = volume.isfinite()  # (C, D, H, W)
    fg = ((volume != 0) & finite).any(0)  # (D, H, W)
    if not fg.any():
        fg = finite.any(0)
    vals, ok = volume[:, fg].double(), finite[:, fg]  # (C, N)
    if ok.all():
        mean, std = vals.mean(1), vals.std(1, unbiased=False)
    else:  # the statistics of the finite voxels only
        n = ok.sum(1).clamp_min(1)
        mean = torch.where(ok, vals, 0.0).sum(1) / n
        std = (torch.where(ok, vals - mean[:, None], 0.0).square().sum(1) / n).sqrt()
    out = (volume.double() - mean.view(-1, 1, 1, 1)) / std.clamp_min(1e-8).view(-1, 1, 1, 1)
    return torch.where(fg & finite, out, torch.zeros_like(out)).float()


def random_patch(
    volume: torch.Tensor,
    mask: torch.Tensor,
    patch: Sequence[int],
    ignore_index: int = 255,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A random ``patch`` ``(d, h, w)`` of ``volume`` ``(C, D, H, W)`` and ``mask`` ``(D, H, W)``
    at a uniform position; an axis shorter than the patch is padded at its end first (0 in the
    volume, ``ignore_index`` in the mask)."""
    pad = [max(p - s, 0) for p, s in zip(patch, mask.shape)]
    if any(pad):
        spec = [v for p in reversed(pad) for v in (0, p)]
        volume = F.pad(volume, spec)
        mask = F.pad(mask, spec, value=ignore_index)
    starts = [
        int(torch.randint(s - p + 1, (1,), generator=generator)) for p, s in zip(patch, mask.shape)
    ]
    index = tuple(slice(a, a + p) for a, p in zip(starts, patch))
    return volume[(slice(None), *index)], mask[index]


def random_flip(
    volume: torch.Tensor,
    mask: torch.Tensor,
    p: float = 0.5,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mirror each spatial axis with probability ``p`` (the same axes for volume and mask)."""
    axes = [a for a in range(3) if float(torch.rand((), generator=generator)) < p]
    if not axes:
        return volume, mask
    return volume.flip([a + 1 for a in axes]), mask.flip(axes)


class VolumeFolder(SkipBadItems, Dataset):
    """Volumes and voxel label masks from ``root/<split>/{images,masks}`` (module docstring).

    Args:
        root: dataset root.
        split: sub-folder (``"train"``, ``"val"``, ...).
        modalities: NIfTI file-name suffixes of the channels, in order (``<case>_<m>.nii.gz``);
            empty: one image file per case (always so for ``.npy`` files).
        label_map: mask values to replace (e.g. ``{4: 3}`` for BraTS), others kept.
        num_classes: when given, a (mapped) mask value outside ``[0, num_classes)`` other than
            ``ignore_index`` is an error naming the file.
        ignore_index: label of unlabelled voxels (and of the pad).
        patch: training patch ``(d, h, w)``, cropped at random; ``None``: whole volumes.
        flip: probability of mirroring each spatial axis (0: none).
        skip_bad: an unreadable or inconsistent case yields ``None`` with a warning.
        channels: the channel count every case must have (a case with another is a bad
            case); ``None``: the count most cases have (:func:`common_channels`).

    Raises:
        FileNotFoundError: a missing folder, no cases, or a case without its mask/modality.
        ModuleNotFoundError: NIfTI files and no nibabel.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        split: str = "train",
        *,
        modalities: Sequence[str] = (),
        label_map: Mapping[int, int] | None = None,
        num_classes: int | None = None,
        ignore_index: int = 255,
        patch: Sequence[int] | None = None,
        flip: float = 0.0,
        skip_bad: bool = False,
        channels: int | None = None,
    ) -> None:
        self.root, self.split, self.skip_bad = Path(root), split, skip_bad
        image_dir, mask_dir = split_dirs(self.root, split)
        self.cases, self.images = _find_cases(image_dir, tuple(modalities))
        masks = {_stem(p): p for p in mask_dir.iterdir() if _suffix(p)}
        self.masks = []
        for case in self.cases:
            mask = masks.get(case, masks.get(f"{case}_seg"))
            if mask is None:
                raise FileNotFoundError(
                    f"root: case {case!r} has no mask in {mask_dir} (expected {case}.npy, "
                    f"{case}.nii.gz or {case}_seg.nii.gz)"
                )
            self.masks.append(mask)
        if any(_suffix(p) != ".npy" for p in [*self.masks, *(f for fs in self.images for f in fs)]):
            try:
                import nibabel  # noqa: F401
            except ImportError:
                raise ModuleNotFoundError(
                    f"data: NIfTI volumes in {self.root / split} need nibabel: {NIFTI_HINT}",
                    name="nibabel",
                ) from None
        self.label_map = {int(k): int(v) for k, v in (label_map or {}).items()}
        self.num_classes, self.ignore_index = num_classes, ignore_index
        self.patch = None if not patch else tuple(int(v) for v in patch)
        self.flip = float(flip)
        self.channels = common_channels(self.images) if channels is None else int(channels)

    def __len__(self) -> int:
        return len(self.cases)

    def read_volume(self, index: int) -> np.ndarray:
        """The raw volume ``(C, D, H, W)`` float32 of case ``index`` (before normalisation)."""
        return read_case(self.images[index], f"case {self.cases[index]}")

    def read_mask(self, index: int) -> np.ndarray:
        """The mask ``(D, H, W)`` int64 of case ``index``, after ``label_map`` (checked)."""
        path = self.masks[index]
        raw = read_volume(path)
        if raw.ndim != 3 or not np.all(np.equal(np.mod(raw, 1), 0)):
            raise ValueError(f"mask {path}: expected integer labels (D, H, W), got {raw.shape}")
        raw = raw.astype(np.int64)
        mask = raw.copy()
        for src, dst in self.label_map.items():
            mask[raw == src] = dst
        check_labels(
            mask, self.num_classes, self.ignore_index, path, " (map it with data.label_map)"
        )
        return mask

    def _item_name(self, index: int) -> str:
        return f"case {self.cases[index]}"

    def _load(self, index: int) -> dict[str, Any]:
        volume = torch.from_numpy(np.ascontiguousarray(self.read_volume(index)))
        if self.channels is not None and volume.shape[0] != self.channels:
            raise ValueError(
                f"{volume.shape[0]} channel(s) where the dataset's cases have {self.channels} "
                f"({', '.join(p.name for p in self.images[index])})"
            )
        mask = torch.from_numpy(self.read_mask(index))
        if tuple(volume.shape[1:]) != tuple(mask.shape):
            raise ValueError(
                f"mask {self.masks[index]}: shape {tuple(mask.shape)} differs from its volume "
                f"{tuple(volume.shape[1:])}"
            )
        volume = zscore_nonzero(volume)
        if self.patch is not None:
            volume, mask = random_patch(volume, mask, self.patch, self.ignore_index)
        if self.flip > 0:
            volume, mask = random_flip(volume, mask, self.flip)
        return {"image": volume.contiguous(), "mask": mask.contiguous(), "index": index}


def _find_cases(image_dir: Path, modalities: tuple[str, ...]) -> tuple[list[str], list[list[Path]]]:
    """Case names and their image files of a folder (:func:`group_cases`)."""
    files = sorted(p for p in image_dir.iterdir() if _suffix(p))
    if not files:
        raise FileNotFoundError(f"root: no volumes ({', '.join(VOLUME_EXTENSIONS)}) in {image_dir}")
    return group_cases(files, modalities)


def group_cases(
    files: Sequence[Path], modalities: Sequence[str] = ()
) -> tuple[list[str], list[list[Path]]]:
    """Case names and their image files, sorted by name: a ``.npy`` file (or, without
    ``modalities``, any file) is one case; NIfTI files ``<case>_<modality>`` are grouped in
    ``modalities`` order.

    Raises:
        FileNotFoundError: a NIfTI file not named for a modality, or a case lacking one.
    """
    cases: dict[str, list[Path]] = {}
    grouped: dict[str, dict[str, Path]] = {}
    for p in map(Path, files):
        stem = _stem(p)
        if _suffix(p) == ".npy" or not modalities:
            cases[stem] = [p]
            continue
        mod = next((m for m in modalities if stem.endswith(f"_{m}")), None)
        if mod is None:
            raise FileNotFoundError(
                f"root: {p.name} is not named <case>_<modality> for data.modalities "
                f"{list(modalities)} (clear data.modalities for one file per case)"
            )
        grouped.setdefault(stem[: -len(mod) - 1], {})[mod] = p
    for case, mods in grouped.items():
        missing = [m for m in modalities if m not in mods]
        if missing:
            raise FileNotFoundError(f"root: case {case!r} lacks modality {missing[0]!r}")
        cases[case] = [mods[m] for m in modalities]
    names = sorted(cases)
    return names, [cases[c] for c in names]


def collate_volumes(
    batch: Sequence[dict[str, Any] | None], ignore_index: int = 255
) -> dict[str, Any]:
    """Stack ``{"image", "mask", "index"}`` items into the batch ``{"image": (B, C, D, H, W),
    "mask": (B, D, H, W), "index": (B,), "skipped": n}``, padding each item at its end to the
    batch's largest size (0 in the volumes, ``ignore_index`` in the masks). ``None`` items are
    dropped and counted in ``"skipped"``; an all-bad batch gives empty tensors."""
    items = [item for item in batch if item is not None]
    skipped = len(batch) - len(items)
    if not items:
        return {"image": torch.empty(0, 1, 0, 0, 0), "index": torch.empty(0),
                "mask": torch.empty(0, 0, 0, 0, dtype=torch.long), "skipped": skipped}  # fmt: skip
    size = [max(item["mask"].shape[a] for item in items) for a in range(3)]
    vols, masks = [], []
    for item in items:
        vol, mask = item["image"], item["mask"]
        spec = [v for s, n in zip(reversed(size), reversed(mask.shape)) for v in (0, s - n)]
        vols.append(F.pad(vol, spec))
        masks.append(F.pad(mask, spec, value=ignore_index))
    index = torch.as_tensor([item["index"] for item in items])
    return {"image": torch.stack(vols), "mask": torch.stack(masks), "index": index,
            "skipped": skipped}  # fmt: skip
