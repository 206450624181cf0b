"""The test-time view of an image classifier (ImageNet's recipe), one home for training's
validation, ``nlnet eval`` and ``nlnet predict``: shorter side resized to ``size``, the centre
``crop x crop`` kept, converted to ``[0, 1]`` and normalised by ``mean``/``std``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["image_test_transform"]


def image_test_transform(size: int, crop: int, mean: Sequence[float], std: Sequence[float]) -> Any:
    """A torchvision ``Compose``: PIL image ``(H, W)`` -> float tensor ``(3, crop, crop)``."""
    from torchvision import transforms as T

    return T.Compose(
        [T.Resize(size, antialias=True), T.CenterCrop(crop), T.ToTensor(), T.Normalize(mean, std)]
    )
