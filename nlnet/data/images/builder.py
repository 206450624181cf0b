"""The dataset of an image-classification split: a class-per-folder tree (torchvision's
``ImageFolder`` layout, ``root/<split>/<class>/<image>``) or scikit-learn's built-in digits."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from nlnet.data.images.config import ImageDataConfig
from nlnet.data.images.dataset import ImageItems, digits_images

__all__ = ["build_image_dataset"]


def build_image_dataset(
    data: ImageDataConfig, split: str, transform: Callable[[Any], Any], seed: int = 0
) -> ImageItems:
    """The images of ``split`` with their class indices, through ``transform``.

    Args:
        data: the ``data`` section (``root`` or ``builtin: digits``).
        split: the split's folder under ``data.root`` (or the digits split).
        transform: the view of an image (training or test transforms).
        seed: the digits' split seed (``train.seed``).

    Raises:
        ValueError: a missing or unreadable split folder, or one without an image (one line
            naming the folder and the layout expected).
    """
    if data.builtin == "digits":
        imgs, targets, classes = digits_images(split, seed)
        return ImageItems(imgs, targets, classes, transform)
    from torchvision.datasets.folder import IMG_EXTENSIONS, make_dataset

    from nlnet.data.class_folders import split_classes, training_splits

    root = os.path.expanduser(data.root)
    folder = os.path.join(root, split)
    try:
        classes = split_classes(root, split)  # the training splits' classes, checked
        to_idx = {c: i for i, c in enumerate(classes)}
        held_out = split not in training_splits(root)  # may lack some training classes
        found = make_dataset(folder, to_idx, IMG_EXTENSIONS, allow_empty=held_out)
    except (FileNotFoundError, OSError, ValueError) as exc:
        raise ValueError(f"data.root (split {split!r}): {exc} (expected "
                         f"{folder}/<class>/<image>)") from None  # fmt: skip
    if not found:
        raise ValueError(f"data.root (split {split!r}): no image in {folder}/<class>/")
    paths, targets = zip(*found)
    return ImageItems(paths, targets, classes, transform, from_folders=True)
