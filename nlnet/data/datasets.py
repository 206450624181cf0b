"""Video classification datasets read from real files, with the recipe of the paper.

"Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971) trains on Kinetics (Section 5.1: single-label, a random clip per
video, Section 4.1 sampling and augmentation) and Charades (Section 5.2: multi-label with 157
classes, a per-category sigmoid); testing averages softmax scores of 10 clips per video.

Three layouts are read:

* :class:`VideoFolderDataset` -- class per folder, Kinetics style: ``root/<split>/<class>/*.mp4``.
  Class names are the sorted folder names (the union over all split folders, so that train and
  val share one numbering); class id = position in that list.
* :class:`VideoListDataset` -- annotation lists, UCF101/HMDB style: one ``path label`` per line,
  ``path`` relative to ``root``; ``label`` is a class id or a class name. The ``path``-only form
  (UCF101 ``testlist01.txt``) takes the label from the name of the file's parent folder, which
  needs a class-index file.
* :class:`MultiLabelVideoDataset` -- Charades style: ``path label label ...`` with the labels
  separated by spaces and/or commas (``vid.mp4 3,17 42``); a line without labels is a video with
  no action. The target is a float multi-hot vector of ``num_classes``.

Class-index files (``classes``): a ``.json`` file (a list of names, or a ``{name: id}`` mapping
as used by PySlowFast/mmaction2), or a text file with one class per line, either ``name`` or
``id name`` (e.g. UCF101's ``classInd.txt`` ``1 ApplyEyeMakeup`` or Charades' ``c092 Holding some
clothes``). The ``id name`` form is recognised when every first token is an integer or a
letters-then-digits code; labels in the lists may then use those ids; class positions follow the
file's order.

Items. In ``mode="train"`` item ``i`` is one random clip of video ``i``. In ``mode="test"`` every
video contributes ``test_clips * test_crops`` items (clip ``k``, crop ``c`` is item
``i = (video * test_clips + k) * test_crops + c``), each evaluated on its own, so that the
evaluator averages the softmax scores per video (Section 4.1). An item is a :class:`ClipItem`,
a 3-tuple ``(clip, target, index)``: ``clip`` float ``(C, T, H, W)`` normalised, ``target`` an
int (single-label) or a float multi-hot ``(num_classes,)`` tensor, ``index`` the video index; its
attribute ``clip_index`` is the view number ``k * test_crops + c`` (0 in training).

Bad videos. A video that cannot be opened or decoded, or that has fewer than ``min_frames``
frames (default: one clip's length ``num_frames``), is *bad*: a :class:`BadVideoWarning` naming
the file is issued once per file (per process) and the item is ``None``. :func:`collate_skip_bad`
drops the ``None`` items and reports how many it dropped, so a run never stops on a bad file and
the epoch summary can count them.

Frame-count index. The number of frames of every video is probed once (packet headers only, see
:mod:`nlnet.data.video`) when a dataset is created, kept in memory for the whole process and
stored in a JSON file, by default ``<root or annotation folder>/.nlnet_index.json`` (when that
folder is read-only: ``$NLNET_CACHE/index/`` or ``~/.cache/nlnet/index/``). An entry is
keyed by the absolute path and is reused while the file's size and modification time are
unchanged; unreadable files are recorded too. If the folder is read-only the index stays in memory.

Augmentation randomness. With ``seed=None`` (default) training clips use torch's global random
generator (per data-loader worker, as usual). With an integer ``seed`` the random choices of item
``i`` in epoch ``e`` (see :meth:`VideoClipDataset.set_epoch`) come from a generator seeded by
``(seed, e, i)``: they do not depend on the number of workers or processes and replay exactly
when a run is resumed.

``build_dataset(cfg, split)`` keys (a plain dict; unknown keys are an error)::

    type            "folder" | "list" | "multilabel"                           (required)
    root            folder: dataset root holding <split>/<class>/ folders      (folder: required)
                    list/multilabel: base of relative paths (default: the annotation file's folder)
    annotations     list/multilabel: file per split, either a dict {split: file} or a string
                    where "{split}" is replaced by the split name; relative to root
    classes         null | list of class names | path of a class-index file (.txt or .json)
    num_classes     null | int (when there is no class-index file; default: largest label + 1
                    over all annotation files given)
    num_frames      32        clip length T (Section 4.1)
    stride          2         temporal stride s (64 consecutive frames, every other one dropped)
    train_scale     [256, 320] range of the random shorter side in training
    crop            224       training crop size
    train_output_size null    resize the training crop to this size (Charades, Section 5.2: 288)
    flip            true      random horizontal flip in training
    test_scale      256       shorter side at test time (Charades: 320)
    test_crop       null      null: full frame (fully-convolutional inference); int: crop size
    test_clips      10        clips per video at test time
    test_crops      1         1 (full frame or centre crop) or 3 (crops along the longer side)
    mean            [0.485, 0.456, 0.406]   normalisation mean ([0, 1] scale)
    std             [0.229, 0.224, 0.225]   normalisation std
    backend         "pyav"    "pyav" | "torchcodec" | "auto" (torchcodec when it imports)
    min_frames      null      videos with fewer frames are bad (null: num_frames)
    cache           true      true: JSON index next to root/annotations; false: memory only;
                              or a path of the JSON file
    seed            null      null: global RNG; int: per-(seed, epoch, item) augmentation
    extensions      [".mp4", ".avi", ".mkv", ".webm", ".mov", ".m4v"]   (folder layout)
    decode_threads  1         FFmpeg threads per decoder
    index_workers   0         threads used to probe frame counts (0: probe in this thread)
    clip_cache      null      decoded-clip cache: null | "memory" | "disk" (nlnet.data.cache)
    clip_cache_mb   1024      its size bound in MiB
    clip_cache_dir  null      the disk cache's folder (null: $NLNET_CACHE/clips)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import threading
import warnings
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from nlnet.data.cache import build_clip_cache, clip_key
from nlnet.data.sampling import clip_indices, is_too_short
from nlnet.data.transforms import IMAGENET_MEAN, IMAGENET_STD, TestTransform, TrainTransform
from nlnet.data.video import BACKENDS, VideoDecodeError, open_video, probe_video, resolve_backend

__all__ = [
    "BadVideoWarning",
    "ClipItem",
    "DATASET_DEFAULTS",
    "VideoClipDataset",
    "VideoFolderDataset",
    "VideoListDataset",
    "MultiLabelVideoDataset",
    "build_dataset",
    "collate_skip_bad",
    "read_class_index",
    "clear_memory_index",
]

VIDEO_EXTENSIONS = (".mp4", ".avi", ".mkv", ".webm", ".mov", ".m4v")
INDEX_FILE_NAME = ".nlnet_index.json"
_INDEX_VERSION = 1

DATASET_DEFAULTS: dict[str, Any] = {
    "type": None,
    "root": None,
    "annotations": None,
    "classes": None,
    "num_classes": None,
    "num_frames": 32,
    "stride": 2,
    "train_scale": [256, 320],
    "crop": 224,
    "train_output_size": None,
    "flip": True,
    "test_scale": 256,
    "test_crop": None,
    "test_clips": 10,
    "test_crops": 1,
    "mean": list(IMAGENET_MEAN),
    "std": list(IMAGENET_STD),
    "backend": "pyav",
    "min_frames": None,
    "cache": True,
    "seed": None,
    "extensions": list(VIDEO_EXTENSIONS),
    "decode_threads": 1,
    "index_workers": 0,
    "clip_cache": None,
    "clip_cache_mb": 1024,
    "clip_cache_dir": None,
}


class BadVideoWarning(UserWarning):
    """A video was skipped: corrupt, unreadable or too short."""


class ClipItem(tuple):
    """A dataset item: the 3-tuple ``(clip, target, index)`` with an extra ``clip_index``.

    ``clip_index`` is the view number within the video (``clip * test_crops + crop`` in test
    mode, 0 in training). It unpacks as a plain 3-tuple.
    """

    def __new__(cls, clip: torch.Tensor, target: Any, index: int, clip_index: int = 0):
        item = super().__new__(cls, (clip, target, index))
        item.clip_index = int(clip_index)
        return item

    def __getnewargs__(self):  # pickling across data-loader workers
        return (*self, self.clip_index)

    @property
    def clip(self) -> torch.Tensor:
        return self[0]

    @property
    def target(self) -> Any:
        return self[1]


# --------------------------------------------------------------------------------------------------
# frame-count index

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
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".nlnet_index.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"version": _INDEX_VERSION, "entries": merged}, f)
        os.replace(tmp, path)
        return True
    except OSError:
        return False


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
                isinstance(e, dict)
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


# --------------------------------------------------------------------------------------------------
# class indices


_CODE_RE = re.compile(r"^[A-Za-z]*\d+$")


def read_class_index(source: str | os.PathLike | Sequence[str]) -> tuple[list[str], dict[str, int]]:
    """Reads class names and the label-token -> class-position map.

    Args:
        source: a list of names, or a ``.json`` file (list of names or ``{name: id}``), or a text
            file with ``name`` or ``id name`` per line.

    Returns:
        ``(names, token_to_position)``; tokens are the ids (as strings) and the names.
    """
    if not isinstance(source, str | os.PathLike):
        names = [str(n) for n in source]
        ids = [str(i) for i in range(len(names))]
    else:
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"classes: class-index file {str(path)!r} does not exist")
        if path.suffix.lower() == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, list):
                names = [str(n) for n in data]
                ids = [str(i) for i in range(len(names))]
            elif isinstance(data, dict):
                pairs = sorted(((int(v), str(k)) for k, v in data.items()), key=lambda p: p[0])
                ids, names = [str(i) for i, _ in pairs], [n for _, n in pairs]
            else:
                raise ValueError(f"classes: {str(path)!r} must hold a list or a {{name: id}} dict")
        else:
            lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
            lines = [ln for ln in lines if ln and not ln.startswith("#")]
            firsts = [ln.split(maxsplit=1) for ln in lines]
            with_ids = bool(lines) and all(len(p) == 2 and _CODE_RE.match(p[0]) for p in firsts)
            if with_ids:
                ids, names = [p[0] for p in firsts], [p[1].strip() for p in firsts]
            else:
                names, ids = lines, [str(i) for i in range(len(lines))]
    if not names:
        raise ValueError(f"classes: no class names in {source!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"classes: duplicate class names in {source!r}")
    token_to_pos = {name: k for k, name in enumerate(names)}
    token_to_pos.update({i: k for k, i in enumerate(ids)})  # ids win over equal names
    return names, token_to_pos


def _resolve_label(token: str, token_to_pos: Mapping[str, int] | None, where: str) -> int:
    if token_to_pos is not None:
        if token in token_to_pos:
            return token_to_pos[token]
        raise ValueError(f"{where}: unknown class {token!r} (not in the class index)")
    try:
        value = int(token)
    except ValueError:
        raise ValueError(
            f"{where}: label {token!r} is not an integer; give a class-index file ('classes') "
            "to use class names"
        ) from None
    if value < 0:
        raise ValueError(f"{where}: labels must be >= 0, got {value}")
    return value


def _annotation_lines(path: Path) -> Iterable[tuple[int, str]]:
    if not path.is_file():
        raise ValueError(f"annotations: file {str(path)!r} does not exist")
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = line.strip()
        if line and not line.startswith("#"):
            yield n, line


# --------------------------------------------------------------------------------------------------
# datasets


def _mix_seed(seed: int, epoch: int, index: int) -> int:
    x = (seed * 0x9E3779B97F4A7C15 + epoch * 0xBF58476D1CE4E5B9 + index * 0x94D049BB133111EB) & (
        (1 << 64) - 1
    )
    x ^= x >> 31
    return x & ((1 << 63) - 1)


class VideoClipDataset(Dataset):
    """Base class: videos + targets -> clips, with the paper's sampling and bad-file policy.

    Args:
        videos: video file paths.
        targets: one per video: an int class (single-label) or a list of ints (multi-label).
        classes: class names (``num_classes = len(classes)``).
        mode: ``"train"`` (one random clip per video) or ``"test"`` (``test_clips x test_crops``
            items per video).
        multilabel: targets are lists of class ids, returned as multi-hot float vectors.
        num_frames: clip length ``T`` (Section 4.1: 32; Section 5.1: 128).
        stride: temporal stride ``s`` (Section 4.1: 2; Section 5.1: 1).
        train_scale: ``(min, max)`` random shorter side in training.
        crop: training crop size.
        train_output_size: resize the training crop to this size (Section 5.2: 288), or None.
        flip: random horizontal flip in training.
        test_scale: shorter side at test time.
        test_crop: None (full frame, fully-convolutional testing) or the test crop size.
        test_clips: clips per video at test time (Section 4.1: 10).
        test_crops: 1 or 3 spatial views per clip at test time.
        mean: normalisation mean per channel.
        std: normalisation std per channel.
        backend: decoding backend, see :mod:`nlnet.data.video`.
        min_frames: videos with fewer frames are bad (None: ``num_frames``).
        cache_file: JSON frame-count index file, or None to keep the index in memory only.
        seed: None, or an int for per-(seed, epoch, item) augmentation randomness.
        decode_threads: FFmpeg threads per decoder.
        index_workers: threads for probing frame counts (0: sequential).
        clip_cache: None, ``"memory"`` or ``"disk"``: keep decoded clips (uint8 frames, keyed by
            file, frame indices and decode size) for the next request (:mod:`nlnet.data.cache`).
        clip_cache_mb: the cache's size bound in MiB.
        clip_cache_dir: the disk cache's folder (None: ``$NLNET_CACHE/clips``).
    """

    def __init__(
        self,
        videos: Sequence[str | os.PathLike],
        targets: Sequence[Any],
        classes: Sequence[str],
        *,
        mode: str = "train",
        multilabel: bool = False,
        num_frames: int = 32,
        stride: int = 2,
        train_scale: Sequence[int] = (256, 320),
        crop: int | Sequence[int] = 224,
        train_output_size: int | Sequence[int] | None = None,
        flip: bool = True,
        test_scale: int = 256,
        test_crop: int | Sequence[int] | None = None,
        test_clips: int = 10,
        test_crops: int = 1,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        backend: str = "pyav",
        min_frames: int | None = None,
        cache_file: str | os.PathLike | None = None,
        seed: int | None = None,
        decode_threads: int = 1,
        index_workers: int = 0,
        clip_cache: str | None = None,
        clip_cache_mb: float = 1024,
        clip_cache_dir: str | os.PathLike | None = None,
    ) -> None:
        if mode not in ("train", "test"):
            raise ValueError(f"mode must be 'train' or 'test', got {mode!r}")
        if len(videos) != len(targets):
            raise ValueError(f"got {len(videos)} videos but {len(targets)} targets")
        for name, value in (("num_frames", num_frames), ("stride", stride)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(test_clips, int) or test_clips < 1:
            raise ValueError(f"test_clips must be a positive integer, got {test_clips!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.videos = [os.path.abspath(os.fspath(v)) for v in videos]
        self.classes = [str(c) for c in classes]
        self.multilabel = bool(multilabel)
        self.mode = mode
        self.targets = list(targets)
        for v, t in zip(self.videos, self.targets):
            ids = list(t) if self.multilabel else [t]
            bad = [i for i in ids if not 0 <= int(i) < self.num_classes]
            if bad:
                raise ValueError(
                    f"label(s) {bad} of {v!r} out of range for {self.num_classes} classes"
                )
        self.num_frames = num_frames
        self.stride = stride
        self.test_clips = test_clips
        self.test_crops = test_crops
        self.min_frames = num_frames if min_frames is None else int(min_frames)
        self.backend = resolve_backend(backend)
        self.seed = seed
        self.epoch = 0
        self.decode_threads = int(decode_threads)
        self.clip_cache = build_clip_cache(
            clip_cache, max_mb=clip_cache_mb, directory=clip_cache_dir
        )
        self.train_transform = TrainTransform(
            train_scale, crop, flip=flip, output_size=train_output_size, mean=mean, std=std
        )
        self.test_transform = TestTransform(test_scale, test_crop, test_crops, mean=mean, std=std)
        self.cache_file = None if cache_file is None else Path(cache_file)
        index = build_frame_index(self.videos, self.backend, self.cache_file, index_workers)
        self.frame_counts: list[int] = [int(e["num_frames"]) for e in index]
        self.fps: list[float] = [float(e["fps"]) for e in index]
        self.bad_videos: dict[int, str] = {}
        for v, e in enumerate(index):
            if e.get("error"):
                self.bad_videos[v] = str(e["error"])
            elif is_too_short(self.frame_counts[v], self.min_frames):
                self.bad_videos[v] = (
                    f"too short: {self.frame_counts[v]} frames < min_frames={self.min_frames}"
                )
        self._warned: set[str] = set()
        self._last_decoded: tuple[tuple[int, int], torch.Tensor] | None = None
        # warn here, in the main process, so that data-loader workers (copies of this object)
        # do not warn again about the files already known to be bad
        for v, reason in sorted(self.bad_videos.items()):
            self._warn_bad(v, reason)

    # -- sizes ---------------------------------------------------------------------------------
    @property
    def num_classes(self) -> int:
        """Number of classes."""
        return len(self.classes)

    @property
    def num_videos(self) -> int:
        """Number of videos (bad ones included)."""
        return len(self.videos)

    @property
    def views_per_video(self) -> int:
        """Items per video: 1 in training, ``test_clips * test_crops`` in testing."""
        return 1 if self.mode == "train" else self.test_clips * self.test_crops

    def __len__(self) -> int:
        return self.num_videos * self.views_per_video

    def video_index(self, index: int) -> tuple[int, int, int]:
        """``(video, clip, crop)`` of item ``index``."""
        if not 0 <= index < len(self):
            raise IndexError(f"item index {index} out of range for {len(self)} items")
        if self.mode == "train":
            return index, 0, 0
        video, view = divmod(index, self.views_per_video)
        clip, crop = divmod(view, self.test_crops)
        return video, clip, crop

    def video_target(self, video: int) -> Any:
        """Target of a video in the item format (int or multi-hot float tensor)."""
        t = self.targets[video]
        if not self.multilabel:
            return int(t)
        target = torch.zeros(self.num_classes, dtype=torch.float32)
        if len(t):
            target[torch.as_tensor(list(t), dtype=torch.long)] = 1.0
        return target

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch used to seed per-item randomness when ``seed`` is an int."""
        self.epoch = int(epoch)

    def unusable_reason(self) -> str | None:
        """Why no video of this dataset can be used (``None`` while at least one can).

        Names the common cause, e.g. every video shorter than the clip, so that training stops
        before it starts instead of failing on empty batches.
        """
        if self.num_videos and len(self.bad_videos) < self.num_videos:
            return None
        if not self.num_videos:
            return "the dataset lists no video"
        reasons = list(self.bad_videos.values())
        first = self.videos[min(self.bad_videos)]
        if all(r.startswith("too short") for r in reasons):
            return (
                f"all {self.num_videos} videos are shorter than a clip of min_frames="
                f"{self.min_frames} frames (e.g. {first!r}: {reasons[0]}); use shorter clips "
                "(data.num_frames, data.stride) or data.min_frames"
            )
        return (
            f"none of the {self.num_videos} videos can be decoded (e.g. {first!r}: "
            f"{self.bad_videos[min(self.bad_videos)]})"
        )

    # -- items ---------------------------------------------------------------------------------
    def _warn_bad(self, video: int, reason: str) -> None:
        path = self.videos[video]
        self.bad_videos[video] = reason
        if path not in self._warned:
            self._warned.add(path)
            warnings.warn(f"skipping video {path!r}: {reason}", BadVideoWarning, stacklevel=2)

    def _decode(self, video: int, indices: torch.Tensor) -> torch.Tensor:
        cache, key = self.clip_cache, None
        if cache is not None:
            key = clip_key(self.videos[video], indices, backend=self.backend)
            frames = cache.get(key)
            if frames is not None:
                return frames
        with open_video(self.videos[video], self.backend, self.decode_threads) as reader:
            n = reader.num_frames
            frames = reader.get_frames(indices.clamp(max=n - 1))  # (T, H, W, C) uint8
        if cache is not None:
            cache.put(key, frames)
        return frames

    def __getitem__(self, index: int) -> ClipItem | None:
        video, clip, crop = self.video_index(int(index))
        if video in self.bad_videos:
            self._warn_bad(video, self.bad_videos[video])
            return None
        generator = None
        if self.mode == "train" and self.seed is not None:
            generator = torch.Generator().manual_seed(_mix_seed(self.seed, self.epoch, index))
        key = (video, clip)
        if self.mode == "test" and self._last_decoded is not None and self._last_decoded[0] == key:
            frames = self._last_decoded[1]  # the other crops of the same clip
        else:
            idx = clip_indices(
                self.frame_counts[video],
                self.num_frames,
                self.stride,
                self.mode,
                clip_index=clip,
                num_clips=self.test_clips,
                generator=generator,
            )
            try:
                frames = self._decode(video, idx)
            except VideoDecodeError as exc:
                self._warn_bad(video, exc.reason)
                return None
            except Exception as exc:  # any other decoder failure: skip, never stop the run
                self._warn_bad(video, f"{type(exc).__name__}: {exc}")
                return None
            if self.mode == "test":
                self._last_decoded = (key, frames)
        if self.mode == "train":
            out = self.train_transform(frames, generator=generator)
        else:
            out = self.test_transform(frames, crop_index=crop)
        view = clip * self.test_crops + crop if self.mode == "test" else 0
        return ClipItem(out, self.video_target(video), video, view)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(videos={self.num_videos}, classes={self.num_classes}, "
            f"mode={self.mode!r}, clip={self.num_frames}x{self.stride}, items={len(self)}, "
            f"bad={len(self.bad_videos)}, backend={self.backend!r})"
        )


def _visible_dirs(folder: Path) -> list[Path]:
    """Sub-folders of ``folder`` not starting with a dot, sorted by name."""
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def _default_cache(anchor: Path, cache: bool | str | os.PathLike | None) -> Path | None:
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


class VideoFolderDataset(VideoClipDataset):
    """Class-per-folder layout (Kinetics): ``root/<split>/<class>/<video>``.

    Args:
        root: dataset root.
        split: sub-folder of ``root`` (e.g. ``"train"``, ``"val"``); None when ``root`` itself
            holds the class folders.
        classes: class names or a class-index file; default: sorted folder names, the union over
            all split folders of ``root`` so that every split numbers classes the same way.
        extensions: video file extensions (case-insensitive).
        cache: True (JSON index in ``root``), False (memory only) or a JSON path.
        **kwargs: see :class:`VideoClipDataset`.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        split: str | None = "train",
        *,
        classes: str | os.PathLike | Sequence[str] | None = None,
        extensions: Sequence[str] = VIDEO_EXTENSIONS,
        cache: bool | str | os.PathLike | None = True,
        **kwargs: Any,
    ) -> None:
        root = Path(root)
        split_dir = root if split is None else root / split
        if not split_dir.is_dir():
            raise ValueError(f"root: folder {str(split_dir)!r} does not exist")
        exts = tuple(e.lower() for e in extensions)
        if classes is None:
            dirs = [split_dir] if split is None else _visible_dirs(root)
            names = sorted({c.name for d in dirs for c in _visible_dirs(d)})
            if not names:
                raise ValueError(f"root: no class folders in {str(split_dir)!r}")
            token_to_pos = {n: k for k, n in enumerate(names)}
        else:
            names, token_to_pos = read_class_index(classes)
        videos: list[str] = []
        targets: list[int] = []
        for class_dir in _visible_dirs(split_dir):
            if class_dir.name not in token_to_pos:
                raise ValueError(f"classes: folder {class_dir.name!r} is not in the class index")
            files = sorted(
                f for f in class_dir.rglob("*") if f.is_file() and f.suffix.lower() in exts
            )
            videos += [str(f) for f in files]
            targets += [token_to_pos[class_dir.name]] * len(files)
        if not videos:
            raise ValueError(f"root: no videos with extensions {exts} under {str(split_dir)!r}")
        self.root = root
        self.split = split
        super().__init__(videos, targets, names, cache_file=_default_cache(root, cache), **kwargs)


def _parse_list(
    annotations: Path, root: Path, token_to_pos: Mapping[str, int] | None, multilabel: bool
) -> tuple[list[str], list[Any]]:
    videos: list[str] = []
    targets: list[Any] = []
    for n, line in _annotation_lines(annotations):
        where = f"annotations {str(annotations)!r} line {n}"
        if multilabel:
            parts = [t for t in re.split(r"[\s,;]+", line) if t]
            path, labels = parts[0], parts[1:]
            target: Any = sorted({_resolve_label(t, token_to_pos, where) for t in labels})
        else:
            parts = line.split()
            if len(parts) == 1:
                path = parts[0]
                if token_to_pos is None:
                    raise ValueError(
                        f"{where}: a line without a label needs a class-index file ('classes') "
                        "to take the class from the parent folder name"
                    )
                parent = Path(path).parent.name
                target = _resolve_label(parent, token_to_pos, where)
            else:
                path = " ".join(parts[:-1])
                if len(parts) > 2 and not (root / path).exists() and (root / parts[0]).exists():
                    raise ValueError(
                        f"{where}: expected 'path label', got {len(parts)} fields (frame-folder "
                        "lists with a frame count are not supported; use video files)"
                    )
                target = _resolve_label(parts[-1], token_to_pos, where)
        videos.append(str(root / path))
        targets.append(target)
    if not videos:
        raise ValueError(f"annotations: no entries in {str(annotations)!r}")
    return videos, targets


def _max_label(targets: Sequence[Any], multilabel: bool) -> int:
    flat = [i for t in targets for i in t] if multilabel else list(targets)
    return max(flat, default=-1)


class VideoListDataset(VideoClipDataset):
    """Annotation-list layout (UCF101/HMDB51 style): ``path label`` per line.

    Args:
        annotations: the list file. A line is ``path label`` (label = class id or name) or just
            ``path`` (class = parent folder name, needs ``classes``); ``#`` starts a comment.
        root: folder the paths are relative to (default: the list file's folder).
        classes: class names or a class-index file (see the module docstring).
        num_classes: number of classes when there is no class index (default: largest label + 1).
        cache: True (JSON index next to the list file), False (memory only) or a JSON path.
        **kwargs: see :class:`VideoClipDataset`.
    """

    _multilabel = False

    def __init__(
        self,
        annotations: str | os.PathLike,
        root: str | os.PathLike | None = None,
        *,
        classes: str | os.PathLike | Sequence[str] | None = None,
        num_classes: int | None = None,
        cache: bool | str | os.PathLike | None = True,
        **kwargs: Any,
    ) -> None:
        annotations = Path(annotations)
        root_path = annotations.parent if root is None else Path(root)
        if classes is not None:
            names, token_to_pos = read_class_index(classes)
            if num_classes is not None and num_classes != len(names):
                raise ValueError(
                    f"num_classes={num_classes} disagrees with the {len(names)} classes given"
                )
        else:
            names, token_to_pos = [], None
        videos, targets = _parse_list(annotations, root_path, token_to_pos, self._multilabel)
        if token_to_pos is None:
            n = _max_label(targets, self._multilabel) + 1 if num_classes is None else num_classes
            if not isinstance(n, int) or n < 1:
                raise ValueError(f"num_classes must be a positive integer, got {n!r}")
            names = [str(i) for i in range(n)]
        self.root = root_path
        self.annotations = annotations
        super().__init__(
            videos,
            targets,
            names,
            multilabel=self._multilabel,
            cache_file=_default_cache(annotations.parent, cache),
            **kwargs,
        )


class MultiLabelVideoDataset(VideoListDataset):
    """Multi-label lists (Charades, Section 5.2): ``path l1 l2,l3 ...`` per line.

    Labels are separated by spaces, commas or semicolons and are class ids or names; the target is
    a float multi-hot vector of ``num_classes`` (for a per-category sigmoid + BCE loss). Arguments
    as in :class:`VideoListDataset`; paths must not contain spaces or commas.
    """

    _multilabel = True


# --------------------------------------------------------------------------------------------------
# collate


def collate_skip_bad(batch: Sequence[ClipItem | tuple | None]) -> dict[str, Any]:
    """Collates dataset items, dropping the ``None`` items of bad videos.

    Args:
        batch: items ``(clip, target, index)`` (with ``clip_index`` when they are
            :class:`ClipItem`) or ``None``.

    Returns:
        A dict with

        * ``"clip"``: float ``(B, C, T, H, W)``, or None when every item was bad (``B = 0``);
        * ``"target"``: long ``(B,)`` (single-label) or float ``(B, num_classes)`` (multi-label),
          or None when ``B = 0``;
        * ``"index"``: long ``(B,)`` video indices;
        * ``"clip_index"``: long ``(B,)`` view numbers within each video (0 in training);
        * ``"skipped"``: int, the number of ``None`` items dropped from this batch.

    Raises:
        ValueError: the clips have different shapes (full-frame testing of videos with different
            aspect ratios: use a batch size of 1 or set ``test_crop``).
    """
    good = [b for b in batch if b is not None]
    skipped = len(batch) - len(good)
    if not good:
        empty = torch.zeros(0, dtype=torch.long)
        return {"clip": None, "target": None, "index": empty, "clip_index": empty.clone(),
                "skipped": skipped}  # fmt: skip
    shapes = {tuple(b[0].shape) for b in good}
    if len(shapes) > 1:
        raise ValueError(
            f"clips in a batch have different shapes {sorted(shapes)}; for full-frame "
            "(fully-convolutional) testing of videos with different sizes use batch_size=1, "
            "or set test_crop to crop a fixed size"
        )
    clips = torch.stack([b[0] for b in good])  # (B, C, T, H, W)
    targets = [b[1] for b in good]
    if isinstance(targets[0], torch.Tensor):
        target = torch.stack([torch.as_tensor(t) for t in targets]).float()  # (B, num_classes)
    else:
        target = torch.as_tensor([int(t) for t in targets], dtype=torch.long)  # (B,)
    index = torch.as_tensor([int(b[2]) for b in good], dtype=torch.long)
    clip_index = torch.as_tensor([getattr(b, "clip_index", 0) for b in good], dtype=torch.long)
    return {
        "clip": clips,
        "target": target,
        "index": index,
        "clip_index": clip_index,
        "skipped": skipped,
    }


# --------------------------------------------------------------------------------------------------
# factory


def _annotation_file(cfg: Mapping[str, Any], split: str) -> Path:
    ann = cfg["annotations"]
    if ann is None:
        raise ValueError(f"data config: 'annotations' is required for type={cfg['type']!r}")
    if isinstance(ann, Mapping):
        if split not in ann:
            raise ValueError(f"data config: 'annotations' has no entry for split {split!r}")
        ann = ann[split]
    elif isinstance(ann, str):
        ann = ann.replace("{split}", split)
    else:
        raise ValueError(f"data config: 'annotations' must be a string or a dict, got {ann!r}")
    path = Path(ann)
    if not path.is_absolute() and cfg["root"] is not None:
        path = Path(cfg["root"]) / path
    return path


def _infer_num_classes(cfg: Mapping[str, Any], multilabel: bool) -> int | None:
    """Largest label + 1 over all annotation files named in the config (consistent splits)."""
    ann = cfg["annotations"]
    if not isinstance(ann, Mapping):
        return None
    best = -1
    for split in ann:
        path = _annotation_file(cfg, split)
        _, targets = _parse_list(path, path.parent, None, multilabel)
        best = max(best, _max_label(targets, multilabel))
    return best + 1 if best >= 0 else None


def build_dataset(cfg: Mapping[str, Any], split: str, mode: str | None = None) -> VideoClipDataset:
    """Builds a dataset from a plain config dict (keys in the module docstring).

    Args:
        cfg: the data config; missing keys take :data:`DATASET_DEFAULTS`.
        split: split name, e.g. ``"train"``, ``"val"``, ``"test"``.
        mode: ``"train"`` or ``"test"``; default ``"train"`` when ``split`` starts with
            ``"train"`` (``train``, ``trainval``), else ``"test"``.

    Raises:
        ValueError: unknown keys, a missing required key or a bad value.
    """
    if not isinstance(cfg, Mapping):
        raise TypeError(f"cfg must be a dict, got {type(cfg).__name__}")
    unknown = sorted(set(cfg) - set(DATASET_DEFAULTS))
    if unknown:
        raise ValueError(
            f"data config: unknown key(s) {unknown}; allowed keys: {sorted(DATASET_DEFAULTS)}"
        )
    c = {**DATASET_DEFAULTS, **cfg}
    kind = c["type"]
    if kind not in ("folder", "list", "multilabel"):
        raise ValueError(
            f"data config: 'type' must be 'folder', 'list' or 'multilabel', got {kind!r}"
        )
    if mode is None:
        mode = "train" if split.startswith("train") else "test"
    common = {
        "mode": mode,
        "num_frames": c["num_frames"],
        "stride": c["stride"],
        "train_scale": tuple(c["train_scale"]),
        "crop": c["crop"],
        "train_output_size": c["train_output_size"],
        "flip": c["flip"],
        "test_scale": c["test_scale"],
        "test_crop": c["test_crop"],
        "test_clips": c["test_clips"],
        "test_crops": c["test_crops"],
        "mean": tuple(c["mean"]),
        "std": tuple(c["std"]),
        "backend": c["backend"],
        "min_frames": c["min_frames"],
        "seed": c["seed"],
        "decode_threads": c["decode_threads"],
        "index_workers": c["index_workers"],
        "clip_cache": c["clip_cache"],
        "clip_cache_mb": c["clip_cache_mb"],
        "clip_cache_dir": c["clip_cache_dir"],
    }
    if kind == "folder":
        if c["root"] is None:
            raise ValueError("data config: 'root' is required for type='folder'")
        return VideoFolderDataset(
            c["root"],
            split,
            classes=c["classes"],
            extensions=c["extensions"],
            cache=c["cache"],
            **common,
        )
    multilabel = kind == "multilabel"
    cls = MultiLabelVideoDataset if multilabel else VideoListDataset
    ann = _annotation_file(c, split)
    num_classes = c["num_classes"]
    if num_classes is None and c["classes"] is None:
        num_classes = _infer_num_classes(c, multilabel)
    classes = c["classes"]
    if isinstance(classes, str) and c["root"] is not None and not Path(classes).is_absolute():
        if not Path(classes).exists() and (Path(c["root"]) / classes).exists():
            classes = str(Path(c["root"]) / classes)
    cache = c["cache"]
    if cache is True and c["root"] is not None:
        cache = _default_cache(Path(c["root"]), True)
    return cls(
        ann,
        c["root"],
        classes=classes,
        num_classes=num_classes,
        cache=cache,
        **common,
    )
