"""Which frames of a video form a clip ("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971), Sections 4.1 and 5.1).

Training (Section 4.1): a clip is cut from a random window of ``T * s`` consecutive frames of which
every ``s``-th frame is kept, giving ``T`` frames. The paper's default is 64 consecutive frames with
every other frame dropped, i.e. ``T = 32, s = 2``; the "longer sequences" setting of Section 5.1
uses 128 consecutive frames without subsampling, ``T = 128, s = 1``.

Testing (Section 4.1): ``K`` clips (the paper: 10) are taken evenly over the full-length video. The
``k``-th window starts at ``round(k * (N - T*s) / (K - 1))``, so the first clip starts at the first
frame and the last clip ends at the last frame (a single clip, ``K = 1``, is centred). Test
sampling is deterministic.

Videos shorter than the window (``N < T * s``): the window starts at frame 0 and the indices that
fall past the end are clamped to the last frame, i.e. the last frame is repeated. This keeps every
clip at exactly ``T`` frames. A video with fewer than ``min_frames`` frames is *too short*
(:func:`is_too_short`); the datasets treat it as a bad video and skip it.
"""

from __future__ import annotations

import torch

__all__ = [
    "SAMPLINGS",
    "SegmentClipSampler",
    "make_sampler",
    "segment_indices",
    "window_size",
    "train_clip_indices",
    "test_clip_starts",
    "test_clip_indices",
    "is_too_short",
    "ClipSampler",
    "RandomClipSampler",
    "UniformClipSampler",
]


def _check_positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _check_clips(num_clips: int) -> None:
    if isinstance(num_clips, bool) or not isinstance(num_clips, int) or num_clips < 1:
        raise ValueError(f"test_clips must be a positive integer, got {num_clips!r}")


def _check_clip_index(clip_index: int, num_clips: int) -> None:
    if not 0 <= clip_index < num_clips:
        raise ValueError(f"clip_index must lie in [0, {num_clips}), got {clip_index}")


def window_size(clip_len: int, stride: int) -> int:
    """Number of consecutive frames a clip is cut from: ``clip_len * stride`` (64 for 32 x 2)."""
    return _check_positive("clip_len", clip_len) * _check_positive("stride", stride)


def _indices_from_start(start: int, num_frames: int, clip_len: int, stride: int) -> torch.Tensor:
    idx = start + stride * torch.arange(clip_len, dtype=torch.long)  # (T,)
    return idx.clamp_(max=num_frames - 1)  # repeat the last frame when the video is too short


def train_clip_indices(
    num_frames: int,
    clip_len: int = 32,
    stride: int = 2,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Frame indices of one random training clip (Section 4.1).

    A window of ``clip_len * stride`` consecutive frames starts uniformly at random in
    ``[0, num_frames - clip_len * stride]``; every ``stride``-th frame of it is kept.

    Args:
        num_frames: frames in the video (``N >= 1``).
        clip_len: frames per clip ``T`` (paper: 32).
        stride: temporal stride ``s`` (paper: 2, "dropping every other frame").
        generator: random generator (None: torch's global one).

    Returns:
        ``(T,)`` long tensor of non-decreasing indices in ``[0, N)``.
    """
    n = _check_positive("num_frames", num_frames)
    window = window_size(clip_len, stride)
    max_start = max(n - window, 0)
    start = int(torch.randint(0, max_start + 1, (1,), generator=generator).item())
    return _indices_from_start(start, n, clip_len, stride)


def test_clip_starts(num_frames: int, clip_len: int, stride: int, num_clips: int) -> list[int]:
    """First frame of each of the ``num_clips`` evenly spaced test windows."""
    n = _check_positive("num_frames", num_frames)
    k = _check_positive("num_clips", num_clips)
    max_start = max(n - window_size(clip_len, stride), 0)
    if k == 1:
        return [max_start // 2]
    return [int(round(i * max_start / (k - 1))) for i in range(k)]


def test_clip_indices(
    num_frames: int, clip_len: int = 32, stride: int = 2, num_clips: int = 10
) -> torch.Tensor:
    """Frame indices of the ``K`` evenly spaced test clips (Section 4.1: 10 clips).

    Returns:
        ``(K, T)`` long tensor; row ``k`` is clip ``k``.
    """
    starts = test_clip_starts(num_frames, clip_len, stride, num_clips)
    return torch.stack([_indices_from_start(s, num_frames, clip_len, stride) for s in starts])


# these names start with "test_" but are not tests: keep pytest from collecting them where imported
test_clip_starts.__test__ = False  # type: ignore[attr-defined]
test_clip_indices.__test__ = False  # type: ignore[attr-defined]


def is_too_short(num_frames: int, min_frames: int) -> bool:
    """Whether a video of ``num_frames`` frames is too short to be used (``< min_frames``)."""
    return num_frames < max(int(min_frames), 1)


class ClipSampler:
    """Which frames of a video make clip ``clip_index``: the base of the sampling policies.

    pytorchvideo's ``ClipSampler`` plays this role in its ``LabeledVideoDataset``; here a policy
    is a subclass (:class:`RandomClipSampler` for training, :class:`UniformClipSampler` for
    testing), not a flag.

    Args:
        clip_len: clip length ``T`` (Section 4.1: 32; Section 5.1: 128).
        stride: temporal stride ``s`` (Section 4.1: 2; Section 5.1: 1).
    """

    #: whether the frames depend on the per-item generator (a training sampler).
    random: bool = False
    #: clips (items before spatial views) a video gives; a test sampler sets its ``num_clips``.
    num_clips: int = 1

    def __init__(self, clip_len: int, stride: int) -> None:
        for name, value in (("num_frames", clip_len), ("stride", stride)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.clip_len, self.stride = clip_len, stride

    @property
    def clips_per_video(self) -> int:
        """How many clips (items before spatial views) a video gives: ``num_clips``."""
        return self.num_clips

    def __call__(
        self, video_frames: int, clip_index: int = 0, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``(clip_len,)`` frame indices of clip ``clip_index`` of a ``video_frames``-frame video."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.clip_len}x{self.stride}, clips={self.clips_per_video})"


class RandomClipSampler(ClipSampler):
    """Training (Section 4.1): one clip per video from a random window of ``clip_len * stride``
    frames, drawn from the item's generator (:func:`train_clip_indices`)."""

    random = True

    def __call__(
        self, video_frames: int, clip_index: int = 0, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``(clip_len,)`` frame indices of a random window (``clip_index`` is unused)."""
        return train_clip_indices(video_frames, self.clip_len, self.stride, generator=generator)


class UniformClipSampler(ClipSampler):
    """Testing (Section 4.1): ``num_clips`` clips spread evenly over the whole video
    (:func:`test_clip_starts`); deterministic, the generator is unused.

    Args:
        clip_len: clip length ``T``.
        stride: temporal stride ``s``.
        num_clips: clips per video (Section 4.1: 10; ``eval.clips``).
    """

    def __init__(self, clip_len: int, stride: int, num_clips: int = 10) -> None:
        super().__init__(clip_len, stride)
        _check_clips(num_clips)
        self.num_clips = num_clips

    def __call__(
        self, video_frames: int, clip_index: int = 0, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``(clip_len,)`` frame indices of the ``clip_index``-th evenly spaced clip."""
        _check_clip_index(clip_index, self.num_clips)
        starts = test_clip_starts(video_frames, self.clip_len, self.stride, self.num_clips)
        return _indices_from_start(starts[clip_index], video_frames, self.clip_len, self.stride)


def segment_indices(video_frames: int, num_segments: int, offsets: torch.Tensor) -> torch.Tensor:
    """One frame in each of ``num_segments`` equal segments of a video (TSN, Wang et al. 2016):
    frame ``floor((i + offsets[i]) * video_frames / num_segments)`` of segment ``i``, with
    ``offsets`` in ``[0, 1)``; a video shorter than ``num_segments`` repeats frames."""
    _check_positive("video_frames", video_frames)
    pos = (torch.arange(num_segments, dtype=torch.float64) + offsets.double()) * video_frames
    return (pos / num_segments).floor().long().clamp_(0, video_frames - 1)


class SegmentClipSampler(ClipSampler):
    """Whole-clip sampling (TSN; mmaction2's ``SampleFrames`` with ``num_clips``, PySlowFast's
    Something-Something loader): the video is divided into ``clip_len`` equal segments and the
    clip takes one frame from each, so it spans the whole video whatever its length.

    In training (``random=True``) the frame is drawn uniformly within its segment from the
    item's generator; in testing clip ``k`` of ``num_clips`` takes, in every segment, the frame at
    the fraction ``(k + 0.5) / num_clips`` of it (one clip: the segment centres).

    Args:
        clip_len: frames per clip ``T`` (the segments).
        num_clips: test clips per video (``eval.clips``); 1 in training.
        random: draw the frames within the segments (training).
    """

    def __init__(self, clip_len: int, num_clips: int = 1, random: bool = False) -> None:
        super().__init__(clip_len, 1)
        _check_clips(num_clips)
        self.num_clips = 1 if random else num_clips
        self.random = random

    def __call__(
        self, video_frames: int, clip_index: int = 0, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``(clip_len,)`` frame indices, one per segment."""
        if self.random:
            offsets = torch.rand(self.clip_len, generator=generator, dtype=torch.float64)
        else:
            _check_clip_index(clip_index, self.num_clips)
            offsets = torch.full((self.clip_len,), (clip_index + 0.5) / self.num_clips)
        return segment_indices(video_frames, self.clip_len, offsets)

    def __repr__(self) -> str:
        kind = "random" if self.random else f"clips={self.num_clips}"
        return f"{type(self).__name__}({self.clip_len} segments, {kind})"


#: ``data.sampling``: a window of ``num_frames`` frames ``stride`` apart (the paper's, Section
#: 4.1) or one frame per segment of the whole video (:class:`SegmentClipSampler`).
SAMPLINGS: tuple[str, ...] = ("window", "segments")


def make_sampler(
    sampling: str, clip_len: int, stride: int, training: bool, clips: int = 10
) -> ClipSampler:
    """The sampler of ``data.sampling`` for training (one random clip) or testing (``clips``)."""
    if sampling == "segments":
        return SegmentClipSampler(clip_len, clips, random=training)
    if sampling != "window":
        raise ValueError(f"data.sampling: expected one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    return (
        RandomClipSampler(clip_len, stride)
        if training
        else UniformClipSampler(clip_len, stride, clips)
    )
