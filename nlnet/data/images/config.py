"""The typed ``data`` section of ``task: image_classification`` (class-per-folder images or scikit-learn's
digits), beside the image dataset it configures (:mod:`nlnet.data.images.dataset`).

A bad value is a ``ValueError`` naming the key (``data.<key>: expected ..., got ...``); the
engine reports it as its one-line config error.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BUILTIN_IMAGE_SETS", "ImageDataConfig"]

#: The image sets ``data.builtin`` may name (shipped in pip packages, no download).
BUILTIN_IMAGE_SETS = ("digits",)


@dataclass(frozen=True)
class ImageDataConfig:
    """The ``data`` section of ``task: image_classification`` (checked when the config is loaded).

    Attributes:
        root: ImageFolder root (``root/<split>/<class>/*.png|jpg``); or ``None`` with ``builtin``.
        builtin: ``"digits"`` (scikit-learn's digit images, 80/20 train/val split, seeded).
        size: side of the square crop given to the model (224 for the ImageNet models).
        resize: test-time shorter side before the center crop (default ``size * 8 / 7``, the
            ImageNet 256/224 ratio).
        min_scale: smallest area fraction of the training random resized crop.
        hflip: random horizontal flips in training.
        mean: normalisation mean; ``None``: the model's (ImageNet statistics).
        std: normalisation standard deviation; ``None``: the model's (ImageNet statistics).

    The splits are ``train.split`` / ``train.val_split`` / ``eval.split`` (folders under root).
    """

    root: str | None = None
    builtin: str | None = None
    size: int = 224
    resize: int | None = None
    min_scale: float = 0.35
    hflip: bool = True
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if (self.root is None) == (self.builtin is None):
            raise ValueError("data: task image_classification needs exactly one of data.root (an image "
                             "folder: root/<split>/<class>/*.png) or data.builtin: digits")  # fmt: skip
        if self.builtin is not None and self.builtin not in BUILTIN_IMAGE_SETS:
            raise ValueError(f"data.builtin: expected one of {', '.join(BUILTIN_IMAGE_SETS)}, "
                             f"got {self.builtin!r}")  # fmt: skip
        if self.size < 8 or (self.resize is not None and self.resize < self.size):
            raise ValueError(f"data.size/resize: expected size >= 8 and resize >= size, got "
                             f"{self.size}/{self.resize}")  # fmt: skip
        if not 0 < self.min_scale <= 1:
            raise ValueError(f"data.min_scale: expected a number in (0, 1], got {self.min_scale}")
        for key in ("mean", "std"):
            v = getattr(self, key)
            if v is not None and (len(v) != 3 or (key == "std" and min(v) <= 0)):
                raise ValueError(f"data.{key}: expected 3 numbers (std > 0), got {list(v)}")
