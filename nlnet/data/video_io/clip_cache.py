"""A decoded-clip cache: decode a clip once, read it back from memory or disk afterwards.

Decoding dominates the data time of small-video datasets that are read many times (every epoch
of training, every validation): the digits demo's 6000 four-frame clips, a test set evaluated
with the same ``test_clips`` views every epoch (Section 4.1's fixed multi-clip testing). The
cache stores the decoder's output, the ``(T, H, W, C)`` uint8 frames, so augmentation stays
random per epoch; it helps when the same frames are asked for again (clips that fill the whole
video, test views); a training clip drawn at a random offset of a long video rarely repeats.
With ``data.clip_cache_unit: video`` the decoder stores every frame of a video under one key and
cuts each later clip out of it (:class:`nlnet.data.video_io.decoder.ClipDecoder`): the unit for
clips that span their video at random positions (``data.sampling: segments``), which decode
most of the video anyway and never repeat their frame indices.

* ``kind="memory"``: a per-process LRU dictionary bounded by ``max_bytes``. DataLoader workers
  each hold their own (the cache is emptied when a dataset is pickled for a ``spawn`` worker;
  with ``fork`` a worker starts with what the main process had filled), so memory suits
  ``train.workers: 0`` or data read in the main process.
* ``kind="disk"``: one ``.npy`` file per clip in a folder, written to a temporary name and
  renamed (atomic on POSIX), so DataLoader workers and DDP ranks can fill and share one folder
  without locks; a damaged or foreign file is a miss. The bound is kept per process: a process
  stops writing once the folder (measured when the cache was built) plus its own writes would
  exceed ``max_bytes``; concurrent writers can overshoot by their in-flight clips.

The key covers everything the frames depend on: the file's absolute path, size and
modification time (an edited file is a miss), the decoder backend, the frame indices (``None``:
the whole video) and the decode size (``None``: the file's own resolution).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nlnet.data.atomic import atomic_path

__all__ = ["CACHE_KINDS", "CACHE_UNITS", "ClipCache", "DiskClipCache", "MemoryClipCache", "build_clip_cache",
           "clip_key"]  # fmt: skip

#: Accepted values of ``data.clip_cache`` (``None``: no cache).
CACHE_KINDS: tuple[str, ...] = ("memory", "disk")
#: Accepted values of ``data.clip_cache_unit``: one entry per clip, or per whole video.
CACHE_UNITS: tuple[str, ...] = ("clip", "video")


def clip_key(
    path: str | os.PathLike,
    indices: Sequence[int] | torch.Tensor | None,
    *,
    backend: str = "",
    size: Sequence[int] | int | None = None,
) -> str:
    """The cache key of the frames ``indices`` of ``path`` (``None``: every frame) decoded by
    ``backend`` at ``size``.

    Raises:
        OSError: ``path`` cannot be stat'ed.
    """
    p = os.path.abspath(os.fspath(path))
    st = os.stat(p)
    if indices is None:
        idx: list[int] | str = "all"
    else:
        idx = [int(i) for i in (indices.tolist() if isinstance(indices, torch.Tensor) else indices)]
    text = f"{p}\0{st.st_size}\0{st.st_mtime_ns}\0{backend}\0{idx}\0{size}"
    return hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()  # any file name


class ClipCache:
    """Interface and hit/miss counters shared by the memory and the disk cache."""

    kind: str = ""

    def __init__(self, max_bytes: int) -> None:
        if not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes: expected a non-negative int, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> torch.Tensor | None:
        """The cached frames of ``key`` or ``None`` (counted as a hit or a miss)."""
        frames = self._get(key)
        if frames is None:
            self.misses += 1
        else:
            self.hits += 1
        return frames

    def get_frames(self, key: str, indices: torch.Tensor) -> torch.Tensor | None:
        """The frames ``indices`` of the cached entry ``key`` (an index past its end repeats its
        last frame), or ``None``; a hit or a miss as :meth:`get`."""
        frames = self.get(key)
        return None if frames is None else _take(frames, indices)

    def room_for(self, nbytes: int) -> bool:
        """Whether an entry of ``nbytes`` would be kept by :meth:`put` now."""
        return nbytes <= self.max_bytes

    def put(self, key: str, frames: torch.Tensor) -> bool:
        """Store ``frames`` (uint8); returns whether they were kept (False: over the bound)."""
        if frames.dtype != torch.uint8:
            raise TypeError(f"frames: expected uint8 decoder output, got {frames.dtype}")
        return self._put(key, frames.contiguous())

    def _get(self, key: str) -> torch.Tensor | None:  # pragma: no cover - interface
        raise NotImplementedError

    def _put(self, key: str, frames: torch.Tensor) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_bytes={self.max_bytes}, hits={self.hits}, misses={self.misses})"


def _take(frames: Any, indices: torch.Tensor) -> torch.Tensor:
    """Rows ``indices`` of ``frames`` (a tensor or a memory-mapped array), clamped to its end,
    as a new tensor."""
    idx = indices.clamp(max=len(frames) - 1)
    if isinstance(frames, torch.Tensor):
        return frames[idx]
    return torch.from_numpy(np.ascontiguousarray(frames[idx.numpy()]))


class MemoryClipCache(ClipCache):
    """Least-recently-used frames in this process's memory, at most ``max_bytes`` of them."""

    kind = "memory"

    def __init__(self, max_bytes: int) -> None:
        super().__init__(max_bytes)
        self._items: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._lock = threading.Lock()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def _get(self, key: str) -> torch.Tensor | None:
        with self._lock:
            frames = self._items.get(key)
            if frames is not None:
                self._items.move_to_end(key)
            return frames

    def room_for(self, nbytes: int) -> bool:
        """Whether ``nbytes`` fit beside what is held, without evicting anything: a whole video is
        stored only into free room (a random pass over more videos than the bound holds would
        otherwise evict each before its next use and decode every video whole each time)."""
        return self.nbytes + nbytes <= self.max_bytes

    def _put(self, key: str, frames: torch.Tensor) -> bool:
        size = frames.numel()
        if size > self.max_bytes:
            return False
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.nbytes -= old.numel()
            while self._items and self.nbytes + size > self.max_bytes:
                _, evicted = self._items.popitem(last=False)
                self.nbytes -= evicted.numel()
            self._items[key] = frames
            self.nbytes += size
        return True

    def __getstate__(self) -> dict[str, Any]:
        # a spawned worker gets an empty cache (not a copy of every clip through a pipe)
        state = {k: v for k, v in self.__dict__.items() if k not in ("_items", "_lock")}
        state["nbytes"] = 0
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._items = OrderedDict()
        self._lock = threading.Lock()


class DiskClipCache(ClipCache):
    """One ``<key>.npy`` file per clip under ``directory``, shared by workers and ranks."""

    kind = "disk"

    def __init__(self, directory: str | os.PathLike, max_bytes: int) -> None:
        super().__init__(max_bytes)
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.nbytes = sum(f.stat().st_size for f in self.directory.glob("*.npy"))

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.npy"

    def _load(self, key: str, mmap: bool) -> np.ndarray | None:
        path = self._path(key)
        try:
            array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except FileNotFoundError:
            return None
        except Exception:  # noqa: BLE001  (any damage, e.g. a disk-full write: numpy's header
            # parser raises several kinds) a miss, and the file goes so that it is written again
            self._discard(path)
            return None
        if array.dtype != np.uint8 or array.ndim != 4 or not len(array):
            return None
        return array

    def _discard(self, path: Path) -> None:
        try:
            path.unlink()
        except OSError:
            pass

    def _get(self, key: str) -> torch.Tensor | None:
        array = self._load(key, mmap=False)
        return None if array is None else torch.from_numpy(array)

    def get_frames(self, key: str, indices: torch.Tensor) -> torch.Tensor | None:
        """The frames ``indices`` of entry ``key``, read through a memory map: only their bytes
        (a whole video's entry is not loaded for one clip)."""
        array = self._load(key, mmap=True)
        if array is None:
            self.misses += 1
            return None
        try:
            frames = _take(array, indices)
        except Exception:  # noqa: BLE001  (truncated after its header was read) a miss
            self._discard(self._path(key))
            self.misses += 1
            return None
        self.hits += 1
        return frames

    def room_for(self, nbytes: int) -> bool:
        """Whether this process may still write ``nbytes`` (the bound stops writes)."""
        return self.nbytes + nbytes + 128 <= self.max_bytes

    def _put(self, key: str, frames: torch.Tensor) -> bool:
        path = self._path(key)
        if path.exists():
            return True
        size = frames.numel() + 128  # the .npy header
        if self.nbytes + size > self.max_bytes:
            return False
        try:
            with atomic_path(path, suffix=".npy") as tmp:
                np.save(tmp, frames.numpy(), allow_pickle=False)
        except OSError:
            return False
        self.nbytes += size
        return True


def default_clip_cache_dir() -> Path:
    """``$NLNET_CACHE/clips`` or ``~/.cache/nlnet/clips``."""
    base = os.environ.get("NLNET_CACHE") or os.path.join(Path.home(), ".cache", "nlnet")
    return Path(base) / "clips"


def build_clip_cache(
    kind: str | None, *, max_mb: float = 1024, directory: str | os.PathLike | None = None
) -> ClipCache | None:
    """The cache of ``data.clip_cache`` (``None``, ``"memory"`` or ``"disk"``).

    Args:
        kind: ``None`` (no cache), ``"memory"`` or ``"disk"``.
        max_mb: the size bound in MiB (``data.clip_cache_mb``).
        directory: the disk cache's folder (``data.clip_cache_dir``; default
            :func:`default_clip_cache_dir`).

    Raises:
        ValueError: an unknown kind or a negative bound.
    """
    if kind is None or kind is False:
        return None
    if kind not in CACHE_KINDS:
        raise ValueError(f"clip_cache: expected null, 'memory' or 'disk', got {kind!r}")
    if isinstance(max_mb, bool) or not isinstance(max_mb, (int, float)) or not max_mb >= 0:
        raise ValueError(f"clip_cache_mb: expected a size in MiB >= 0, got {max_mb!r}")
    max_bytes = int(max_mb * 2**20)
    if kind == "memory":
        return MemoryClipCache(max_bytes)
    return DiskClipCache(directory or default_clip_cache_dir(), max_bytes)
