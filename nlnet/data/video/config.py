"""The typed ``data`` section of a video-classification config, and the preprocessing it implies.

:class:`VideoDataConfig` is the one home of the video data keys: the YAML ``data:`` section of
``task: video_classification`` is read into it when the config loads (an unknown key is a config
error listing the valid ones), :func:`nlnet.data.build_dataset` takes it, and
:meth:`VideoDataConfig.preprocessing` -- the record a checkpoint stores so that a clip can be
prepared again at test time (:class:`nlnet.data.preprocessing.Preprocessing`) -- is derived from it.  The defaults follow "Non-local Neural Networks" (Wang et al.,
CVPR 2018, arXiv:1711.07971), Section 4.1: 32-frame clips with a temporal stride of 2, a random
shorter side in [256, 320] and a 224 crop for training, fully-convolutional testing on a 256
shorter side.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nlnet.data.preprocessing import Preprocessing
from nlnet.functional.stats import IMAGENET_MEAN, IMAGENET_STD

__all__ = ["VideoDataConfig", "VIDEO_EXTENSIONS", "DATA_TYPES"]

VIDEO_EXTENSIONS: tuple[str, ...] = (".mp4", ".avi", ".mkv", ".webm", ".mov", ".m4v", ".gif")
#: Dataset layouts: class folders, a list file of ``path label``, a multi-label list (Charades).
DATA_TYPES: tuple[str, ...] = ("folder", "list", "multilabel")
_BACKENDS = ("pyav", "torchcodec", "auto")


def _positive(name: str, value: Any, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"data.{name}: expected a positive integer, got {value!r}")


def file_extensions(value: Any, key: str = "data.extensions") -> tuple[str, ...]:
    """``value`` as a tuple of ``.ext`` strings: one string is a list of one (``mp4`` or
    ``.mp4``), a missing leading dot is added, so that ``mp4`` never matches ``clip.gmp4``.

    Raises:
        ValueError: an empty list, or an entry that is not a non-empty string.
    """
    items = (value,) if isinstance(value, str) else tuple(value or ())
    if not items or not all(isinstance(e, str) and e.strip(".") for e in items):
        raise ValueError(f"{key}: expected file extensions such as ['.mp4', '.avi'], got {value!r}")
    return tuple(e if e.startswith(".") else f".{e}" for e in items)


@dataclass(frozen=True)
class VideoDataConfig:
    """The ``data`` section of ``task: video_classification`` (Sections 4.1, 5.1, 5.2).

    Attributes:
        type: ``"folder"`` (``root/<split>/<class>/video``), ``"list"`` (annotation file of
            ``path label`` lines) or ``"multilabel"`` (``path l1,l2,...``, Charades); required
            to build a dataset.
        root: dataset root (folder: required; lists: base of relative paths).
        annotations: lists: a file per split (``{split: file}``) or a template with
            ``{split}``; relative to ``root``.
        classes: class names, or the path of a class-index file (.txt or .json).
        num_classes: class count when no class-index file names them (default: largest
            label + 1 over the annotation files).
        num_frames: clip length T (32; 128 in Section 5.1).
        stride: temporal stride between sampled frames (2).
        sampling: ``"window"`` (the paper's, Section 4.1: ``num_frames`` frames ``stride``
            apart from a random window in training, evenly spaced windows in testing) or
            ``"segments"`` (TSN / Something-Something: the whole video in ``num_frames`` equal
            segments, one frame of each, random within the segment in training, at the
            segments' centres in testing; ``stride`` unused). Choose ``segments`` for short
            trimmed clips whose class depends on the whole clip (docs/data.md).
        train_scale: range of the random shorter side in training ((256, 320)).
        crop: training crop size (224).
        train_output_size: resize the training crop to this size (Charades: 288).
        flip: random horizontal flip in training.
        test_scale: shorter side at test time (256; Charades: 320).
        test_crop: ``None``: the full frame (fully-convolutional testing); else a crop size.
        mean: per-channel normalisation mean on the [0, 1] scale (ImageNet's).
        std: per-channel normalisation standard deviation on the [0, 1] scale.
        backend: decoder, ``"pyav"``, ``"torchcodec"`` or ``"auto"``.
        min_frames: videos with fewer frames are bad (``None``: ``num_frames``).
        cache: ``True``: a JSON frame-count index next to the data; ``False``: memory only;
            or the path of the JSON file.
        extensions: video file extensions of the folder layout.
        decode_threads: FFmpeg threads per decoder.
        index_workers: threads probing frame counts (0: in the calling thread).
        clip_cache: decoded-clip cache (:mod:`nlnet.data.video_io.clip_cache`): ``None``, ``"memory"`` (per
            process) or ``"disk"`` (shared by loader workers and DDP ranks).
        clip_cache_mb: the clip cache's size bound in MiB.
        clip_cache_dir: the disk cache's folder (``None``: ``$NLNET_CACHE/clips``).
        clip_cache_unit: ``"clip"`` (an entry per decoded clip) or ``"video"`` (an entry per
            whole video, each clip cut from it: for ``sampling: segments``).

    Test-time clip and crop counts are not data keys: they are ``eval.clips``/``eval.crops``.
    """

    type: str | None = None
    root: str | None = None
    annotations: str | dict | None = None
    classes: str | tuple[str, ...] | None = None
    num_classes: int | None = None
    num_frames: int = 32
    stride: int = 2
    sampling: str = "window"
    train_scale: tuple[int, ...] = (256, 320)
    crop: int | tuple[int, ...] = 224
    train_output_size: int | tuple[int, ...] | None = None
    flip: bool = True
    test_scale: int = 256
    test_crop: int | tuple[int, ...] | None = None
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    backend: str = "pyav"
    min_frames: int | None = None
    cache: bool | str = True
    extensions: tuple[str, ...] = VIDEO_EXTENSIONS
    decode_threads: int = 1
    index_workers: int = 0
    clip_cache: str | None = None
    clip_cache_mb: float = 1024
    clip_cache_dir: str | None = None
    clip_cache_unit: str = "clip"

    def __post_init__(self) -> None:
        if self.clip_cache not in (None, "memory", "disk"):
            raise ValueError(
                f"data.clip_cache: expected null, 'memory' or 'disk', got {self.clip_cache!r}"
            )
        if self.clip_cache_unit not in ("clip", "video"):
            raise ValueError(
                f"data.clip_cache_unit: expected 'clip' or 'video', got {self.clip_cache_unit!r}"
            )
        if not self.clip_cache_mb > 0:
            raise ValueError(f"data.clip_cache_mb: expected > 0, got {self.clip_cache_mb!r}")
        if self.type is not None and self.type not in DATA_TYPES:
            raise ValueError(
                f"data.type: expected one of {', '.join(DATA_TYPES)}, got {self.type!r}"
            )
        if self.sampling not in ("window", "segments"):
            raise ValueError(
                f"data.sampling: expected 'window' or 'segments', got {self.sampling!r}"
            )
        if self.backend not in _BACKENDS:
            raise ValueError(
                f"data.backend: expected one of {', '.join(_BACKENDS)}, got {self.backend!r}"
            )
        for name in ("num_frames", "stride", "test_scale", "decode_threads"):
            _positive(name, getattr(self, name))
        for name in ("num_classes", "min_frames"):
            _positive(name, getattr(self, name), allow_none=True)
        if isinstance(self.index_workers, bool) or self.index_workers < 0:
            raise ValueError(f"data.index_workers: expected >= 0, got {self.index_workers!r}")
        scale = tuple(self.train_scale)
        if len(scale) != 2 or not 0 < scale[0] <= scale[1]:
            raise ValueError(f"data.train_scale: expected [low, high], got {self.train_scale!r}")
        if len(self.mean) != len(self.std) or not self.mean:
            raise ValueError(
                f"data.mean/data.std: expected one value per channel each, got {self.mean!r}, "
                f"{self.std!r}"
            )
        if any(s <= 0 for s in self.std):
            raise ValueError(f"data.std: expected positive values, got {self.std!r}")
        set_ = object.__setattr__  # frozen: normalise sequences to tuples once
        for name in ("train_scale", "mean", "std"):
            set_(self, name, tuple(getattr(self, name)))
        set_(self, "extensions", file_extensions(self.extensions))
        if isinstance(self.classes, list):
            set_(self, "classes", tuple(self.classes))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | VideoDataConfig | None) -> VideoDataConfig:
        """From a plain dict (``ValueError`` naming unknown keys and listing the valid ones)."""
        if isinstance(values, VideoDataConfig):
            return values
        if values is not None and not isinstance(values, Mapping):
            raise TypeError(f"data: expected a mapping, got {type(values).__name__}")
        values = dict(values or {})
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(
                f"data: unknown key(s) {unknown}; valid keys: {', '.join(sorted(known))}"
            )
        return cls(**values)

    def replace(self, **changes: Any) -> VideoDataConfig:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def preprocessing(self) -> Preprocessing:
        """The test-time preprocessing this section implies (Section 4.1, "Inference"): the
        clip's frames, the test scale and crop, the normalisation."""
        return Preprocessing("clip", self.mean, self.std, self.num_frames, self.stride,
                             self.sampling, self.test_scale, self.test_crop)  # fmt: skip
