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
    "window_size",
    "train_clip_indices",
    "test_clip_starts",
    "test_clip_indices",
    "clip_indices",
    "is_too_short",
    "ClipSampler",
]


def _check_positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


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


def clip_indices(
    num_frames: int,
    clip_len: int,
    stride: int,
    mode: str,
    *,
    clip_index: int = 0,
    num_clips: int = 10,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Indices of one clip: random in ``mode="train"``, the ``clip_index``-th test clip otherwise.

    Returns:
        ``(T,)`` long tensor.
    """
    if mode == "train":
        return train_clip_indices(num_frames, clip_len, stride, generator=generator)
    if mode != "test":
        raise ValueError(f"mode must be 'train' or 'test', got {mode!r}")
    if not 0 <= clip_index < num_clips:
        raise ValueError(f"clip_index must lie in [0, {num_clips}), got {clip_index}")
    start = test_clip_starts(num_frames, clip_len, stride, num_clips)[clip_index]
    return _indices_from_start(start, num_frames, clip_len, stride)


# these names start with "test_" but are not tests: keep pytest from collecting them where imported
test_clip_starts.__test__ = False  # type: ignore[attr-defined]
test_clip_indices.__test__ = False  # type: ignore[attr-defined]


def is_too_short(num_frames: int, min_frames: int) -> bool:
    """Whether a video of ``num_frames`` frames is too short to be used (``< min_frames``)."""
    return num_frames < max(int(min_frames), 1)


class ClipSampler:
    """Which frames of a video make item ``clip_index``: the paper's sampling as one part.

    ``mode="train"``: one clip per video at a random position (Section 4.1: ``clip_len`` frames at
    ``stride``); ``mode="test"``: ``num_clips`` clips spread uniformly over the video.
    (pytorchvideo's ``ClipSampler`` plays this role in its ``LabeledVideoDataset``.)
    """

    def __init__(self, clip_len: int, stride: int, mode: str = "train", num_clips: int = 10):
        if mode not in ("train", "test"):
            raise ValueError(f"mode must be 'train' or 'test', got {mode!r}")
        for name, value in (("num_frames", clip_len), ("stride", stride)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if isinstance(num_clips, bool) or not isinstance(num_clips, int) or num_clips < 1:
            raise ValueError(f"test_clips must be a positive integer, got {num_clips!r}")
        self.clip_len, self.stride, self.mode, self.num_clips = clip_len, stride, mode, num_clips

    @property
    def clips_per_video(self) -> int:
        """1 in training, ``num_clips`` in testing."""
        return 1 if self.mode == "train" else self.num_clips

    def __call__(
        self, video_frames: int, clip_index: int = 0, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """``(clip_len,)`` frame indices of clip ``clip_index`` of a ``video_frames``-frame video."""
        return clip_indices(video_frames, self.clip_len, self.stride, self.mode,
                            clip_index=clip_index, num_clips=self.num_clips,
                            generator=generator)  # fmt: skip

    def __repr__(self) -> str:
        return (f"ClipSampler({self.clip_len}x{self.stride}, mode={self.mode!r}, "
                f"clips={self.clips_per_video})")  # fmt: skip
