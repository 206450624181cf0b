"""The training and test-time views of an image classifier (ImageNet's recipe).

Test time, one home for training's validation, ``nlnet eval`` and ``nlnet predict``: shorter side
resized to ``size``, the centre ``crop x crop`` kept, converted to ``[0, 1]`` and normalised by
``mean``/``std``.  Training: a random resized crop and an optional horizontal flip, then the same
conversion and normalisation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["image_test_transform", "image_train_transform"]


def image_test_transform(size: int, crop: int, mean: Sequence[float], std: Sequence[float]) -> Any:
    """A torchvision ``Compose``: PIL image ``(H, W)`` -> float tensor ``(3, crop, crop)``."""
    from torchvision import transforms as T

    return T.Compose(
        [T.Resize(size, antialias=True), T.CenterCrop(crop), T.ToTensor(), T.Normalize(mean, std)]
    )


def image_train_transform(
    size: int, min_scale: float, hflip: bool, mean: Sequence[float], std: Sequence[float]
) -> Any:
    """A torchvision ``Compose``: PIL image -> float tensor ``(3, size, size)``.

    Args:
        size: side of the square random resized crop.
        min_scale: smallest area fraction of the crop (the largest is the whole image).
        hflip: add a random horizontal flip (probability 0.5).
        mean: per-channel normalisation mean on the ``[0, 1]`` scale.
        std: per-channel normalisation standard deviation on the ``[0, 1]`` scale.
    """
    from torchvision import transforms as T

    aug = [T.RandomResizedCrop(size, scale=(min_scale, 1.0), antialias=True)]
    aug += [T.RandomHorizontalFlip()] if hflip else []
    return T.Compose([*aug, T.ToTensor(), T.Normalize(mean, std)])
