"""Image classification items (:class:`ImageItems`) and scikit-learn's built-in digit images
(:func:`digits_images`), the dataset of ``task: image_classification`` (:mod:`nlnet.data.images.config`)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

from torch.utils.data import Dataset

__all__ = ["ImageItems", "digits_images"]


def digits_images(split: str, seed: int = 0) -> tuple[list[Any], list[int], list[str]]:
    """scikit-learn's 1,797 digit images as RGB PIL images, a stratified 80/20 split.

    Args:
        split: ``"train"`` (80%), anything else the held-out 20%.
        seed: the seed of the split.

    Returns:
        The images (8x8 RGB PIL images), their class ids and the class names ``"0"`` .. ``"9"``.
    """
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    idx = np.arange(len(d.target))
    train_idx, val_idx = train_test_split(idx, test_size=0.2, random_state=seed,
                                          stratify=d.target)  # fmt: skip
    chosen = train_idx if split == "train" else val_idx
    imgs = [Image.fromarray((d.images[i] * (255 / 16)).astype("uint8")).convert("RGB")
            for i in chosen]  # fmt: skip
    return imgs, [int(d.target[i]) for i in chosen], [str(c) for c in range(10)]


class ImageItems(Dataset):
    """``{"clip": image (3, S, S), "target", "index"}`` items (the keys of the video items,
    collated by :func:`nlnet.data.video.batches.collate_skip_bad`); an unreadable file gives
    ``None`` with a warning naming it (dropped by the collate function and counted).

    Args:
        samples: image file paths or PIL images.
        targets: the class id of each sample.
        classes: the class names (``num_classes`` is their number).
        transform: PIL image -> tensor (:mod:`nlnet.data.images.transforms`).
    """

    def __init__(self, samples: Sequence[Any], targets: Sequence[int], classes: Sequence[str],
                 transform: Any) -> None:  # fmt: skip
        self.samples, self.targets = list(samples), list(targets)
        self.classes, self.transform = list(classes), transform
        self.num_classes = len(self.classes)
        self.bad: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Any:
        from torchvision.datasets.folder import default_loader

        sample = self.samples[index]
        try:
            img = default_loader(sample) if isinstance(sample, (str, os.PathLike)) else sample
            return {"clip": self.transform(img), "target": self.targets[index], "index": index}
        except (OSError, ValueError, SyntaxError) as exc:  # PIL raises these for broken files
            if index not in self.bad:  # named once per process (a worker is a process)
                warnings.warn(f"skipping image {str(sample)!r}: {type(exc).__name__}: {exc}",
                              stacklevel=2)  # fmt: skip
            self.bad[index] = f"{type(exc).__name__}: {exc}"
            return None
