"""Training augmentation of 2D segmentation pairs: random scale, crop and horizontal flip.

The recipe the field trains Cityscapes/VOC models with (torchvision's
``references/segmentation/presets.py``: ``RandomResize`` -> ``RandomHorizontalFlip`` ->
``RandomCrop``; mmsegmentation's Cityscapes pipeline: scale ratio 0.5-2.0, crop 512x1024, flip
0.5): the image and its mask are transformed together, the image bilinearly, the mask by nearest
neighbour (a label is never blended), and a crop larger than the scaled image pads the image with
0 and the mask with ``ignore_index`` (255), so the pad never counts in the loss.

Images arrive normalised (``(x - mean) / std``), so a pad of 0 is the mean colour.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

__all__ = ["SegmentationAugment", "random_scale", "random_crop_pad", "random_hflip"]


def random_scale(
    image: torch.Tensor,
    mask: torch.Tensor,
    scale_range: Sequence[float],
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Resize ``image`` ``(C, H, W)`` (bilinear) and ``mask`` ``(H, W)`` (nearest) by one factor
    drawn uniformly from ``scale_range`` ``(lo, hi)``; sizes are rounded, at least 1 pixel."""
    lo, hi = float(scale_range[0]), float(scale_range[1])
    s = lo + (hi - lo) * float(torch.rand((), generator=generator))
    h, w = mask.shape
    size = (max(1, round(h * s)), max(1, round(w * s)))
    if size == (h, w):
        return image, mask
    image = F.interpolate(image[None], size=size, mode="bilinear", align_corners=False)[0]
    mask = F.interpolate(mask[None, None].float(), size=size, mode="nearest")[0, 0]
    return image, mask.to(torch.int64)


def random_crop_pad(
    image: torch.Tensor,
    mask: torch.Tensor,
    crop: Sequence[int],
    ignore_index: int = 255,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A ``crop`` ``(h, w)`` window at a uniform position; an image smaller than the crop is
    padded at its bottom/right first (0 in the image, ``ignore_index`` in the mask), as
    torchvision's reference ``RandomCrop`` pads (fill 0 / 255)."""
    ch, cw = int(crop[0]), int(crop[1])
    h, w = mask.shape
    ph, pw = max(ch - h, 0), max(cw - w, 0)
    if ph or pw:
        image = F.pad(image, (0, pw, 0, ph))
        mask = F.pad(mask, (0, pw, 0, ph), value=ignore_index)
    h, w = mask.shape
    top = int(torch.randint(h - ch + 1, (1,), generator=generator))
    left = int(torch.randint(w - cw + 1, (1,), generator=generator))
    return image[:, top : top + ch, left : left + cw], mask[top : top + ch, left : left + cw]


def random_hflip(
    image: torch.Tensor,
    mask: torch.Tensor,
    p: float = 0.5,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mirror image and mask left-right together with probability ``p``."""
    if p > 0 and float(torch.rand((), generator=generator)) < p:
        return image.flip(-1), mask.flip(-1)
    return image, mask


class SegmentationAugment:
    """``f(image, mask) -> (image, mask)``: random scale, then flip, then crop (each optional).

    The ``transform`` of :class:`~nlnet.data.segmentation.images.SegmentationFolder` in training, built
    by the segmentation task from ``data.scale_range``, ``data.flip`` and ``data.crop``.

    Args:
        scale_range: ``(lo, hi)`` scale factors (e.g. ``(0.5, 2.0)``); empty: no rescaling.
        crop: ``(h, w)`` training crop; empty: the whole (scaled) image.
        flip: probability of a horizontal flip (0: never).
        ignore_index: mask value of the pad.
        generator: random source (``None``: torch's global generator, seeded per worker).
    """

    def __init__(
        self,
        scale_range: Sequence[float] = (),
        crop: Sequence[int] = (),
        flip: float = 0.0,
        ignore_index: int = 255,
        generator: torch.Generator | None = None,
    ) -> None:
        if scale_range and (len(scale_range) != 2 or not 0 < scale_range[0] <= scale_range[1]):
            raise ValueError(
                f"scale_range: expected (lo, hi) with 0 < lo <= hi, got {scale_range!r}"
            )
        if crop and (len(crop) != 2 or min(crop) < 1):
            raise ValueError(f"crop: expected 2 positive sizes (h, w), got {crop!r}")
        if not 0 <= flip <= 1:
            raise ValueError(f"flip: expected a probability in [0, 1], got {flip!r}")
        self.scale_range = tuple(float(v) for v in scale_range)
        self.crop = tuple(int(v) for v in crop)
        self.flip = float(flip)
        self.ignore_index = int(ignore_index)
        self.generator = generator

    def __call__(
        self, image: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.scale_range:
            image, mask = random_scale(image, mask, self.scale_range, self.generator)
        image, mask = random_hflip(image, mask, self.flip, self.generator)
        if self.crop:
            image, mask = random_crop_pad(image, mask, self.crop, self.ignore_index, self.generator)
        return image.contiguous(), mask.contiguous()

    def __repr__(self) -> str:
        return (
            f"SegmentationAugment(scale_range={self.scale_range}, crop={self.crop}, "
            f"flip={self.flip}, ignore_index={self.ignore_index})"
        )
