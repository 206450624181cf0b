"""Spatial clip transforms of the training and testing recipe ("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971)).

Section 4.1, training: the video is rescaled so that its shorter side is a random size in
``[256, 320]`` pixels (scale jittering), a random ``224 x 224`` window is cropped, and the clip is
flipped horizontally with probability 1/2. Section 4.1, inference: the shorter side is rescaled to
256 and the network runs *fully convolutionally* on the whole frame; a 3-crop variant (three square
crops along the longer side) and a centre crop are provided as well. Section 5.2 (Charades) crops a
224 window and rescales it to 288 pixels (``output_size``) and tests at a single scale of 320.

Every transform takes a clip as decoded, ``uint8`` ``(T, H, W, C)``, and returns a float
``(C, T, H, W)`` clip normalised with a per-channel mean and standard deviation (ImageNet's by
default, on the ``[0, 1]`` scale). The ops are plain ``torch`` ops (``F.interpolate``) and run on
whatever device the input is on. All sizes are arguments, so tests can use tiny ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from nlnet.functional.stats import IMAGENET_MEAN, IMAGENET_STD

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "to_float_clip",
    "short_side_size",
    "short_side_resize",
    "resize",
    "random_short_side_resize",
    "random_crop",
    "center_crop",
    "spatial_crop",
    "three_crop",
    "horizontal_flip",
    "normalize",
    "TrainTransform",
    "TestTransform",
]

Size = int | Sequence[int]


def _pair(name: str, size: Size) -> tuple[int, int]:
    if isinstance(size, int) and not isinstance(size, bool):
        pair = (size, size)
    elif isinstance(size, Sequence) and len(size) == 2:
        pair = (int(size[0]), int(size[1]))
    else:
        raise ValueError(f"{name} must be an int or a (height, width) pair, got {size!r}")
    if min(pair) < 1:
        raise ValueError(f"{name} must be positive, got {size!r}")
    return pair


def _check_clip(clip: torch.Tensor) -> None:
    if not isinstance(clip, torch.Tensor) or clip.ndim != 4:
        shape = tuple(clip.shape) if isinstance(clip, torch.Tensor) else type(clip).__name__
        raise ValueError(f"clip must be a (C, T, H, W) tensor, got {shape}")


def to_float_clip(frames: torch.Tensor) -> torch.Tensor:
    """``uint8`` ``(T, H, W, C)`` frames -> float32 ``(C, T, H, W)`` in ``[0, 1]``."""
    if not isinstance(frames, torch.Tensor) or frames.ndim != 4:
        raise ValueError("frames must be a (T, H, W, C) tensor")
    if frames.dtype != torch.uint8:
        raise TypeError(f"frames must be uint8 as decoded, got {frames.dtype}")
    return frames.permute(3, 0, 1, 2).float().div_(255.0)  # (C, T, H, W)


def _uint8_view(frames: torch.Tensor) -> torch.Tensor:
    """``uint8`` ``(T, H, W, C)`` -> the same data viewed as ``(C, T, H, W)``."""
    if not isinstance(frames, torch.Tensor) or frames.ndim != 4:
        raise ValueError("frames must be a (T, H, W, C) tensor")
    if frames.dtype != torch.uint8:
        raise TypeError(f"frames must be uint8 as decoded, got {frames.dtype}")
    return frames.permute(3, 0, 1, 2)


def short_side_size(height: int, width: int, size: int) -> tuple[int, int]:
    """Output ``(height, width)`` when the shorter side becomes ``size`` (aspect ratio kept)."""
    if height <= width:
        return size, max(int(width * size / height), 1)
    return max(int(height * size / width), 1), size


def resize(clip: torch.Tensor, size: Size, mode: str = "bilinear") -> torch.Tensor:
    """Resizes every frame of a ``(C, T, H, W)`` clip to ``size`` = ``(h, w)``.

    Float clips are interpolated in their dtype. ``uint8`` clips stay ``uint8``: on the CPU with
    ``mode="bilinear"`` torch interpolates them natively (several times faster than in float,
    results rounded to the nearest level); elsewhere they go through float32 and are rounded back.
    """
    _check_clip(clip)
    h, w = _pair("size", size)
    if (h, w) == tuple(clip.shape[-2:]):
        return clip
    x = clip.transpose(0, 1)  # (T, C, H, W): frames as a batch
    align = False if mode in ("bilinear", "bicubic") else None
    if clip.dtype == torch.uint8 and not (clip.device.type == "cpu" and mode == "bilinear"):
        x = F.interpolate(x.float(), size=(h, w), mode=mode, align_corners=align)
        x = x.round_().clamp_(0, 255).to(torch.uint8)
    else:
        x = F.interpolate(x, size=(h, w), mode=mode, align_corners=align)
    return x.transpose(0, 1)  # (C, T, h, w)


def short_side_resize(clip: torch.Tensor, size: int, mode: str = "bilinear") -> torch.Tensor:
    """Rescales a ``(C, T, H, W)`` clip so that its shorter side is ``size`` (Section 4.1)."""
    _check_clip(clip)
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be a positive integer, got {size!r}")
    return resize(clip, short_side_size(clip.shape[-2], clip.shape[-1], size), mode)


def random_short_side_resize(
    clip: torch.Tensor,
    min_size: int,
    max_size: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Scale jittering: shorter side uniformly random in ``[min_size, max_size]`` (inclusive)."""
    if not 1 <= min_size <= max_size:
        raise ValueError(f"need 1 <= min_size <= max_size, got [{min_size}, {max_size}]")
    size = int(torch.randint(min_size, max_size + 1, (1,), generator=generator).item())
    return short_side_resize(clip, size)


def _crop(clip: torch.Tensor, top: int, left: int, h: int, w: int) -> torch.Tensor:
    return clip[..., top : top + h, left : left + w]


def _check_fits(clip: torch.Tensor, h: int, w: int) -> None:
    H, W = clip.shape[-2:]
    if h > H or w > W:
        raise ValueError(f"crop size {(h, w)} is larger than the frame {(H, W)}")


def random_crop(
    clip: torch.Tensor, size: Size, generator: torch.Generator | None = None
) -> torch.Tensor:
    """A crop of ``size`` at a uniformly random position (the same for all frames)."""
    _check_clip(clip)
    h, w = _pair("size", size)
    _check_fits(clip, h, w)
    H, W = clip.shape[-2:]
    top = int(torch.randint(0, H - h + 1, (1,), generator=generator).item())
    left = int(torch.randint(0, W - w + 1, (1,), generator=generator).item())
    return _crop(clip, top, left, h, w)


def center_crop(clip: torch.Tensor, size: Size) -> torch.Tensor:
    """The central crop of ``size``."""
    return spatial_crop(clip, size, 1)


def spatial_crop(clip: torch.Tensor, size: Size, position: int) -> torch.Tensor:
    """Crop number ``position`` of three along the longer side.

    ``position`` 0 is the left (or top) end, 1 the centre, 2 the right (or bottom) end; the other
    axis is centred.
    """
    _check_clip(clip)
    h, w = _pair("size", size)
    _check_fits(clip, h, w)
    if position not in (0, 1, 2):
        raise ValueError(f"position must be 0, 1 or 2, got {position!r}")
    H, W = clip.shape[-2:]
    top, left = (H - h) // 2, (W - w) // 2
    if position != 1:
        if W >= H:
            left = 0 if position == 0 else W - w
        else:
            top = 0 if position == 0 else H - h
    return _crop(clip, top, left, h, w)


def three_crop(clip: torch.Tensor, size: Size) -> list[torch.Tensor]:
    """The three crops of :func:`spatial_crop` (start, centre, end of the longer side)."""
    return [spatial_crop(clip, size, p) for p in range(3)]


def horizontal_flip(clip: torch.Tensor) -> torch.Tensor:
    """Mirrors every frame left to right."""
    _check_clip(clip)
    return clip.flip(-1)


def normalize(clip: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """``(clip - mean) / std`` per channel of a ``(C, T, H, W)`` clip."""
    _check_clip(clip)
    c = clip.shape[0]
    if len(mean) != c or len(std) != c:
        raise ValueError(f"mean and std need {c} values (one per channel), got {mean}, {std}")
    if any(s <= 0 for s in std):
        raise ValueError(f"std must be positive, got {std}")
    m = torch.as_tensor(mean, dtype=clip.dtype, device=clip.device).view(c, 1, 1, 1)
    s = torch.as_tensor(std, dtype=clip.dtype, device=clip.device).view(c, 1, 1, 1)
    return (clip - m) / s


class TrainTransform:
    """Training augmentation of Section 4.1: scale jitter, random crop, flip, normalisation.

    Args:
        scale: ``(min, max)`` range of the shorter side (paper: ``(256, 320)``).
        crop: crop size (paper: 224), int or ``(h, w)``.
        flip: flip horizontally with probability 1/2.
        output_size: if set, the crop is resized to this size (Section 5.2, Charades: 288).
        mean: per-channel mean on the ``[0, 1]`` scale.
        std: per-channel standard deviation on the ``[0, 1]`` scale.
    """

    def __init__(
        self,
        scale: Sequence[int] = (256, 320),
        crop: Size = 224,
        flip: bool = True,
        output_size: Size | None = None,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
    ) -> None:
        if len(scale) != 2 or not 1 <= int(scale[0]) <= int(scale[1]):
            raise ValueError(f"scale must be a (min, max) pair with 1 <= min <= max, got {scale}")
        self.scale = (int(scale[0]), int(scale[1]))
        self.crop = _pair("crop", crop)
        if min(self.crop) > self.scale[0]:
            raise ValueError(
                f"crop {self.crop} does not fit a frame whose shorter side is {self.scale[0]} "
                "(scale[0]); use scale[0] >= crop"
            )
        self.flip = bool(flip)
        self.output_size = None if output_size is None else _pair("output_size", output_size)
        self.mean, self.std = tuple(mean), tuple(std)

    def __call__(self, frames: torch.Tensor, generator: torch.Generator | None = None):
        """``uint8`` ``(T, H, W, C)`` -> normalised float ``(C, T, crop_h, crop_w)``.

        Resizing and cropping run on ``uint8`` (a view, no copy of the decoded frames); only the
        crop is converted to float.
        """
        clip = _uint8_view(frames)  # (C, T, H, W) uint8
        clip = random_short_side_resize(clip, *self.scale, generator=generator)
        clip = random_crop(clip, self.crop, generator=generator)
        if self.output_size is not None:
            clip = resize(clip, self.output_size)
        if self.flip and torch.rand((), generator=generator).item() < 0.5:
            clip = horizontal_flip(clip)
        return normalize(clip.float().div_(255.0), self.mean, self.std).contiguous()

    def __repr__(self) -> str:
        return (
            f"TrainTransform(scale={self.scale}, crop={self.crop}, flip={self.flip}, "
            f"output_size={self.output_size}, mean={self.mean}, std={self.std})"
        )


class TestTransform:
    """Test-time transform of Section 4.1: shorter side to ``scale``, then a spatial view.

    Views: ``crop=None, num_crops=1`` keeps the full frame (fully-convolutional inference, the
    paper's protocol); ``crop=c, num_crops=1`` takes the centre ``c x c`` crop; ``num_crops=3``
    takes three ``c x c`` crops along the longer side (``c`` defaults to ``scale``).

    Args:
        scale: shorter side after resizing (paper: 256; Charades: 320).
        crop: crop size or None.
        num_crops: 1 or 3 views per clip.
        mean: per-channel mean on the ``[0, 1]`` scale.
        std: per-channel standard deviation on the ``[0, 1]`` scale.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        scale: int = 256,
        crop: Size | None = None,
        num_crops: int = 1,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
    ) -> None:
        if not isinstance(scale, int) or scale < 1:
            raise ValueError(f"scale must be a positive integer, got {scale!r}")
        if num_crops not in (1, 3):
            raise ValueError(f"num_crops must be 1 or 3, got {num_crops!r}")
        self.scale = scale
        self.num_crops = num_crops
        if crop is None and num_crops == 3:
            crop = scale
        self.crop = None if crop is None else _pair("crop", crop)
        if self.crop is not None and min(self.crop) > scale:
            raise ValueError(f"crop {self.crop} does not fit the shorter side {scale}")
        self.mean, self.std = tuple(mean), tuple(std)

    def __call__(self, frames: torch.Tensor, crop_index: int = 0) -> torch.Tensor:
        """``uint8`` ``(T, H, W, C)`` -> normalised float ``(C, T, h, w)`` of view ``crop_index``."""
        if not 0 <= crop_index < self.num_crops:
            raise ValueError(f"crop_index must lie in [0, {self.num_crops}), got {crop_index}")
        clip = short_side_resize(_uint8_view(frames), self.scale)  # (C, T, H', W') uint8
        if self.crop is not None:
            position = 1 if self.num_crops == 1 else crop_index
            clip = spatial_crop(clip, self.crop, position)
        return normalize(clip.float().div_(255.0), self.mean, self.std).contiguous()

    def __repr__(self) -> str:
        return (
            f"TestTransform(scale={self.scale}, crop={self.crop}, num_crops={self.num_crops}, "
            f"mean={self.mean}, std={self.std})"
        )
