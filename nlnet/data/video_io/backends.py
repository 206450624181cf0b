"""Video decoding with two interchangeable backends: PyAV and torchcodec.

The training recipe of the paper ("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971), Section 4.1) only ever needs a
short clip of a long video: 64 consecutive frames of which every other one is kept, or 10 such
clips spread over the video at test time. Decoding the whole file for every clip would waste most
of the work, so a reader here decodes *only the frames a clip needs*: it seeks to the nearest
keyframe at or before the first wanted frame, decodes forward and stops right after the last one.

Frames are addressed by their **index in presentation order** (0 = first displayed frame). The
PyAV reader builds that index by demultiplexing the stream once (reading packet headers only, no
decoding), which also gives an exact frame count; torchcodec's ``seek_mode="exact"`` performs the
same scan internally. All readers return ``uint8`` tensors of shape ``(T, H, W, C)`` in RGB.

Backends:

* ``"pyav"`` (default): PyAV, installed with pip; it bundles its own FFmpeg.
* ``"torchcodec"``: `torchcodec <https://github.com/pytorch/torchcodec>`_, optional. It needs
  FFmpeg's shared libraries from the system (e.g. ``apt-get install libavcodec59 libavformat59
  libavutil57 libswscale6 libswresample4 libavfilter8 libavdevice59`` on Debian 12).
* ``"auto"``: torchcodec when it imports, PyAV otherwise.

The two backends use different FFmpeg builds and colour converters, so the same frame decoded by
both can differ by a few intensity levels; they always agree on *which* frame an index names.

A file that cannot be opened or decoded raises :class:`VideoDecodeError`, which names the path.

This module holds the backend choice, the torchcodec reader and the entry points; the reader
interface is in :mod:`nlnet.data.video_io.reader`, the PyAV reader in :mod:`nlnet.data.video_io.pyav`
and :func:`write_video` in :mod:`nlnet.data.video_io.writer` (all importable from here).

Example:
    >>> from nlnet.data.video_io.backends import open_video
    >>> with open_video("clip.mp4") as reader:                       # doctest: +SKIP
    ...     frames = reader.get_frames([0, 2, 4, 6])                 # (4, H, W, 3) uint8
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

import numpy as np
import torch

from nlnet.data.video_io.pyav import PyAVReader
from nlnet.data.video_io.reader import PathLike, VideoDecodeError, VideoInfo, VideoReader
from nlnet.data.video_io.writer import write_video  # noqa: F401 (re-export)

__all__ = [
    "BACKENDS",
    "VideoDecodeError",
    "VideoInfo",
    "VideoReader",
    "PyAVReader",
    "TorchCodecReader",
    "available_backends",
    "resolve_backend",
    "torchcodec_available",
    "open_video",
    "probe_video",
    "read_frames",
    "write_video",
]

BACKENDS = ("pyav", "torchcodec", "auto")


# --------------------------------------------------------------------------------------------------
# backend discovery


@functools.lru_cache(maxsize=1)
def _torchcodec_import_error() -> str | None:
    """Returns None when torchcodec's decoder imports, else the reason it does not."""
    try:
        import torchcodec
        from torchcodec.decoders import VideoDecoder  # noqa: F401
    except Exception as exc:  # ImportError, OSError or RuntimeError (missing FFmpeg libraries)
        return f"{type(exc).__name__}: {exc}".strip()
    # Recent torchcodec imports without FFmpeg (its image decoders do not need it) and fails only
    # when a video decoder is created; it then reports no FFmpeg version.
    if getattr(torchcodec, "ffmpeg_major_version", 0) is None:
        return (
            "torchcodec imports but cannot load FFmpeg's shared libraries (libavcodec, "
            "libavformat, ...); install them, e.g. with apt-get"
        )
    return None


def torchcodec_available() -> bool:
    """Whether the optional torchcodec backend can be used on this machine."""
    return _torchcodec_import_error() is None


def torchcodec_unavailable_reason() -> str | None:
    """Why torchcodec cannot be used (first line of the import error), or None when it can."""
    reason = _torchcodec_import_error()
    return None if reason is None else reason.splitlines()[0][:300]


def available_backends() -> list[str]:
    """Names of the decoding backends usable here, PyAV first."""
    return ["pyav"] + (["torchcodec"] if torchcodec_available() else [])


def resolve_backend(backend: str) -> str:
    """Maps ``"auto"`` to a concrete backend and checks that the requested one is usable.

    Args:
        backend: ``"pyav"``, ``"torchcodec"`` or ``"auto"`` (torchcodec when it imports).

    Returns:
        ``"pyav"`` or ``"torchcodec"``.

    Raises:
        ValueError: unknown backend name.
        RuntimeError: ``"torchcodec"`` was requested but does not import.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        return "torchcodec" if torchcodec_available() else "pyav"
    if backend == "torchcodec" and not torchcodec_available():
        raise RuntimeError(
            "backend='torchcodec' was requested but torchcodec cannot be used: "
            f"{torchcodec_unavailable_reason()}. Install it with `pip install torchcodec` and "
            "FFmpeg's shared libraries (libavcodec, libavformat, ...), or use backend='pyav'."
        )
    return backend


class TorchCodecReader(VideoReader):
    """torchcodec backend (``torchcodec.decoders.VideoDecoder`` in exact seek mode).

    Args:
        path: video file.
        num_threads: FFmpeg decoding threads (0 = FFmpeg's choice).
    """

    backend = "torchcodec"

    def __init__(self, path: PathLike, num_threads: int = 1) -> None:
        super().__init__(path)
        resolve_backend("torchcodec")
        from torchcodec.decoders import VideoDecoder

        if not os.path.isfile(self.path):
            raise VideoDecodeError(self.path, "no such file")
        try:
            self._decoder = VideoDecoder(
                self.path,
                dimension_order="NHWC",
                seek_mode="exact",
                num_ffmpeg_threads=int(num_threads),
            )
            meta = self._decoder.metadata
            self._num_frames = int(meta.num_frames or 0)
            self._fps = float(meta.average_fps or 0.0)
            self._height = int(meta.height or 0)
            self._width = int(meta.width or 0)
        except (RuntimeError, ValueError, OSError) as exc:
            raise VideoDecodeError(self.path, f"cannot open: {exc}") from exc
        if self._num_frames <= 0:
            raise VideoDecodeError(self.path, "the video stream holds no frames")

    @property
    def num_frames(self) -> int:
        return self._num_frames

    @property
    def fps(self) -> float:
        return self._fps

    @property
    def info(self) -> VideoInfo:
        return VideoInfo(self._num_frames, self._fps, self._height, self._width)

    def _decode_sorted(self, indices: list[int]) -> torch.Tensor:
        try:
            batch = self._decoder.get_frames_at(indices)
        except (RuntimeError, ValueError, IndexError) as exc:
            raise VideoDecodeError(self.path, f"decoding failed: {exc}") from exc
        return batch.data.contiguous()  # (T, H, W, 3) uint8

    def close(self) -> None:
        self._decoder = None


def open_video(path: PathLike, backend: str = "pyav", num_threads: int = 1) -> VideoReader:
    """Opens a video with the chosen backend.

    Args:
        path: video file.
        backend: ``"pyav"`` (default), ``"torchcodec"`` or ``"auto"``.
        num_threads: FFmpeg decoding threads per reader (0 = FFmpeg's choice).

    Returns:
        A :class:`VideoReader`.

    Raises:
        VideoDecodeError: the file is missing, corrupt or has no video stream.
    """
    name = resolve_backend(backend)
    if name == "torchcodec":
        return TorchCodecReader(path, num_threads=num_threads)
    return PyAVReader(path, num_threads=num_threads)


def probe_video(path: PathLike, backend: str = "pyav") -> VideoInfo:
    """Frame count, frame rate and size of a video, without decoding any pixel.

    Raises:
        VideoDecodeError: the file cannot be opened.
    """
    with open_video(path, backend=backend) as reader:
        return reader.info


def read_frames(
    path: PathLike,
    indices: Sequence[int] | torch.Tensor | np.ndarray,
    backend: str = "pyav",
    num_threads: int = 1,
) -> torch.Tensor:
    """Opens ``path``, decodes the frames at ``indices`` and closes it: ``(T, H, W, 3)`` uint8."""
    with open_video(path, backend=backend, num_threads=num_threads) as reader:
        return reader.get_frames(indices)
