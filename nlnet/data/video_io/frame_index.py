"""The frame-count index of the video datasets (probed once, kept in memory and in a JSON file).

Frame counts are read from packet headers (no decoding) when a dataset is built, kept for the
process and written to ``.nlnet_index.json`` next to the data, keyed by absolute path and reused
while the file's size and modification time are unchanged (``data.cache``).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from nlnet.data.atomic import atomic_path
from nlnet.data.video_io.backends import VideoDecodeError, probe_video, resolve_backend

__all__ = ["INDEX_FILE_NAME", "build_frame_index", "clear_memory_index", "index_file_for"]

INDEX_FILE_NAME = ".nlnet_index.json"
_INDEX_VERSION = 1


_MEMORY_INDEX: dict[tuple[str, int, int, str], dict[str, Any]] = {}
_INDEX_LOCK = threading.Lock()


def clear_memory_index() -> None:
    """Forgets the in-memory frame-count index of this process (the JSON files stay)."""
    with _INDEX_LOCK:
        _MEMORY_INDEX.clear()


def _file_key(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _probe_entry(path: str, backend: str) -> dict[str, Any]:
    """Probes one file; never raises (a failure is recorded as an ``error`` entry)."""
    try:
        info = probe_video(path, backend=backend)
    except VideoDecodeError as exc:
        return {"num_frames": 0, "fps": 0.0, "error": exc.reason}
    except Exception as exc:  # an unexpected decoder failure must not stop indexing
        return {"num_frames": 0, "fps": 0.0, "error": f"{type(exc).__name__}: {exc}"}
    return {"num_frames": int(info.num_frames), "fps": float(info.fps), "error": None}


def _load_index_file(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != _INDEX_VERSION:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def _save_index_file(path: Path, entries: Mapping[str, Any]) -> bool:
    """Merges ``entries`` into the JSON file atomically; False when the folder is not writable."""
    try:
        merged = _load_index_file(path)
        merged.update(entries)
        with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
            json.dump({"version": _INDEX_VERSION, "entries": merged}, f)
        return True
    except OSError:
        return False


def _valid_index_entry(e: Any) -> bool:
    """An index entry of the expected form (a hand-edited or corrupted one is probed again)."""
    if not isinstance(e, dict):
        return False
    n, fps, err = e.get("num_frames"), e.get("fps"), e.get("error")
    return (
        isinstance(n, int) and not isinstance(n, bool) and n >= 0
        and isinstance(fps, (int, float)) and not isinstance(fps, bool)
        and (err is None or isinstance(err, str))
    )  # fmt: skip


def build_frame_index(
    paths: Sequence[str],
    backend: str,
    cache_file: Path | None,
    workers: int = 0,
) -> list[dict[str, Any]]:
    """Frame count (and fps, error) of every path: memory, then JSON file, then a probe.

    Returns:
        One dict per path with keys ``num_frames``, ``fps``, ``error`` (None when readable).
    """
    backend = resolve_backend(backend)
    file_entries = _load_index_file(cache_file) if cache_file is not None else {}
    results: list[dict[str, Any] | None] = [None] * len(paths)
    keys: list[tuple[str, int, int, str] | None] = [None] * len(paths)
    to_probe: list[int] = []
    for i, p in enumerate(paths):
        stat = _file_key(p)
        if stat is None:
            results[i] = {"num_frames": 0, "fps": 0.0, "error": "no such file"}
            continue
        key = (p, stat[0], stat[1], backend)
        keys[i] = key
        with _INDEX_LOCK:
            hit = _MEMORY_INDEX.get(key)
        if hit is None:
            e = file_entries.get(p)
            if (
                _valid_index_entry(e)
                and e.get("size") == stat[0]
                and e.get("mtime_ns") == stat[1]
                and e.get("backend", backend) == backend
            ):
                hit = {"num_frames": e["num_frames"], "fps": e["fps"], "error": e.get("error")}
        if hit is None:
            to_probe.append(i)
        else:
            results[i] = hit
    if to_probe:
        if workers > 0 and len(to_probe) > 1:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                probed = list(pool.map(lambda i: _probe_entry(paths[i], backend), to_probe))
        else:
            probed = [_probe_entry(paths[i], backend) for i in to_probe]
        new_entries = {}
        for i, entry in zip(to_probe, probed):
            results[i] = entry
            size, mtime = keys[i][1], keys[i][2]  # type: ignore[index]
            new_entries[paths[i]] = {**entry, "size": size, "mtime_ns": mtime, "backend": backend}
        if cache_file is not None and not _save_index_file(cache_file, new_entries):
            warnings.warn(
                f"cannot write the frame-count index {str(cache_file)!r}; keeping it in memory",
                stacklevel=3,
            )
    with _INDEX_LOCK:
        for key, entry in zip(keys, results):
            if key is not None:
                _MEMORY_INDEX[key] = entry  # type: ignore[assignment]
    return results  # type: ignore[return-value]


def index_file_for(anchor: Path, cache: bool | str | os.PathLike | None) -> Path | None:
    if cache is None or cache is False:
        return None
    if cache is True:
        if os.access(anchor, os.W_OK):
            return anchor / INDEX_FILE_NAME
        # a read-only data folder (shared storage): keep the index in the user's cache instead
        base = os.environ.get("NLNET_CACHE") or os.path.join(Path.home(), ".cache", "nlnet")
        digest = hashlib.sha1(str(anchor.resolve()).encode()).hexdigest()[:16]
        return Path(base) / "index" / f"{anchor.name or 'root'}-{digest}.json"
    return Path(cache)
