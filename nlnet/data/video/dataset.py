"""The video dataset composed from parts (:class:`VideoClipDataset`) and its transform adapter.

Layouts (class folders, annotation lists) are subclasses in :mod:`nlnet.data.video.layouts`; the
config keys and the builder are in :mod:`nlnet.data.video.builder`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from nlnet.data.class_folders import classes_without_items
from nlnet.data.seeding import ItemKey
from nlnet.data.video.policy import BadVideoPolicy
from nlnet.data.video.sampling import ClipSampler
from nlnet.data.video.transforms import TestTransform, TrainTransform
from nlnet.data.video_io.backends import VideoDecodeError
from nlnet.data.video_io.decoder import ClipDecoder

__all__ = ["ClipTransform", "VideoClipDataset"]


class VideoClipDataset(Dataset):
    """Videos + targets -> clips, composed from four parts (pytorchvideo's ``LabeledVideoDataset``
    with its ``ClipSampler`` is the model): a clip sampler (:mod:`nlnet.data.video.sampling`:
    :class:`RandomClipSampler` for training, :class:`UniformClipSampler` for testing), a decoder
    (:class:`nlnet.data.video_io.decoder.ClipDecoder`: backend, clip cache, frame-count index),
    a transform (:class:`ClipTransform`) and a bad-video policy
    (:class:`nlnet.data.video.policy.BadVideoPolicy`). :func:`nlnet.data.video.builder.build_parts`
    makes the parts from a :class:`~nlnet.data.video.config.VideoDataConfig`.

    Args:
        labeled_videos: ``(path, target)`` per video; the target is an int class (single-label)
            or a list of ints (multi-label).
        classes: class names (``num_classes = len(classes)``).
        sampler: which frames make each clip, and how many clips a video gives.
        decoder: reads frames (``decoder(path, indices)``) and frame counts
            (``decoder.index(videos, index_file)``).
        transform: ``transform(frames, generator=, crop_index=)`` with ``views`` spatial views.
        policy: the bad-video policy (None: ``BadVideoPolicy()``, ``min_frames`` = clip length).
        multilabel: targets are lists of class ids, returned as multi-hot float vectors.
        index_file: JSON frame-count index file, or None to keep the index in memory only.

    Random choices (a training clip's window, scale, crop, flip) come from one generator per
    item: indexed by an :class:`nlnet.data.seeding.ItemKey` (as the training loop does), item
    ``i`` draws from the key's generator, so the same key gives the same clip in any process;
    indexed by a plain int, from torch's global generator.
    """

    #: read by :class:`nlnet.data.seeding.SeededDataset`: items take an ``ItemKey``.
    takes_item_key = True

    def __init__(
        self,
        labeled_videos: Sequence[tuple[str | os.PathLike, Any]],
        classes: Sequence[str],
        *,
        sampler: ClipSampler,
        decoder: ClipDecoder,
        transform: ClipTransform,
        policy: BadVideoPolicy | None = None,
        multilabel: bool = False,
        index_file: str | os.PathLike | None = None,
    ) -> None:
        videos, targets = [p for p, _ in labeled_videos], [t for _, t in labeled_videos]
        self.sampler, self.decoder, self.transform = sampler, decoder, transform
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
        self.test_crops = int(getattr(transform, "views", 1))
        self.cache_file = None if index_file is None else Path(index_file)
        index = decoder.index(self.videos, self.cache_file)
        self.frame_counts: list[int] = [int(e["num_frames"]) for e in index]
        self.fps: list[float] = [float(e["fps"]) for e in index]
        self.policy = (policy or BadVideoPolicy()).bind(self.videos, index, sampler.clip_len)
        self._last_decoded: tuple[tuple[int, int], torch.Tensor] | None = None

    # -- the parts' settings, as attributes ------------------------------------------------------
    num_frames = property(lambda self: self.sampler.clip_len, doc="Clip length ``T``.")
    stride = property(lambda self: self.sampler.stride, doc="Temporal stride ``s``.")
    test_clips = property(lambda self: self.sampler.clips_per_video, doc="Clips per video.")
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
        """Items per video: the sampler's clips times the transform's views (1 in training)."""
        return self.sampler.clips_per_video * self.test_crops

    def __len__(self) -> int:
        return self.num_videos * self.views_per_video

    def video_index(self, index: int) -> tuple[int, int, int]:
        """``(video, clip, crop)`` of item ``index``."""
        if not 0 <= index < len(self):
            raise IndexError(f"item index {index} out of range for {len(self)} items")
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

    #: True where the classes are the sorted class folders (:class:`VideoFolderDataset`); a list
    #: may number classes it has no line of (a 1-based list's class 0, a subset of an index)
    from_folders: bool = False

    def classes_without_items(self) -> list[str]:
        """Class names no usable video has (bad at indexing: unreadable or too short), for
        class folders only; none for lists and multi-label data, whose numbering may well
        include classes a split lacks."""
        if self.multilabel or not self.from_folders:
            return []
        return classes_without_items(self.classes, self.targets, self.policy.bad)

    def unusable_reason(self) -> str | None:
        """Why no video of this dataset can be used (``None`` while at least one can)."""
        return self.policy.unusable_reason()

    # -- items ---------------------------------------------------------------------------------
    def _frames(self, video: int, clip: int, generator: torch.Generator | None) -> torch.Tensor:
        key = (video, clip)
        if (
            not self.sampler.random
            and self._last_decoded is not None
            and self._last_decoded[0] == key
        ):
            return self._last_decoded[1]  # the other crops of the same clip
        idx = self.sampler(self.frame_counts[video], clip, generator)
        frames = self.decoder(self.videos[video], idx)
        if not self.sampler.random:  # the same frames serve the clip's other spatial views
            self._last_decoded = (key, frames)
        return frames

    def __getitem__(self, key: int | ItemKey) -> dict[str, Any] | None:
        """``{"clip", "target", "index", "clip_index"}`` of item ``key`` (None: a bad video):
        ``clip`` float ``(C, T, H, W)``, ``target`` an int or a multi-hot float vector,
        ``index`` the video, ``clip_index`` the view ``clip * test_crops + crop``."""
        index, generator = (key.index, key.generator()) if isinstance(key, ItemKey) else (key, None)
        video, clip, crop = self.video_index(int(index))
        if self.policy.is_bad(video):
            return None
        try:
            frames = self._frames(video, clip, generator)
        except VideoDecodeError as exc:
            self.policy.mark(video, exc.reason)
            return None
        except Exception as exc:  # any other decoder failure: skip, never stop the run
            self.policy.mark(video, f"{type(exc).__name__}: {exc}")
            return None
        out = self.transform(frames, generator=generator, crop_index=crop)
        view = clip * self.test_crops + crop
        return {"clip": out, "target": self.video_target(video), "index": video, "clip_index": view}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(videos={self.num_videos}, classes={self.num_classes}, "
            f"sampler={self.sampler!r}, items={len(self)}, "
            f"bad={len(self.bad_videos)}, backend={self.backend!r})"
        )


class ClipTransform:
    """Adapts :class:`TrainTransform` (random, takes a generator) and :class:`TestTransform`
    (takes a crop index) to one call ``transform(frames, generator=, crop_index=)``; ``views`` is
    the number of spatial views per clip (the test transform's crops, 1 in training)."""

    def __init__(self, transform: TrainTransform | TestTransform) -> None:
        self.transform = transform
        self.views = transform.num_crops if isinstance(transform, TestTransform) else 1

    def __call__(
        self, frames: torch.Tensor, generator: torch.Generator | None = None, crop_index: int = 0
    ) -> torch.Tensor:
        if isinstance(self.transform, TrainTransform):
            return self.transform(frames, generator=generator)
        return self.transform(frames, crop_index=crop_index)

    def __repr__(self) -> str:
        return f"ClipTransform({self.transform!r})"
