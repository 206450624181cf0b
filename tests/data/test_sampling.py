"""Clip sampling of Section 4.1 / 5.1 ("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971))."""

from __future__ import annotations

import pytest
import torch

from nlnet.data.video.sampling import (
    RandomClipSampler,
    UniformClipSampler,
    is_too_short,
    test_clip_indices,
    test_clip_starts,
    train_clip_indices,
    window_size,
)


def test_paper_training_clip_is_64_consecutive_frames_every_other_dropped():
    g = torch.Generator().manual_seed(0)
    n = 300
    assert window_size(32, 2) == 64
    starts = set()
    for _ in range(200):
        idx = train_clip_indices(n, 32, 2, generator=g)
        assert idx.shape == (32,) and idx.dtype == torch.long
        assert torch.all(idx[1:] - idx[:-1] == 2)  # every other frame of the window
        start = int(idx[0])
        assert 0 <= start <= n - 64  # the 64-frame window lies inside the video
        assert int(idx[-1]) == start + 62
        starts.add(start)
    assert len(starts) > 50  # the window position is random


def test_training_window_start_is_uniform_over_all_positions():
    g = torch.Generator().manual_seed(1)
    # 66 frames: the 64-frame window can start at 0, 1 or 2 -- all must occur, nothing else
    starts = {int(train_clip_indices(66, 32, 2, generator=g)[0]) for _ in range(200)}
    assert starts == {0, 1, 2}


def test_training_randomness_follows_the_generator():
    a = train_clip_indices(500, 8, 2, generator=torch.Generator().manual_seed(5))
    b = train_clip_indices(500, 8, 2, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b)


def test_paper_testing_takes_10_evenly_spaced_clips_over_the_whole_video():
    n = 300
    idx = test_clip_indices(n, 32, 2, 10)
    assert idx.shape == (10, 32)
    assert torch.all(idx[:, 1:] - idx[:, :-1] == 2)
    starts = idx[:, 0]
    assert int(starts[0]) == 0 and int(idx[-1, -1]) == n - 2  # first frame .. end of the video
    gaps = starts[1:] - starts[:-1]
    assert int(gaps.max() - gaps.min()) <= 1  # evenly spread (up to rounding)
    assert int(starts[-1]) == n - 64
    assert torch.equal(idx, test_clip_indices(n, 32, 2, 10))  # deterministic
    sampler = UniformClipSampler(32, 2, num_clips=10)
    assert sampler.clips_per_video == 10 and not sampler.random
    for k in range(10):
        assert torch.equal(sampler(n, k), idx[k])


def test_random_clip_sampler_draws_the_training_window_from_the_item_generator():
    sampler = RandomClipSampler(32, 2)
    assert sampler.clips_per_video == 1 and sampler.random
    a = sampler(300, generator=torch.Generator().manual_seed(4))
    b = train_clip_indices(300, 32, 2, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a, b)


def test_single_test_clip_is_centred():
    assert test_clip_starts(100, 8, 2, 1) == [(100 - 16) // 2]


def test_longer_sequences_128_consecutive_frames():
    # Section 5.1: 128 consecutive frames without subsampling
    idx = train_clip_indices(400, 128, 1, generator=torch.Generator().manual_seed(0))
    assert idx.shape == (128,) and torch.all(idx[1:] - idx[:-1] == 1)
    assert int(idx[-1]) <= 399


def test_short_video_repeats_the_last_frame():
    n = 40  # shorter than the 64-frame window
    idx = train_clip_indices(n, 32, 2, generator=torch.Generator().manual_seed(0))
    expected = torch.clamp(torch.arange(32) * 2, max=n - 1)
    assert torch.equal(idx, expected)
    test = test_clip_indices(n, 32, 2, 10)
    assert torch.equal(test, expected.expand(10, 32))
    assert int(test.max()) == n - 1
    one = train_clip_indices(1, 4, 2)
    assert one.tolist() == [0, 0, 0, 0]


def test_too_short():
    assert is_too_short(7, 8) and not is_too_short(8, 8)
    assert is_too_short(0, 0)  # an empty video is always too short


@pytest.mark.parametrize(
    "call",
    [
        lambda: train_clip_indices(0, 8, 2),
        lambda: train_clip_indices(10, 0, 2),
        lambda: train_clip_indices(10, 8, 0),
        lambda: test_clip_indices(10, 8, 2, 0),
        lambda: RandomClipSampler(0, 2),
        lambda: UniformClipSampler(8, 2, num_clips=0),
        lambda: UniformClipSampler(8, 2, num_clips=3)(10, 3),
    ],
)
def test_bad_arguments(call):
    with pytest.raises(ValueError):
        call()
