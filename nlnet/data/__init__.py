"""Data: the video pipeline (:mod:`nlnet.data.video`), video I/O (:mod:`nlnet.data.video_io`),
the other tasks' datasets, each with its typed ``data`` section in a ``config`` module beside it
(:mod:`nlnet.data.images`, :mod:`nlnet.data.segmentation`, :mod:`nlnet.data.detection`,
:mod:`nlnet.data.super_resolution`), the loader and the one per-item seed."""

from nlnet.data.preprocessing import Preprocessing
from nlnet.data.video.builder import (
    BadVideoWarning,
    MultiLabelVideoDataset,
    VideoClipDataset,
    VideoFolderDataset,
    VideoListDataset,
    build_dataset,
    build_parts,
    collate_skip_bad,
    read_class_index,
)
from nlnet.data.video.config import VideoDataConfig
from nlnet.data.video.sampling import (
    RandomClipSampler,
    SegmentClipSampler,
    UniformClipSampler,
    test_clip_indices,
    train_clip_indices,
)
from nlnet.data.video.transforms import TestTransform, TrainTransform
from nlnet.data.video_io.backends import (
    VideoDecodeError,
    VideoInfo,
    VideoReader,
    available_backends,
    open_video,
    probe_video,
    read_frames,
    torchcodec_available,
    write_video,
)
from nlnet.functional.stats import IMAGENET_MEAN, IMAGENET_STD

__all__ = [
    "Preprocessing",
    "VideoDataConfig",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "BadVideoWarning",
    "MultiLabelVideoDataset",
    "TestTransform",
    "TrainTransform",
    "VideoClipDataset",
    "VideoDecodeError",
    "VideoFolderDataset",
    "VideoInfo",
    "VideoListDataset",
    "VideoReader",
    "available_backends",
    "build_dataset",
    "RandomClipSampler",
    "SegmentClipSampler",
    "UniformClipSampler",
    "build_parts",
    "collate_skip_bad",
    "open_video",
    "probe_video",
    "read_class_index",
    "read_frames",
    "test_clip_indices",
    "torchcodec_available",
    "train_clip_indices",
    "write_video",
]
