"""Video decoding (PyAV, torchcodec), datasets, the paper's clip sampling, and transforms."""

from nlnet.data.config import Preprocessing, VideoDataConfig
from nlnet.data.datasets import (
    BadVideoWarning,
    ClipItem,
    MultiLabelVideoDataset,
    VideoClipDataset,
    VideoFolderDataset,
    VideoListDataset,
    build_dataset,
    collate_skip_bad,
    read_class_index,
)
from nlnet.data.sampling import clip_indices, test_clip_indices, train_clip_indices
from nlnet.data.transforms import IMAGENET_MEAN, IMAGENET_STD, TestTransform, TrainTransform
from nlnet.data.video import (
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

__all__ = [
    "Preprocessing",
    "VideoDataConfig",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "BadVideoWarning",
    "ClipItem",
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
    "clip_indices",
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
