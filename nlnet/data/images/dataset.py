"""Image classification items (:class:`ImageItems`) and scikit-learn's built-in digit images
(:func:`digits_images`), the dataset of ``task: image_classification`` (:mod:`nlnet.data.images.config`)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

from torch.utils.data import Dataset

from nlnet.data.class_folders import classes_without_items

__all__ = ["ImageItems", "animated_frames", "digits_images", "is_animated", "read_rgb"]


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


def read_rgb(path: str | os.PathLike) -> Any:
    """An image file as an 8-bit RGB PIL image, as a camera shows it: turned by its EXIF
    orientation (phone photos; a malformed EXIF block is ignored), and 16-bit, 32-bit int or
    float pixels scaled to 8 bits (Pillow's own conversion clips a 16-bit PNG at 255, an
    all-white image, and a float image in [0, 1] to black): integers up to 255 are kept, larger
    ones scaled by 255 / 65535 (by 255 / their maximum above 65535); floats up to 1 scaled by
    255; NaN and infinities are 0.

    Raises:
        OSError, ValueError, SyntaxError: Pillow's errors for a file that is not a readable image.
    """
    from PIL import Image

    with Image.open(path) as opened:
        im = _upright(opened)
        if not im.mode.startswith(("I", "F")):
            return im.convert("RGB")
        return Image.fromarray(_to_uint8(im)).convert("RGB")


def animated_frames(path: str | os.PathLike) -> Any:
    """The frames of an animated image (GIF, WebP, APNG) as uint8 ``(T, H, W, 3)`` RGB, each
    frame as the viewer shows it (Pillow composes a GIF's partial frames); ``None`` for an
    image of one frame.

    Raises:
        OSError, ValueError, SyntaxError: Pillow's errors for a file that is not a readable image.
    """
    import numpy as np
    from PIL import Image, ImageSequence

    with Image.open(path) as opened:
        if getattr(opened, "n_frames", 1) < 2:
            return None
        return np.stack([np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(opened)])


def is_animated(path: str | os.PathLike) -> bool:
    """Whether an image file holds more than one frame (an animated GIF, WebP or PNG), from
    its header (nothing decoded).

    Raises:
        OSError, ValueError, SyntaxError: Pillow's errors for a file that is not a readable image.
    """
    from PIL import Image

    with Image.open(path) as opened:
        return getattr(opened, "n_frames", 1) > 1


def _upright(im: Any) -> Any:
    """``im`` turned by its EXIF orientation (itself where it has none or a malformed one:
    Pillow's ``exif_transpose`` has raised KeyError, ZeroDivisionError, IndexError on such)."""
    from PIL import ImageOps

    try:
        if im.getexif().get(0x0112, 1) == 1:
            return im
        return ImageOps.exif_transpose(im)
    except Exception:  # noqa: BLE001  (a photo readable without its EXIF stays readable)
        return im


def _to_uint8(im: Any) -> Any:
    """uint8 ``(H, W)`` of a Pillow ``I;16*``, ``I`` or ``F`` image (scaling: :func:`read_rgb`)."""
    import numpy as np

    x = np.asarray(im, dtype=np.float64)
    x = np.where(np.isfinite(x), x, 0.0)
    top = float(x.max(initial=0.0))
    if im.mode == "F" and top <= 1.0:
        scale = 255.0
    elif top <= 255.0:
        scale = 1.0
    else:
        scale = 255.0 / max(top, 65535.0)
    return np.clip(np.rint(x * scale), 0, 255).astype(np.uint8)


class ImageItems(Dataset):
    """``{"clip": image (3, S, S), "target", "index"}`` items (the keys of the video items,
    collated by :func:`nlnet.data.video.batches.collate_skip_bad`); an unreadable file gives
    ``None`` with a warning naming it (dropped by the collate function and counted).

    Args:
        samples: image file paths or PIL images.
        targets: the class id of each sample.
        classes: the class names (``num_classes`` is their number).
        transform: PIL image -> tensor (:mod:`nlnet.data.images.transforms`).
        from_folders: the classes are the sorted class folders of the samples (then a class
            with no sample is refused for training, :meth:`classes_without_items`).
    """

    def __init__(self, samples: Sequence[Any], targets: Sequence[int], classes: Sequence[str],
                 transform: Any, *, from_folders: bool = False) -> None:  # fmt: skip
        self.samples, self.targets = list(samples), list(targets)
        self.classes, self.transform = list(classes), transform
        self.num_classes = len(self.classes)
        self.bad: dict[int, str] = {}
        self.from_folders = from_folders  # the classes are the sorted class folders

    def __len__(self) -> int:
        return len(self.samples)

    def classes_without_items(self) -> list[str]:
        """Class names no sample has, for class folders only (an unreadable file is found
        only when read)."""
        return classes_without_items(self.classes, self.targets) if self.from_folders else []

    def __getitem__(self, index: int) -> Any:
        sample = self.samples[index]
        try:
            img = read_rgb(sample) if isinstance(sample, (str, os.PathLike)) else sample
            return {"clip": self.transform(img), "target": self.targets[index], "index": index}
        except (OSError, ValueError, SyntaxError) as exc:  # PIL raises these for broken files
            if index not in self.bad:  # named once per process (a worker is a process)
                warnings.warn(f"skipping image {str(sample)!r}: {type(exc).__name__}: {exc}",
                              stacklevel=2)  # fmt: skip
            self.bad[index] = f"{type(exc).__name__}: {exc}"
            return None
