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

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from nlnet.data.cache import build_clip_cache
from nlnet.data.decoder import ClipDecoder
from nlnet.data.frame_index import (
    build_frame_index,
    clear_memory_index,
    index_file_for,
)
from nlnet.data.items import BadVideoWarning, ClipItem, collate_skip_bad
from nlnet.data.lists import (
    annotation_file,
    infer_num_classes,
    max_label,
    parse_list,
    read_class_index,
)
from nlnet.data.policy import BadVideoPolicy
from nlnet.data.sampling import ClipSampler
from nlnet.data.seeding import item_generator
from nlnet.data.transforms import IMAGENET_MEAN, IMAGENET_STD, TestTransform, TrainTransform
from nlnet.data.video import VideoDecodeError

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


# --------------------------------------------------------------------------------------------------
# datasets


class VideoClipDataset(Dataset):
    """Videos + targets -> clips, composed from four parts (pytorchvideo's ``LabeledVideoDataset``
    with its ``ClipSampler`` is the model): a clip sampler (:class:`nlnet.data.sampling.ClipSampler`,
    the paper's sampling), a decoder (:class:`nlnet.data.decoder.ClipDecoder`, backend + clip
    cache), a transform (:class:`TrainTransform` / :class:`TestTransform`) and a bad-video policy
    (:class:`nlnet.data.policy.BadVideoPolicy`). The keyword arguments build the parts; ``sampler``,
    ``decoder`` and ``transform`` replace them (e.g. a decoder that reads frame folders).

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
        sampler: a ready clip sampler (``num_frames``, ``stride``, ``mode``, ``test_clips`` unused).
        decoder: a ready decoder (``backend``, ``decode_threads``, ``clip_cache*`` unused).
        transform: a ready transform, called as ``transform(frames, generator=, crop_index=)``.
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
        sampler: ClipSampler | None = None,
        decoder: ClipDecoder | None = None,
        transform: Callable[..., torch.Tensor] | None = None,
    ) -> None:
        if len(videos) != len(targets):
            raise ValueError(f"got {len(videos)} videos but {len(targets)} targets")
        self.sampler = sampler or ClipSampler(num_frames, stride, mode, test_clips)
        self.decoder = decoder or ClipDecoder(
            backend, decode_threads, build_clip_cache(clip_cache, max_mb=clip_cache_mb,
                                                      directory=clip_cache_dir)
        )  # fmt: skip
        self.transform = transform or ClipTransform(
            TrainTransform(train_scale, crop, flip=flip, output_size=train_output_size,
                           mean=mean, std=std) if mode == "train"
            else TestTransform(test_scale, test_crop, test_crops, mean=mean, std=std)
        )  # fmt: skip
        self.videos = [os.path.abspath(os.fspath(v)) for v in videos]
        self.classes = [str(c) for c in classes]
        self.multilabel = bool(multilabel)
        self.targets = list(targets)
        for v, t in zip(self.videos, self.targets):
            ids = list(t) if self.multilabel else [t]
            bad = [i for i in ids if not 0 <= int(i) < self.num_classes]
            if bad:
                raise ValueError(
                    f"label(s) {bad} of {v!r} out of range for {self.num_classes} classes"
                )
        self.test_crops = test_crops if self.sampler.mode == "test" else 1
        self.seed = seed
        self.epoch = 0
        self.cache_file = None if cache_file is None else Path(cache_file)
        index = build_frame_index(self.videos, self.decoder.backend, self.cache_file, index_workers)
        self.frame_counts: list[int] = [int(e["num_frames"]) for e in index]
        self.fps: list[float] = [float(e["fps"]) for e in index]
        min_frames = self.sampler.clip_len if min_frames is None else int(min_frames)
        self.policy = BadVideoPolicy(self.videos, index, min_frames)
        self._last_decoded: tuple[tuple[int, int], torch.Tensor] | None = None

    # -- the parts' settings, as attributes ------------------------------------------------------
    mode = property(lambda self: self.sampler.mode, doc="``train`` or ``test``.")
    num_frames = property(lambda self: self.sampler.clip_len, doc="Clip length ``T``.")
    stride = property(lambda self: self.sampler.stride, doc="Temporal stride ``s``.")
    test_clips = property(lambda self: self.sampler.num_clips, doc="Clips per video in testing.")
    backend = property(lambda self: self.decoder.backend, doc="The decoding backend.")
    clip_cache = property(lambda self: self.decoder.cache, doc="The decoded-clip cache or None.")
    bad_videos = property(lambda self: self.policy.bad, doc="``{video: reason}`` of bad videos.")
    min_frames = property(lambda self: self.policy.min_frames, doc="Shorter videos are bad.")

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
        return self.sampler.clips_per_video * self.test_crops

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
        """Why no video of this dataset can be used (``None`` while at least one can)."""
        return self.policy.unusable_reason()

    # -- items ---------------------------------------------------------------------------------
    def _frames(self, video: int, clip: int, generator: torch.Generator | None) -> torch.Tensor:
        key = (video, clip)
        if self.mode == "test" and self._last_decoded is not None and self._last_decoded[0] == key:
            return self._last_decoded[1]  # the other crops of the same clip
        idx = self.sampler(self.frame_counts[video], clip, generator)
        frames = self.decoder(self.videos[video], idx)
        if self.mode == "test":
            self._last_decoded = (key, frames)
        return frames

    def __getitem__(self, index: int) -> ClipItem | None:
        video, clip, crop = self.video_index(int(index))
        if self.policy.is_bad(video):
            return None
        generator = None
        if self.mode == "train" and self.seed is not None:
            generator = item_generator(self.seed, self.epoch, index)
        try:
            frames = self._frames(video, clip, generator)
        except VideoDecodeError as exc:
            self.policy.mark(video, exc.reason)
            return None
        except Exception as exc:  # any other decoder failure: skip, never stop the run
            self.policy.mark(video, f"{type(exc).__name__}: {exc}")
            return None
        out = self.transform(frames, generator=generator, crop_index=crop)
        view = clip * self.test_crops + crop if self.mode == "test" else 0
        return ClipItem(out, self.video_target(video), video, view)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(videos={self.num_videos}, classes={self.num_classes}, "
            f"mode={self.mode!r}, clip={self.num_frames}x{self.stride}, items={len(self)}, "
            f"bad={len(self.bad_videos)}, backend={self.backend!r})"
        )


class ClipTransform:
    """Adapts :class:`TrainTransform` (random, takes a generator) and :class:`TestTransform`
    (takes a crop index) to one call ``transform(frames, generator=, crop_index=)``."""

    def __init__(self, transform: TrainTransform | TestTransform) -> None:
        self.transform = transform

    def __call__(
        self, frames: torch.Tensor, generator: torch.Generator | None = None, crop_index: int = 0
    ) -> torch.Tensor:
        if isinstance(self.transform, TrainTransform):
            return self.transform(frames, generator=generator)
        return self.transform(frames, crop_index=crop_index)

    def __repr__(self) -> str:
        return f"ClipTransform({self.transform!r})"


def _visible_dirs(folder: Path) -> list[Path]:
    """Sub-folders of ``folder`` not starting with a dot, sorted by name."""
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


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
        super().__init__(videos, targets, names, cache_file=index_file_for(root, cache), **kwargs)


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
        videos, targets = parse_list(annotations, root_path, token_to_pos, self._multilabel)
        if token_to_pos is None:
            n = max_label(targets, self._multilabel) + 1 if num_classes is None else num_classes
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
            cache_file=index_file_for(annotations.parent, cache),
            **kwargs,
        )


class MultiLabelVideoDataset(VideoListDataset):
    """Multi-label lists (Charades, Section 5.2): ``path l1 l2,l3 ...`` per line.

    Labels are separated by spaces, commas or semicolons and are class ids or names; the target is
    a float multi-hot vector of ``num_classes`` (for a per-category sigmoid + BCE loss). Arguments
    as in :class:`VideoListDataset`; paths must not contain spaces or commas.
    """

    _multilabel = True


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
    ann = annotation_file(c, split)
    num_classes = c["num_classes"]
    if num_classes is None and c["classes"] is None:
        num_classes = infer_num_classes(c, multilabel)
    classes = c["classes"]
    if isinstance(classes, str) and c["root"] is not None and not Path(classes).is_absolute():
        if not Path(classes).exists() and (Path(c["root"]) / classes).exists():
            classes = str(Path(c["root"]) / classes)
    cache = c["cache"]
    if cache is True and c["root"] is not None:
        cache = index_file_for(Path(c["root"]), True)
    return cls(
        ann,
        c["root"],
        classes=classes,
        num_classes=num_classes,
        cache=cache,
        **common,
    )
