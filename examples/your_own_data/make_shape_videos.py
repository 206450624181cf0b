"""Write a small class-per-folder set of moving-shape mp4 videos, to try ``nlnet train`` on.

Three classes by the shape of a bright object that moves in a random direction over a noisy
background: ``disk``, ``square`` and ``triangle`` (random size, colour, start and velocity).

    python examples/your_own_data/make_shape_videos.py data/shapes --train 16 --val 8

writes ``data/shapes/{train,val}/<class>/<i>.mp4`` (16 frames of 64x64 each).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import av
import numpy as np

CLASSES = ("disk", "square", "triangle")


def _mask(kind: str, yy: np.ndarray, xx: np.ndarray, y: float, x: float, r: float) -> np.ndarray:
    if kind == "disk":
        return (yy - y) ** 2 + (xx - x) ** 2 <= r * r
    if kind == "square":
        return (np.abs(yy - y) <= r * 0.85) & (np.abs(xx - x) <= r * 0.85)
    return (yy - y <= r * 0.8) & (yy - y >= -r) & (np.abs(xx - x) <= (yy - y + r) * 0.6)


def shape_video(kind: str, rng: np.random.Generator, frames: int = 16, size: int = 64
                ) -> np.ndarray:  # fmt: skip
    """uint8 (T, H, W, 3): a ``kind`` of random size/colour moving at a random velocity."""
    yy, xx = np.mgrid[:size, :size]
    r = rng.uniform(6, 10)
    color = rng.uniform(150, 255, size=3)
    y0, x0 = rng.uniform(r + 2, size - r - 2, size=2)
    vy, vx = rng.uniform(-2.5, 2.5, size=2)
    out = np.empty((frames, size, size, 3), dtype=np.uint8)
    for t in range(frames):
        y = np.clip(y0 + vy * (t - frames / 2), r, size - r)
        x = np.clip(x0 + vx * (t - frames / 2), r, size - r)
        img = rng.integers(0, 70, size=(size, size, 3)).astype(np.float64)
        img[_mask(kind, yy, xx, y, x, r)] = color
        out[t] = img.astype(np.uint8)
    return out


def write_mp4(path: Path, frames: np.ndarray, fps: int = 8) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.bit_rate = 2_000_000
        for f in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--train", type=int, default=16, help="videos per class (train)")
    parser.add_argument("--val", type=int, default=8, help="videos per class (val)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    for split, n in (("train", args.train), ("val", args.val)):
        for kind in CLASSES:
            for i in range(n):
                write_mp4(args.root / split / kind / f"{i:03d}.mp4", shape_video(kind, rng))
    print(f"wrote {len(CLASSES) * (args.train + args.val)} videos under {args.root}")


if __name__ == "__main__":
    main()
