"""A class-per-folder set of short mp4 videos whose classes differ only in the ORDER of frames
(importable by the tests; not a test module).

Four classes in two pairs; inside a pair a video of one class is a video of the other played
backwards, so both classes have the same bag of frames:

* ``right`` / ``left``: a square of random size and colour moving horizontally;
* ``appear`` / ``vanish``: a still disk that appears (vanishes) halfway through the video.

The videos have 8 frames, the clip length of ``smoke/folder_tiny``: every clip is a whole video,
so the two classes of a pair give exactly the same frames in a different order, and a model blind
to frame order (C2D with a non-local block and a temporal average) can tell the pairs apart but
never the two classes inside a pair: 50 % at best on the four classes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nlnet.data.video_io.backends import write_video

CLASSES: tuple[str, ...] = ("appear", "left", "right", "vanish")

#: lossless H.264 (every frame decodes to the same pixels whatever its neighbours): a lossy
#: codec's rate control quantises a frame by its place in the video, so a reversed video would
#: not decode to the same frames reversed and an order-blind model could tell the pair apart
LOSSLESS: dict[str, object] = {"codec": "libx264", "crf": 0, "pix_fmt": "yuv444p"}


def _background(rng: np.random.Generator, frames: int, size: int) -> np.ndarray:
    return rng.integers(0, 60, size=(frames, size, size, 3)).astype(np.uint8)


def moving_square(rng: np.random.Generator, frames: int = 8, size: int = 40) -> np.ndarray:
    """uint8 ``(T, H, W, 3)``: a square moving to the right at 2-3 pixels a frame."""
    out = _background(rng, frames, size)
    side = int(rng.integers(8, 13))
    color = rng.integers(150, 256, size=3).astype(np.uint8)
    speed = rng.uniform(2.0, 3.0)
    y = int(rng.integers(0, size - side))
    x0 = rng.uniform(0, size - side - speed * (frames - 1))
    for t in range(frames):
        x = int(round(x0 + speed * t))
        out[t, y : y + side, x : x + side] = color
    return out


def appearing_disk(rng: np.random.Generator, frames: int = 8, size: int = 40) -> np.ndarray:
    """uint8 ``(T, H, W, 3)``: a still disk present from frame ``T // 2`` on."""
    out = _background(rng, frames, size)
    r = rng.uniform(5, 8)
    color = rng.integers(150, 256, size=3).astype(np.uint8)
    cy, cx = rng.uniform(r, size - r, size=2)
    yy, xx = np.mgrid[:size, :size]
    mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
    out[frames // 2 :, mask] = color
    return out


def order_video(name: str, rng: np.random.Generator, frames: int = 8, size: int = 40) -> np.ndarray:
    """One video of class ``name`` (one of :data:`CLASSES`)."""
    if name in ("right", "left"):
        x = moving_square(rng, frames, size)
    elif name in ("appear", "vanish"):
        x = appearing_disk(rng, frames, size)
    else:
        raise ValueError(f"name: expected one of {CLASSES}, got {name!r}")
    return x[::-1].copy() if name in ("left", "vanish") else x


def order_tree(root: Path, train: int = 20, val: int = 6, frames: int = 8, size: int = 40,
               seed: int = 0) -> Path:  # fmt: skip
    """``root/{train,val}/<class>/<i>.mp4``: ``train`` / ``val`` videos per class of
    :data:`CLASSES` (``frames`` frames of ``size x size``), lossless H.264 at 10 fps."""
    rng = np.random.default_rng(seed)
    for split, n in (("train", train), ("val", val)):
        for name in CLASSES:
            for i in range(n):
                path = root / split / name / f"{i:03d}.mp4"
                write_video(path, order_video(name, rng, frames, size), fps=10, **LOSSLESS)
    return root
