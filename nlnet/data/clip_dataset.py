"""The video dataset composed from parts (:class:`VideoClipDataset`) and its transform adapter.

Layouts (class folders, annotation lists) are subclasses in :mod:`nlnet.data.layouts`; the
config keys and the builder are in :mod:`nlnet.data.datasets`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from nlnet.data.cache import build_clip_cache
from nlnet.data.decoder import ClipDecoder
from nlnet.data.frame_index import build_frame_index
from nlnet.data.items import ClipItem
from nlnet.data.policy import BadVideoPolicy
from nlnet.data.sampling import ClipSampler
from nlnet.data.seeding import item_generator
from nlnet.data.transforms import IMAGENET_MEAN, IMAGENET_STD, TestTransform, TrainTransform
from nlnet.data.video import VideoDecodeError

__all__ = ["ClipTransform", "VideoClipDataset"]


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
