"""Video classification datasets read from real files, with the recipe of the paper.

"Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971) trains on Kinetics (Section 5.1: single-label, a random clip per
video, Section 4.1 sampling and augmentation) and Charades (Section 5.2: multi-label with 157
classes, a per-category sigmoid); testing averages softmax scores of 10 clips per video.

Where the parts live: the dataset composed from a clip sampler, a decoder, a transform and a
bad-video policy is :class:`nlnet.data.video.dataset.VideoClipDataset`; the layouts below are in
:mod:`nlnet.data.video.layouts`, list and class-index parsing in :mod:`nlnet.data.video.lists`, the frame-count
index in :mod:`nlnet.data.video_io.frame_index`, items and batches in :mod:`nlnet.data.video.batches`. This module
holds the config keys and the builder (:func:`build_dataset`), and re-exports the names.

Three layouts are read:

* :class:`VideoFolderDataset` -- class per folder, Kinetics style: ``root/<split>/<class>/*.mp4``.
  Class names are the sorted class folders of the training splits (``train*``, so that train and
  val share one numbering; a class folder only a val/test split has is refused, naming the folder
  and the split); class id = position in that list.
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

Items. In training (:class:`RandomClipSampler`) item ``i`` is one random clip of video ``i``. In
testing (:class:`UniformClipSampler`) every video contributes ``test_clips * test_crops`` items
(clip ``k``, crop ``c`` is item ``i = (video * test_clips + k) * test_crops + c``), each
evaluated on its own, so that the evaluator averages the softmax scores per video (Section 4.1).
An item is a dict ``{"clip", "target", "index", "clip_index"}``: ``clip`` float
``(C, T, H, W)`` normalised, ``target`` an int (single-label) or a float multi-hot
``(num_classes,)`` tensor, ``index`` the video index, ``clip_index`` the view number
``k * test_crops + c`` (0 in training).

Bad videos. A video that cannot be opened or decoded, or that has fewer than ``min_frames``
frames (default: one clip's length ``num_frames``), is *bad*: a :class:`BadVideoWarning` naming
the file is issued once per file (per process) and the item is ``None``. :func:`collate_skip_bad`
drops the ``None`` items and reports how many it dropped, so a run never stops on a bad file and
the epoch summary can count them.

Frame-count index. The number of frames of every video is probed once (packet headers only, see
:mod:`nlnet.data.video_io.backends`) when a dataset is created, kept in memory for the whole process and
stored in a JSON file, by default ``<root or annotation folder>/.nlnet_index.json`` (when that
folder is read-only: ``$NLNET_CACHE/index/`` or ``~/.cache/nlnet/index/``). An entry is
keyed by the absolute path and is reused while the file's size and modification time are
unchanged; unreadable files are recorded too. If the folder is read-only the index stays in memory.

Augmentation randomness. A training item indexed by an :class:`nlnet.data.seeding.ItemKey` draws
its random choices from the key's generator; the training loop's keys are seeded by
``(train.seed, epoch, index)``, so the clips do not depend on the number of workers or processes
and replay exactly when a run is resumed. Indexed by a plain int, an item draws from torch's
global generator (per data-loader worker, as usual).

``build_dataset(cfg, split)`` takes a :class:`~nlnet.data.video.config.VideoDataConfig` (the keys, their
defaults and meaning are documented there, in one place); test-time clips and crops are its
``clips``/``crops`` arguments (``eval.clips``/``eval.crops`` of the engine config).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nlnet.data.video.batches import BadVideoWarning, collate_skip_bad
from nlnet.data.video.config import DATA_TYPES, VideoDataConfig
from nlnet.data.video.dataset import ClipTransform, VideoClipDataset
from nlnet.data.video.layouts import (
    MultiLabelVideoDataset,
    VideoFolderDataset,
    VideoListDataset,
)
from nlnet.data.video.lists import (
    annotation_file,
    infer_num_classes,
    read_class_index,
)
from nlnet.data.video.policy import BadVideoPolicy
from nlnet.data.video.sampling import ClipSampler, make_sampler
from nlnet.data.video.transforms import TestTransform, TrainTransform
from nlnet.data.video_io.clip_cache import build_clip_cache
from nlnet.data.video_io.decoder import ClipDecoder
from nlnet.data.video_io.frame_index import (
    build_frame_index,
    clear_memory_index,
    index_file_for,
)

__all__ = [
    "BadVideoWarning",
    "VideoClipDataset",
    "VideoFolderDataset",
    "VideoListDataset",
    "MultiLabelVideoDataset",
    "build_dataset",
    "build_parts",
    "collate_skip_bad",
    "read_class_index",
    "build_frame_index",
    "clear_memory_index",
]


# --------------------------------------------------------------------------------------------------
# datasets


def build_parts(
    cfg: VideoDataConfig | Mapping[str, Any], training: bool, *, clips: int = 10, crops: int = 1
) -> dict[str, Any]:
    """The parts of a :class:`VideoClipDataset` made from a data config (Section 4.1).

    Args:
        cfg: the data config (a plain dict is read into one).
        training: a random clip and a random crop per video (:class:`RandomClipSampler`,
            :class:`TrainTransform`); else ``clips`` evenly spaced clips of ``crops`` views each
            (:class:`UniformClipSampler`, :class:`TestTransform`).
        clips: clips per video in testing (``eval.clips``; Section 4.1: 10).
        crops: spatial views per clip in testing (``eval.crops``: 1 or 3).

    Returns:
        ``{"sampler", "decoder", "transform", "policy"}``, the keyword arguments of
        :class:`VideoClipDataset` (and of the layouts).
    """
    c = VideoDataConfig.from_mapping(cfg)
    cache = build_clip_cache(c.clip_cache, max_mb=c.clip_cache_mb, directory=c.clip_cache_dir)
    if training:
        sampler: ClipSampler = make_sampler(c.sampling, c.num_frames, c.stride, True)
        transform = TrainTransform(c.train_scale, c.crop, flip=c.flip,
                                   output_size=c.train_output_size, mean=c.mean, std=c.std)  # fmt: skip
    else:
        sampler = make_sampler(c.sampling, c.num_frames, c.stride, False, clips)
        transform = TestTransform(c.test_scale, c.test_crop, crops, mean=c.mean, std=c.std)
    return {
        "sampler": sampler,
        "decoder": ClipDecoder(
            c.backend, c.decode_threads, cache, c.index_workers, unit=c.clip_cache_unit
        ),
        "transform": ClipTransform(transform),
        "policy": BadVideoPolicy(c.min_frames),
    }


def build_dataset(
    cfg: VideoDataConfig | Mapping[str, Any],
    split: str,
    mode: str | None = None,
    *,
    clips: int = 10,
    crops: int = 1,
) -> VideoClipDataset:
    """Builds the dataset of a split from a :class:`~nlnet.data.video.config.VideoDataConfig`.

    Args:
        cfg: the data config (a plain dict is read into one: unknown keys are an error).
        split: split name, e.g. ``"train"``, ``"val"``, ``"test"``.
        mode: ``"train"`` or ``"test"``; default ``"train"`` when ``split`` starts with
            ``"train"`` (``train``, ``trainval``), else ``"test"``.
        clips: clips per video in test mode (``eval.clips``; 10 in Section 4.1).
        crops: crops per clip in test mode (``eval.crops``).

    Raises:
        ValueError: unknown keys, a missing required key or a bad value.
    """
    c = VideoDataConfig.from_mapping(cfg)
    if c.type is None:
        raise ValueError(f"data.type: required, one of {', '.join(DATA_TYPES)}")
    if mode is None:
        mode = "train" if split.startswith("train") else "test"
    if mode not in ("train", "test"):
        raise ValueError(f"mode: expected 'train' or 'test', got {mode!r}")
    common = build_parts(c, mode == "train", clips=clips, crops=crops)
    if c.type == "folder":
        if c.root is None:
            raise ValueError("data.root: required for type='folder'")
        return VideoFolderDataset(
            c.root, split, classes=c.classes, extensions=c.extensions, cache=c.cache, **common
        )
    multilabel = c.type == "multilabel"
    cls = MultiLabelVideoDataset if multilabel else VideoListDataset
    ann = annotation_file(c, split)
    num_classes = c.num_classes
    if num_classes is None and c.classes is None:
        num_classes = infer_num_classes(c, multilabel)
    classes = list(c.classes) if isinstance(c.classes, tuple) else c.classes
    if isinstance(classes, str) and c.root is not None and not Path(classes).is_absolute():
        if not Path(classes).exists() and (Path(c.root) / classes).exists():
            classes = str(Path(c.root) / classes)
    cache = c.cache
    if cache is True and c.root is not None:
        cache = index_file_for(Path(c.root), True)
    return cls(ann, c.root, classes=classes, num_classes=num_classes, cache=cache, **common)
