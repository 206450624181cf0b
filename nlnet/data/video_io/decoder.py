"""The decoder part of the video datasets: a backend, its threads and the decoded-clip cache.

``ClipDecoder(backend, threads, cache)(path, indices)`` returns the frames ``indices`` of ``path``
as uint8 ``(T, H, W, 3)``; indices past the end repeat the last frame (a clip of a video that
is a little shorter than expected). With a cache (:mod:`nlnet.data.video_io.clip_cache`) a repeated request
reads no file. The cache's unit is the clip (a request with the same frame indices hits) or the
whole video (``unit="video"``: a miss decodes and stores every frame of the video, and every
later clip of that video, whatever its indices, is cut from the stored frames; the decoder
returns the same frames either way, tested bit for bit, for streams that decode without errors:
FFmpeg conceals a damaged stretch differently depending on where decoding started). Failures
raise :class:`nlnet.data.video_io.backends.VideoDecodeError` or the backend's error; the
dataset's bad-video policy (:class:`nlnet.data.video.policy.BadVideoPolicy`) decides what follows.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import nlnet.data.video_io.backends as _video
from nlnet.data.video_io.backends import BACKENDS, resolve_backend
from nlnet.data.video_io.clip_cache import CACHE_UNITS, ClipCache, clip_key
from nlnet.data.video_io.frame_index import build_frame_index
from nlnet.data.video_io.reader import VideoDecodeError

__all__ = ["ClipDecoder"]


class ClipDecoder:
    """Decode clips with one backend of :mod:`nlnet.data.video_io.backends`, through an optional cache.

    Args:
        backend: ``"pyav"``, ``"torchcodec"`` or ``"auto"``.
        threads: FFmpeg threads per decoder (``data.decode_threads``).
        cache: a :class:`nlnet.data.video_io.clip_cache.ClipCache` or None.
        index_workers: threads probing frame counts in :meth:`index` (0: sequential).
        unit: what one cache entry holds (``data.clip_cache_unit``): ``"clip"``, the frames of
            one request, or ``"video"``, every frame of the video. A video whose frames the cache
            could not keep (over its bound) is decoded clip by clip, uncached.
    """

    def __init__(
        self,
        backend: str = "pyav",
        threads: int = 1,
        cache: ClipCache | None = None,
        index_workers: int = 0,
        unit: str = "clip",
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if unit not in CACHE_UNITS:
            raise ValueError(f"unit: expected one of {CACHE_UNITS}, got {unit!r}")
        self.unit = unit
        self._partly_decodable: set[str] = set()  # unit "video": whole decode failed
        self.backend = resolve_backend(backend)
        self.threads = int(threads)
        self.cache = cache
        self.index_workers = int(index_workers)

    def index(
        self, videos: Sequence[str], index_file: str | os.PathLike | None = None
    ) -> list[dict[str, Any]]:
        """Frame count, fps and error of every video (:func:`build_frame_index`, kept in
        ``index_file`` when given)."""
        path = None if index_file is None else Path(index_file)
        return build_frame_index(list(videos), self.backend, path, self.index_workers)

    def __call__(self, path: str | os.PathLike, indices: torch.Tensor) -> torch.Tensor:
        if self.cache is not None and self.unit == "video":
            return self._through_video_cache(self.cache, path, indices)
        key = None
        if self.cache is not None:
            key = clip_key(path, indices, backend=self.backend)
            frames = self.cache.get(key)
            if frames is not None:
                return frames
        with _video.open_video(path, self.backend, self.threads) as reader:
            n = reader.num_frames
            frames = reader.get_frames(indices.clamp(max=n - 1))  # (T, H, W, C) uint8
        if self.cache is not None:
            self.cache.put(key, frames)
        return frames

    def _through_video_cache(
        self, cache: ClipCache, path: str | os.PathLike, indices: torch.Tensor
    ) -> torch.Tensor:
        """The frames ``indices`` cut from the cached whole video, decoded and stored on a miss."""
        key = clip_key(path, None, backend=self.backend)
        frames = cache.get_frames(key, indices)
        if frames is not None:
            return frames
        with _video.open_video(path, self.backend, self.threads) as reader:
            info = reader.info
            clip = indices.clamp(max=info.num_frames - 1)
            nbytes = info.num_frames * info.height * info.width * 3  # 0: a size not known
            if not (nbytes and cache.room_for(nbytes)) or not self._may_store(cache, key):
                return reader.get_frames(clip)
            try:
                video = reader.read_all()  # (N, H, W, C) uint8
            except VideoDecodeError:  # a damaged stretch outside this clip must not fail it
                self._partly_decodable.add(key)  # decoded clip by clip from now on
                return reader.get_frames(clip)
        if cache.room_for(video.numel()):  # the header's size may have been wrong
            cache.put(key, video)
        return video[clip]

    def _may_store(self, cache: ClipCache, key: str) -> bool:
        """Whether a miss may decode the whole video to store it: not for a video whose whole
        decode failed, nor into a memory cache of a DataLoader worker (the worker's copy of
        the cache ends with its epoch: it reads what the training process stored, and decodes
        the rest clip by clip)."""
        if key in self._partly_decodable:
            return False
        if cache.kind == "memory":
            from torch.utils.data import get_worker_info

            return get_worker_info() is None
        return True

    def __repr__(self) -> str:
        unit = "" if self.unit == "clip" else f", unit={self.unit!r}"
        return f"ClipDecoder({self.backend!r}, threads={self.threads}, cache={self.cache!r}{unit})"
