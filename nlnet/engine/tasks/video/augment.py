"""Batch augmentation of training clips: MixUp / CutMix (torchvision ``transforms.v2``) and
RandAugment applied identically to every frame of a clip; the soft targets go to a
cross-entropy with optional label smoothing.

Clips are ``(B, C, T, H, W)``, normalised with the dataset's mean/std.  MixUp and CutMix see the
batch as a ``tv_tensors.Video`` ``(B, T, C, H, W)``: one mixing weight per batch, and CutMix cuts
one box that is the same in every frame.  RandAugment draws its operations and magnitudes once
per clip (one call on the ``(T, C, H, W)`` frames of a clip), on the clip mapped back to 8-bit
images.  The random draws use the global generators, which checkpoints save per process, so a
resumed run augments exactly as the uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torchvision import tv_tensors
from torchvision.transforms import v2

__all__ = ["ClipAugment", "soft_cross_entropy"]


class ClipAugment:
    """``augment(clip, target) -> (clip, target)`` for a training batch (``augment`` config).

    Args:
        cfg: the ``augment`` section (``mixup_alpha``, ``cutmix_alpha``, ``mix_prob``,
            ``randaugment``, ``randaugment_ops``, ``randaugment_magnitude``).
        num_classes: classes of the targets (MixUp/CutMix return ``(B, num_classes)``
            probabilities that sum to 1).
        mean, std: the per-channel normalisation of the clips (RandAugment works on images).
    """

    def __init__(
        self, cfg: Any, num_classes: int, mean: Sequence[float], std: Sequence[float]
    ) -> None:
        mixers = []
        if cfg.mixup_alpha > 0:
            mixers.append(v2.MixUp(alpha=cfg.mixup_alpha, num_classes=num_classes))
        if cfg.cutmix_alpha > 0:
            mixers.append(v2.CutMix(alpha=cfg.cutmix_alpha, num_classes=num_classes))
        self.mix = (
            None if not mixers else mixers[0] if len(mixers) == 1 else v2.RandomChoice(mixers)
        )
        self.mix_prob = float(cfg.mix_prob)
        self.randaugment = (
            v2.RandAugment(num_ops=cfg.randaugment_ops, magnitude=cfg.randaugment_magnitude)
            if cfg.randaugment
            else None
        )
        self.mean = torch.tensor([float(v) for v in mean]).view(-1, 1, 1, 1)
        self.std = torch.tensor([float(v) for v in std]).view(-1, 1, 1, 1)

    @property
    def active(self) -> bool:
        return self.mix is not None or self.randaugment is not None

    def __call__(
        self, clip: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.randaugment is not None:
            clip = torch.stack([self.rand_augment_clip(c) for c in clip])
        if self.mix is not None and float(torch.rand(())) < self.mix_prob:
            video = tv_tensors.Video(clip.transpose(1, 2))  # (B, T, C, H, W)
            video, target = self.mix(video, target.long())
            clip = video.as_subclass(torch.Tensor).transpose(1, 2).contiguous()
        return clip, target

    def rand_augment_clip(self, clip: torch.Tensor) -> torch.Tensor:
        """RandAugment of one clip ``(C, T, H, W)``: one draw, the same on every frame."""
        mean, std = self.mean.to(clip), self.std.to(clip)
        pixels = ((clip * std + mean).clamp(0, 1) * 255).round().to(torch.uint8)
        frames = tv_tensors.Video(pixels.transpose(0, 1))  # (T, C, H, W)
        out = self.randaugment(frames).as_subclass(torch.Tensor).transpose(0, 1)
        return (out.to(clip.dtype) / 255 - mean) / std


def soft_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Cross-entropy with class indices ``(B,)`` or class probabilities ``(B, K)`` (mixed
    targets) and optional label smoothing (``torch.nn.functional.cross_entropy``)."""
    if target.dim() == 2:
        target = target.to(logits.dtype)
    else:
        target = target.long()
    return F.cross_entropy(logits, target, label_smoothing=label_smoothing)
