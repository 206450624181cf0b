"""The common interface of the video decoding backends (:mod:`nlnet.data.video_io.backends`).

:class:`VideoReader` addresses frames by their index in presentation order and returns
``uint8`` ``(T, H, W, 3)`` RGB tensors; a backend implements only the decoding of a sorted list
of indices. :class:`VideoInfo` is what a probe learns without decoding pixels, and
:class:`VideoDecodeError` names the file that could not be opened or decoded.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

PathLike = str | os.PathLike


class VideoDecodeError(RuntimeError):
    """A video file could not be opened or decoded.

    Attributes:
        path: the file that failed.
        reason: what went wrong (the underlying decoder's message when there is one).
    """

    def __init__(self, path: PathLike, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"cannot decode video {self.path!r}: {reason}")


@dataclass(frozen=True)
class VideoInfo:
    """What a probe learns about a video without decoding pixels.

    Attributes:
        num_frames: exact number of frames in presentation order.
        fps: average frame rate (frames per second); 0.0 when unknown.
        height: frame height in pixels.
        width: frame width in pixels.
    """

    num_frames: int
    fps: float
    height: int
    width: int


def _as_index_list(
    indices: Sequence[int] | torch.Tensor | np.ndarray, num_frames: int
) -> list[int]:
    if isinstance(indices, torch.Tensor | np.ndarray):
        if indices.ndim != 1:
            raise ValueError(f"indices must be one-dimensional, got shape {tuple(indices.shape)}")
        indices = indices.tolist()
    out = [int(i) for i in indices]
    if not out:
        raise ValueError("indices must not be empty")
    bad = [i for i in out if i < 0 or i >= num_frames]
    if bad:
        raise IndexError(
            f"frame indices must lie in [0, {num_frames - 1}] for a video of {num_frames} frames, "
            f"got {bad[:5]}"
        )
    return out


class VideoReader:
    """Common interface of the decoding backends; use :func:`open_video` to create one.

    A reader is a context manager; :meth:`close` releases the file.
    """

    backend: str = ""

    def __init__(self, path: PathLike) -> None:
        self.path = str(path)

    # -- metadata ------------------------------------------------------------------------------
    @property
    def num_frames(self) -> int:
        """Exact number of frames (presentation order)."""
        raise NotImplementedError

    @property
    def fps(self) -> float:
        """Average frame rate; 0.0 when the container does not say."""
        raise NotImplementedError

    @property
    def info(self) -> VideoInfo:
        """:class:`VideoInfo` of the video."""
        raise NotImplementedError

    # -- decoding ------------------------------------------------------------------------------
    def get_frames(self, indices: Sequence[int] | torch.Tensor | np.ndarray) -> torch.Tensor:
        """Decodes the frames at ``indices`` (any order, repeats allowed).

        Only the span between the smallest and the largest index is decoded, starting from the
        nearest keyframe before it.

        Args:
            indices: frame indices in ``[0, num_frames)``.

        Returns:
            ``uint8`` tensor ``(len(indices), H, W, 3)``, RGB, in the order of ``indices``.

        Raises:
            IndexError: an index is out of range.
            VideoDecodeError: the decoder failed.
        """
        wanted = _as_index_list(indices, self.num_frames)
        unique = sorted(set(wanted))
        frames = self._decode_sorted(unique)  # (U, H, W, 3)
        if len(unique) == len(wanted) and unique == wanted:
            return frames
        pos = {f: k for k, f in enumerate(unique)}
        return frames[torch.tensor([pos[i] for i in wanted], dtype=torch.long)]

    def get_range(self, start: int, stop: int, step: int = 1) -> torch.Tensor:
        """Frames ``start, start + step, ... < stop`` as ``(T, H, W, 3)`` uint8."""
        if step < 1:
            raise ValueError(f"step must be a positive integer, got {step}")
        return self.get_frames(list(range(start, stop, step)))

    def read_all(self) -> torch.Tensor:
        """Every frame of the video, ``(num_frames, H, W, 3)`` uint8."""
        return self.get_frames(list(range(self.num_frames)))

    def _decode_sorted(self, indices: list[int]) -> torch.Tensor:
        raise NotImplementedError

    # -- lifetime ------------------------------------------------------------------------------
    def close(self) -> None:
        """Releases the underlying file."""

    def __enter__(self) -> VideoReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, num_frames={self.num_frames}, fps={self.fps})"
