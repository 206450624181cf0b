"""Whole-clip (segment) sampling, ``data.sampling: segments`` (TSN; mmaction2's SampleFrames):
one frame per segment, random within it in training, the centres in testing; through the
dataset, the checkpoint's preprocessing and prediction."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nlnet.data.preprocessing import Preprocessing
from nlnet.data.video.config import VideoDataConfig
from nlnet.data.video.sampling import SegmentClipSampler, make_sampler, segment_indices


def test_one_frame_per_segment_covers_the_whole_video():
    sampler = SegmentClipSampler(8, random=True)
    for frames in (8, 13, 64, 100):
        for seed in range(20):
            idx = sampler(frames, 0, torch.Generator().manual_seed(seed))
            bounds = [(i * frames // 8, -(-(i + 1) * frames // 8)) for i in range(8)]
            assert all(lo <= int(j) < max(hi, lo + 1) for j, (lo, hi) in zip(idx, bounds))
    # the same item key draws the same frames (exact resume, per-item seeding)
    a, b = (sampler(100, 0, torch.Generator().manual_seed(3)) for _ in range(2))
    assert torch.equal(a, b)


def test_test_clips_take_fractions_of_each_segment_and_short_videos_repeat():
    one = SegmentClipSampler(4, num_clips=1)
    assert one(40).tolist() == [5, 15, 25, 35]  # the segments' centres
    two = SegmentClipSampler(4, num_clips=2)
    assert [two(40, k).tolist() for k in range(2)] == [[2, 12, 22, 32], [7, 17, 27, 37]]
    assert one(2).tolist() == [0, 0, 1, 1]  # shorter than the clip: frames repeat
    assert segment_indices(3, 3, torch.zeros(3)).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="clip_index"):
        one(40, 1)
    with pytest.raises(ValueError, match="data.sampling"):
        make_sampler("segment", 4, 1, True)
    with pytest.raises(ValueError, match="data.sampling"):
        VideoDataConfig(sampling="tsn")


def test_the_dataset_and_prediction_use_the_stored_sampling(tmp_path):
    """A folder dataset with segments: a clip's frames span the video (frame k shows the value
    k); the checkpoint's preprocessing carries the sampling to ``nlnet.predict``'s transform."""
    from nlnet.data.video.builder import VideoFolderDataset, build_parts
    from nlnet.data.video_io.backends import write_video
    from nlnet.inference import VideoTransform

    for cls in ("a", "b"):
        (tmp_path / "train" / cls).mkdir(parents=True)
        frames = np.stack([np.full((16, 16, 3), 8 * k, np.uint8) for k in range(24)])
        write_video(tmp_path / "train" / cls / "v.mp4", frames, fps=8, crf=0, pix_fmt="yuv444p")
    data = VideoDataConfig(type="folder", root=str(tmp_path), num_frames=4, stride=1,
                           sampling="segments", test_scale=16, mean=(0,) * 3, std=(1,) * 3,
                           min_frames=4)  # fmt: skip
    test = VideoFolderDataset(tmp_path, "train", cache=False, **build_parts(data, False, clips=1))
    clip = test[0]["clip"]  # (3, 4, 16, 16), values k * 8 / 255
    frame_ids = (clip[0, :, 8, 8] * 255 / 8).round().long().tolist()
    assert frame_ids == [3, 9, 15, 21]  # the centres of 4 segments of 24 frames
    prep = data.preprocessing()
    assert prep.to_dict()["sampling"] == "segments"
    assert Preprocessing.from_dict(prep.to_dict()).sampling == "segments"
    assert "sampling" not in data.replace(sampling="window").preprocessing().to_dict()
    tf = VideoTransform.from_preprocessing(Preprocessing.from_dict(prep.to_dict()), clips=1)
    views = tf(tmp_path / "train" / "a" / "v.mp4")
    assert (views[0, 0, :, 8, 8] * 255 / 8).round().long().tolist() == [3, 9, 15, 21]
