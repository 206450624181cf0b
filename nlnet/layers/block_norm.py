"""The norm after ``W_z`` in the non-local block (Sec. 4.1 of Wang et al., CVPR 2018).

BatchNorm (the paper's choice, scale initialised to zero so a new block is the identity),
GroupNorm, a LayerNorm over the channels, or the released code's affine-only scale and shift;
:func:`check_norm_args` checks the block's norm options. The optional SAGAN gate around the norm
lives in :mod:`nlnet.layers.gate`.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nlnet.layers.block_options import check_int

NormKind = Literal["bn", "gn", "ln", "affine"]
NORMS: tuple[str | None, ...] = ("bn", "gn", "ln", "affine", None)

_BN = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}


class ChannelAffine(nn.Module):
    """Per-channel scale and shift ``gamma_c x + beta_c`` (the released code's affine-only norm).

    Args:
        num_channels: Channels C (dim 1 of the input).
        dim: Number of grid dimensions after the channel dim (1, 2 or 3).
    """

    def __init__(self, num_channels: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_channels))
        self.bias = nn.Parameter(torch.zeros(num_channels))
        self._shape = (1, num_channels) + (1,) * dim

    def forward(self, x: Tensor) -> Tensor:
        return x * self.weight.view(self._shape) + self.bias.view(self._shape)


class ChannelLayerNorm(nn.Module):
    """LayerNorm over the channels at every position (``(B, C, *grid)``, as ConvNeXt's).

    Args:
        num_channels: Channels C.
        eps: Added to the variance.
    """

    def __init__(self, num_channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_channels))
        self.bias = nn.Parameter(torch.zeros(num_channels))
        self.eps = eps
        self.num_channels = num_channels

    def forward(self, x: Tensor) -> Tensor:
        y = F.layer_norm(x.movedim(1, -1), (self.num_channels,), self.weight, self.bias, self.eps)
        return y.movedim(-1, 1)


def make_norm(
    norm: str | None,
    dim: int,
    channels: int,
    *,
    eps: float = 1e-5,
    momentum: float | None = 0.1,
    groups: int | None = None,
) -> nn.Module:
    """The norm after ``W_z``: ``"bn"``, ``"gn"`` (GroupNorm), ``"ln"`` (LayerNorm over channels),
    ``"affine"`` (per-channel scale and shift) or ``None`` (identity). See :class:`NonLocalNd`."""
    if norm == "bn":
        return _BN[dim](channels, eps=eps, momentum=momentum)
    if norm == "gn":
        return nn.GroupNorm(groups if groups is not None else math.gcd(32, channels), channels, eps)
    if norm == "ln":
        return ChannelLayerNorm(channels, eps)
    if norm == "affine":
        return ChannelAffine(channels, dim)
    return nn.Identity()


def check_norm_args(norm, channels: int, eps, momentum, groups) -> None:
    """Check the norm options of :class:`~nlnet.layers.nonlocal_block.NonLocalNd`."""
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
        raise ValueError(f"norm_eps must be a finite positive float, got {eps!r}")
    if momentum is not None and not (isinstance(momentum, (int, float)) and 0.0 <= momentum <= 1.0):
        raise ValueError(f"norm_momentum must be in [0, 1] or None, got {momentum!r}")
    if groups is not None:
        if norm != "gn":
            raise ValueError(f"norm_groups applies to norm='gn' only, got norm={norm!r}")
        check_int("norm_groups", groups)
        if channels % groups:
            raise ValueError(
                f"norm_groups={groups} must divide in_channels={channels} for GroupNorm"
            )


__all__ = ["NORMS", "ChannelAffine", "ChannelLayerNorm", "NormKind", "check_norm_args", "make_norm"]
