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

Example:
    >>> from nlnet.data.video import open_video
    >>> with open_video("clip.mp4") as reader:                       # doctest: +SKIP
    ...     frames = reader.get_frames([0, 2, 4, 6])                 # (4, H, W, 3) uint8
"""

from __future__ import annotations

import bisect
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

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


# --------------------------------------------------------------------------------------------------
# readers


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


class PyAVReader(VideoReader):
    """PyAV backend: demuxes once to index frames by presentation timestamp, then seeks.

    Args:
        path: video file.
        num_threads: FFmpeg decoding threads (0 = FFmpeg's choice). Data-loader workers usually
            want 1 so that workers do not oversubscribe the CPU.
    """

    backend = "pyav"

    def __init__(self, path: PathLike, num_threads: int = 1) -> None:
        super().__init__(path)
        import av
        from av.video.reformatter import VideoReformatter

        self._av = av
        # one converter for all frames: a frame's own to_ndarray() builds a new SwsContext
        # every time, which costs more than decoding a small frame
        self._reformatter = VideoReformatter()
        if not os.path.isfile(self.path):
            raise VideoDecodeError(self.path, "no such file")
        try:
            self._container = av.open(self.path)
        except (av.FFmpegError, OSError, UnicodeDecodeError, ValueError) as exc:
            raise VideoDecodeError(self.path, f"cannot open: {exc}") from exc
        self._num_threads = int(num_threads)
        try:
            if not self._container.streams.video:
                raise VideoDecodeError(self.path, "the file has no video stream")
            self._select_stream()
            self._build_index()
        except VideoDecodeError:
            self.close()
            raise
        except (av.FFmpegError, OSError, ValueError) as exc:
            self.close()
            raise VideoDecodeError(self.path, f"cannot read the stream: {exc}") from exc

    def _select_stream(self) -> None:
        self._stream = self._container.streams.video[0]
        self._stream.thread_count = self._num_threads
        if self._num_threads != 1:
            self._stream.thread_type = "AUTO"

    def _rewind(self) -> None:
        """Back to the first packet; streams that cannot seek (raw H.264) are reopened."""
        try:
            self._container.seek(0)
        except self._av.FFmpegError:
            self._container.close()
            self._container = self._av.open(self.path)
            self._select_stream()

    def _build_index(self) -> None:
        """Reads packet headers (no decoding) to map frame index -> pts and find keyframes."""
        pts: list[int] = []
        key_pts: list[int] = []
        has_none = False
        for packet in self._container.demux(self._stream):
            if packet.size == 0 or getattr(packet, "is_discard", False):
                continue  # the flush packet at the end, or a packet an edit list drops
            if packet.pts is None:
                has_none = True
                continue
            pts.append(int(packet.pts))
            if packet.is_keyframe:
                key_pts.append(int(packet.pts))
        # No usable timestamps (e.g. raw elementary streams): index by a full decode and later
        # decode sequentially from the start.
        self._sequential = has_none or not pts
        if self._sequential:
            pts, key_pts = self._index_by_decoding()
        if not pts:
            raise VideoDecodeError(self.path, "the video stream holds no frames")
        self._pts = sorted(pts)
        self._key_pts = sorted(set(key_pts)) or [self._pts[0]]
        codec = self._stream.codec_context
        self._height, self._width = int(codec.height or 0), int(codec.width or 0)
        rate = self._stream.average_rate or self._stream.guessed_rate
        self._fps = float(rate) if rate else 0.0

    def _index_by_decoding(self) -> tuple[list[int], list[int]]:
        self._rewind()
        count = 0
        for _ in self._container.decode(self._stream):
            count += 1
        return list(range(count)), [0]

    @property
    def num_frames(self) -> int:
        return len(self._pts)

    @property
    def fps(self) -> float:
        return self._fps

    @property
    def info(self) -> VideoInfo:
        return VideoInfo(self.num_frames, self._fps, self._height, self._width)

    def _decode_sorted(self, indices: list[int]) -> torch.Tensor:
        if self._sequential:
            return self._decode_sequential(indices)
        wanted_pts = [self._pts[i] for i in indices]
        first, last = wanted_pts[0], wanted_pts[-1]
        wanted = set(wanted_pts)
        # candidate keyframes: the nearest one at or before `first`, then earlier ones (a seek
        # can land late on files with broken indices), finally the start of the stream.
        k = bisect.bisect_right(self._key_pts, first) - 1
        candidates = [self._key_pts[j] for j in range(max(k, 0), -1, -1)][:3] + [None]
        for seek_pts in candidates:
            got = self._decode_from(seek_pts, wanted, last)
            if got is not None:
                return torch.from_numpy(np.stack([got[p] for p in wanted_pts]))
        raise VideoDecodeError(
            self.path,
            f"frames {indices[:5]}{'...' if len(indices) > 5 else ''} could not be decoded",
        )

    def _decode_from(
        self, seek_pts: int | None, wanted: set[int], last: int
    ) -> dict[int, np.ndarray] | None:
        """Decodes forward from a keyframe; returns {pts: HxWx3 array} or None if frames were
        missing (the seek landed after the first wanted frame)."""
        av = self._av
        got: dict[int, np.ndarray] = {}
        try:
            if seek_pts is None:
                self._container.seek(0, backward=True, any_frame=False)
            else:
                self._container.seek(seek_pts, backward=True, any_frame=False, stream=self._stream)
            for frame in self._container.decode(self._stream):
                p = frame.pts
                if p is None:
                    continue
                if p in wanted:
                    got[p] = self._to_rgb(frame)
                    if len(got) == len(wanted):
                        return got
                if p > last:
                    break
        except (av.FFmpegError, OSError, ValueError) as exc:
            raise VideoDecodeError(self.path, f"decoding failed: {exc}") from exc
        return got if len(got) == len(wanted) else None

    def _to_rgb(self, frame) -> np.ndarray:
        return self._reformatter.reformat(frame, format="rgb24").to_ndarray()  # (H, W, 3)

    def _decode_sequential(self, indices: list[int]) -> torch.Tensor:
        av = self._av
        wanted = set(indices)
        got: dict[int, np.ndarray] = {}
        try:
            self._rewind()
            for i, frame in enumerate(self._container.decode(self._stream)):
                if i in wanted:
                    got[i] = self._to_rgb(frame)
                if i >= indices[-1]:
                    break
        except (av.FFmpegError, OSError, ValueError) as exc:
            raise VideoDecodeError(self.path, f"decoding failed: {exc}") from exc
        if len(got) != len(wanted):
            raise VideoDecodeError(self.path, "the stream ended before the requested frames")
        return torch.from_numpy(np.stack([got[i] for i in indices]))

    def close(self) -> None:
        container = getattr(self, "_container", None)
        if container is not None:
            container.close()
            self._container = None


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


# --------------------------------------------------------------------------------------------------
# writing


def _default_codec() -> str:
    import av

    return "libx264" if "libx264" in av.codecs_available else "mpeg4"


def write_video(
    path: PathLike,
    frames: torch.Tensor | np.ndarray,
    fps: float = 25.0,
    *,
    codec: str | None = None,
    gop_size: int | None = None,
    bframes: int | None = None,
    crf: int | None = None,
    pix_fmt: str = "yuv420p",
    preset: str | None = None,
) -> Path:
    """Writes RGB frames to a video file with PyAV (H.264 when available, else MPEG-4 Part 2).

    The codecs are lossy: read the file back to get the exact frames a decoder sees.

    Args:
        path: output file, e.g. ``"clip.mp4"``; the parent folder is created.
        frames: ``uint8`` ``(T, H, W, 3)`` tensor or array; ``H`` and ``W`` must be even for
            ``pix_fmt="yuv420p"``.
        fps: frame rate.
        codec: FFmpeg encoder name; default ``"libx264"`` if PyAV's FFmpeg has it, else ``"mpeg4"``.
        gop_size: keyframe interval (frames); None keeps the encoder default.
        bframes: maximum consecutive B-frames; None keeps the encoder default.
        crf: libx264 constant rate factor (0-51, lower is better); None keeps the default.
            ``crf=0`` with ``pix_fmt="yuv444p"`` is near-lossless (only the RGB/YUV rounding).
        pix_fmt: encoder pixel format, ``"yuv420p"`` (default, plays everywhere) or e.g.
            ``"yuv444p"`` (libx264).
        preset: libx264 speed preset (e.g. ``"ultrafast"``); None keeps the default.

    Returns:
        The path written.

    Raises:
        ValueError: ``frames`` has the wrong shape, dtype or odd sizes, or ``fps`` is not positive.
    """
    import av

    if isinstance(frames, torch.Tensor):
        frames = frames.detach().cpu().numpy()
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must have shape (T, H, W, 3), got {tuple(frames.shape)}")
    if frames.dtype != np.uint8:
        raise ValueError(f"frames must be uint8, got {frames.dtype}")
    t, h, w, _ = frames.shape
    if t < 1:
        raise ValueError("frames must hold at least one frame")
    if pix_fmt == "yuv420p" and (h % 2 or w % 2):
        raise ValueError(f"frames need even H and W for pix_fmt='yuv420p', got H={h} W={w}")
    if fps <= 0:
        raise ValueError(f"fps must be positive, got {fps}")
    codec = codec or _default_codec()
    if codec not in av.codecs_available:
        raise ValueError(f"codec {codec!r} is not available in PyAV's FFmpeg")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from fractions import Fraction

    rate = Fraction(fps).limit_denominator(1001)
    options: dict[str, str] = {}
    if crf is not None and codec == "libx264":
        options["crf"] = str(int(crf))
    if preset is not None and codec == "libx264":
        options["preset"] = str(preset)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(codec, rate=rate, options=options)
        stream.width, stream.height, stream.pix_fmt = w, h, pix_fmt
        if gop_size is not None:
            stream.codec_context.gop_size = int(gop_size)
        if bframes is not None:
            stream.codec_context.max_b_frames = int(bframes)
        for array in frames:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(array), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
