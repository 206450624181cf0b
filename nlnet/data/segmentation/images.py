"""Semantic segmentation data: a folder of images and a folder of label masks.

Layout (the Cityscapes/VOC convention reduced to its essentials)::

    root/<split>/images/<name>.png|jpg    RGB (or grey) images
    root/<split>/masks/<name>.png         one class id per pixel (uint8 or uint16 PNG),
                                          ``ignore_index`` (255) for pixels without a label

An image and its mask share the file stem. Items are dicts ``{"image", "mask", "index"}``:
``image`` float ``(3, H, W)`` normalised with ``mean``/``std``, ``mask`` int64 ``(H, W)``. Images of different
sizes are allowed; :func:`collate_segmentation` stacks equal-sized items (resize or crop them with
``transform`` first otherwise).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = ["SegmentationFolder", "collate_segmentation", "IMAGE_EXTENSIONS"]

IMAGE_EXTENSIONS: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")


def check_labels(
    mask: np.ndarray, num_classes: int | None, ignore_index: int, source: object, hint: str = ""
) -> None:
    """Raise ``ValueError`` naming ``source`` if a mask value is neither a class in
    ``[0, num_classes)`` nor ``ignore_index`` (nothing to check without ``num_classes``)."""
    if num_classes is None:
        return
    bad = ((mask < 0) | (mask >= num_classes)) & (mask != ignore_index)
    if bad.any():
        raise ValueError(
            f"mask {source}: value {int(mask[bad][0])} outside [0, {num_classes}) and not "
            f"ignore_index={ignore_index}{hint}"
        )


def split_dirs(root: Path, split: str) -> tuple[Path, Path]:
    """``root/<split>/images`` and ``root/<split>/masks``; a missing one is a
    ``FileNotFoundError`` naming it."""
    image_dir, mask_dir = root / split / "images", root / split / "masks"
    for d in (image_dir, mask_dir):
        if not d.is_dir():
            raise FileNotFoundError(
                f"root: expected the folder {d} (layout root/<split>/images and root/<split>/masks)"
            )
    return image_dir, mask_dir


class SkipBadItems:
    """``dataset[i]`` is ``self._load(i)``, or ``None`` with a warning when ``self.skip_bad``
    and the item's files cannot be read (``OSError``/``ValueError``): the collate function
    drops it and counts it."""

    skip_bad: bool

    def _load(self, index: int):  # pragma: no cover - implemented by the dataset
        raise NotImplementedError

    def _item_name(self, index: int) -> str:  # pragma: no cover - implemented by the dataset
        raise NotImplementedError

    def __getitem__(self, index: int):
        if not self.skip_bad:
            return self._load(index)
        try:
            return self._load(index)
        except (OSError, ValueError) as exc:
            warnings.warn(f"skipping {self._item_name(index)}: {exc}", stacklevel=2)
            return None


class SegmentationFolder(SkipBadItems, Dataset):
    """Images and label masks from ``root/<split>/{images,masks}``.

    Args:
        root: dataset root.
        split: sub-folder (``"train"``, ``"val"``, ...).
        mean, std: per-channel normalisation of images scaled to [0, 1].
        num_classes: when given, a mask value outside ``[0, num_classes)`` other than
            ``ignore_index`` is an error naming the file.
        ignore_index: label of unlabelled pixels.
        transform: optional ``f(image, mask) -> (image, mask)`` on the tensors (e.g. flips).
        skip_bad: an unreadable or inconsistent image/mask pair yields ``None`` with a warning
            (dropped and counted by the training engine) instead of raising.

    Raises:
        FileNotFoundError: a missing folder or an image without a mask.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        split: str = "train",
        *,
        mean: Sequence[float] = (0.5, 0.5, 0.5),
        std: Sequence[float] = (0.25, 0.25, 0.25),
        num_classes: int | None = None,
        ignore_index: int = 255,
        transform: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
        | None = None,
        skip_bad: bool = False,
    ) -> None:
        self.root = Path(root)
        self.skip_bad = skip_bad
        self.split = split
        self.images, self.masks = self.find_pairs(self.root, split)
        self.mean = torch.tensor(mean, dtype=torch.float32).view(-1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(-1, 1, 1)
        self.num_classes = num_classes
        self.ignore_index = ignore_index
        self.transform = transform

    @staticmethod
    def find_pairs(root: Path, split: str) -> tuple[list[Path], list[Path]]:
        """The image files of ``split`` and their masks, in order (a layout's one difference:
        :class:`~nlnet.data.segmentation.cityscapes.CityscapesFolder` overrides it).

        Raises:
            FileNotFoundError: a missing folder, no images, or an image without a mask.
        """
        image_dir, mask_dir = split_dirs(root, split)
        images = sorted(p for p in image_dir.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
        if not images:
            raise FileNotFoundError(f"root: no images in {image_dir}")
        masks = {p.stem: p for p in mask_dir.iterdir() if p.suffix.lower() == ".png"}
        missing = [p for p in images if p.stem not in masks]
        if missing:
            other = sorted(q.name for q in mask_dir.glob(f"{missing[0].stem}.*"))
            why = (f" (found {other[0]}: masks are PNG files of class ids; JPEG's compression "
                   "changes the ids)") if other else ""  # fmt: skip
            raise FileNotFoundError(
                f"root: {len(missing)} image(s) without a mask in {mask_dir}, e.g. "
                f"{missing[0].name}{why}"
            )
        return images, [masks[p.stem] for p in images]

    def __len__(self) -> int:
        return len(self.images)

    def read_image(self, index: int) -> np.ndarray:
        """The raw RGB image ``(H, W, 3)`` uint8 of item ``index`` (for pictures)."""
        from PIL import Image

        with Image.open(self.images[index]) as im:
            return np.asarray(im.convert("RGB"))

    def read_mask(self, index: int) -> np.ndarray:
        from PIL import Image

        with Image.open(self.masks[index]) as im:
            mask = np.asarray(im)
        if mask.ndim != 2:
            raise ValueError(
                f"mask {self.masks[index]}: expected a single-channel PNG of class ids, got "
                f"{mask.shape[-1]} channels (a colour picture: save the class id of each pixel, "
                "e.g. as a palette or grey-level PNG)"
            )
        check_labels(mask, self.num_classes, self.ignore_index, self.masks[index])
        return mask

    def _item_name(self, index: int) -> str:
        return str(self.images[index])

    def _load(self, index: int) -> dict[str, Any]:
        image = torch.from_numpy(self.read_image(index).copy()).permute(2, 0, 1).float() / 255.0
        image = (image - self.mean) / self.std  # (3, H, W)
        mask = torch.from_numpy(self.read_mask(index).astype(np.int64))  # (H, W)
        if image.shape[-2:] != mask.shape:
            raise ValueError(
                f"mask {self.masks[index]}: size {tuple(mask.shape)} differs from its image "
                f"{tuple(image.shape[-2:])}"
            )
        if self.transform is not None:
            image, mask = self.transform(image, mask)
        return {"image": image, "mask": mask, "index": index}


def collate_segmentation(batch: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """Stack ``{"image", "mask", "index"}`` items into the batch ``{"image": (B, 3, H, W),
    "mask": (B, H, W), "index": (B,), "skipped": n}``.

    ``None`` items (bad files of a ``skip_bad`` folder) are dropped and counted in
    ``"skipped"``; an all-bad batch gives empty tensors.
    """
    items = [item for item in batch if item is not None]
    skipped = len(batch) - len(items)
    if not items:
        return {"image": torch.empty(0, 3, 0, 0), "mask": torch.empty(0, 0, 0, dtype=torch.long),
                "index": torch.empty(0), "skipped": skipped}  # fmt: skip
    return {
        "image": torch.stack([it["image"] for it in items]),
        "mask": torch.stack([it["mask"] for it in items]),
        "index": torch.as_tensor([it["index"] for it in items]),
        "skipped": skipped,
    }
