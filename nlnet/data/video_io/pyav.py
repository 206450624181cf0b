"""The PyAV decoding backend (:class:`PyAVReader`), the default of :mod:`nlnet.data.video_io.backends`.

It demultiplexes the stream once (packet headers only) to index the frames in presentation
order, then decodes only the frames a clip needs: seek to the keyframe at or before the first
wanted frame, decode forward, stop after the last (the clips of Wang et al., CVPR 2018, Sec. 4.1,
are a short part of a long video).
"""

from __future__ import annotations

import bisect
import os
import threading
from typing import Any

import numpy as np
import torch

from nlnet.data.video_io.reader import PathLike, VideoDecodeError, VideoInfo, VideoReader

_local = threading.local()


def convert_frame(frame: Any, pix_fmt: str) -> Any:
    """``frame`` (a PyAV ``VideoFrame``) in the pixel format ``pix_fmt``, by this thread's kept
    converter, on one thread.

    A frame's own ``to_ndarray()``/``reformat()`` builds a new scaling context each time, and one
    context per file still costs more than decoding a small clip: the kept converter (one per
    thread: a context is not safe to use from two threads at once) reuses its context while the
    size and formats stay the same. One thread per conversion (FFmpeg's default starts a pool
    of slice threads): the same pixels, no slower on clip-sized frames, and nothing that a
    forked data-loader worker would wait on (threads do not survive a fork).
    """
    kept = getattr(_local, "reformatter", None)
    if kept is None:
        from av.video.reformatter import VideoReformatter

        kept = _local.reformatter = VideoReformatter()
    return kept.reformat(frame, format=pix_fmt, threads=1)


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

        self._av = av
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
        first_not_key: bool | None = None  # the first packet is no keyframe
        for packet in self._container.demux(self._stream):
            if packet.size == 0 or getattr(packet, "is_discard", False):
                continue  # the flush packet at the end, or a packet an edit list drops
            if packet.pts is None:
                has_none = True
                continue
            if not pts and first_not_key is None:
                first_not_key = not packet.is_keyframe
            pts.append(int(packet.pts))
            if packet.is_keyframe:
                key_pts.append(int(packet.pts))
        # No usable timestamps (e.g. raw elementary streams): index by a full decode and later
        # decode sequentially from the start. Timestamps that repeat (a muxer's rounding:
        # frames keyed by pts would overwrite each other): one frame per packet, decoded in
        # order from the start (slower for clips late in a long file, and correct).
        self._sequential = has_none or not pts or len(set(pts)) < len(pts)
        if self._sequential and not has_none and pts:
            pts, key_pts = list(range(len(pts))), [0]
        elif self._sequential:
            pts, key_pts = self._index_by_decoding()
        if first_not_key and not self._sequential:  # a stream cut mid-GOP (copied without
            # re-encoding) starts with frames that refer to a keyframe it lacks: they never
            # decode, so the video starts where decoding gives its first frame
            start = self._first_decoded_pts()
            pts = [p for p in pts if start is None or p >= start]
        if not pts:
            raise VideoDecodeError(self.path, "the video stream holds no frames")
        self._pts = sorted(pts)
        self._key_pts = sorted(set(key_pts)) or [self._pts[0]]
        codec = self._stream.codec_context
        self._height, self._width = int(codec.height or 0), int(codec.width or 0)
        rate = self._stream.average_rate or self._stream.guessed_rate
        self._fps = float(rate) if rate else 0.0

    def _first_decoded_pts(self) -> int | None:
        """The timestamp of the first frame that decodes from the start (``None``: none)."""
        self._rewind()
        try:
            for frame in self._container.decode(self._stream):
                if frame.pts is not None:
                    return int(frame.pts)
        except (self._av.FFmpegError, OSError, ValueError):
            return None
        return None

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
        """The frame as a player shows it, ``(H, W, 3)`` RGB: turned by the rotation of its
        display matrix (a phone's portrait video is stored landscape with a rotation of 90 or
        -90 degrees counter-clockwise), as FFmpeg's players and torchcodec (0.11 on) turn it."""
        rgb = convert_frame(frame, "rgb24").to_ndarray()
        turns = round((getattr(frame, "rotation", 0) or 0) / 90) % 4  # PyAV >= 14
        return np.ascontiguousarray(np.rot90(rgb, turns)) if turns else rgb

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
