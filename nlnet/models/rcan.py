"""RCAN (Zhang et al., "Image Super-Resolution Using Very Deep Residual Channel Attention Networks", ECCV 2018) +/- a non-local block.

Residual in residual (Sec. 3.2, Fig. 2): the body is ``n_resgroups`` residual groups and a 3x3
convolution, with a long skip from the head; each group is ``n_resblocks`` residual channel
attention blocks (RCAB) and a 3x3 convolution with a short skip; an RCAB is ``conv-ReLU-conv``
followed by channel attention (Sec. 3.3, Eq. 8-9: global average pooling, 1x1 convolution down
by ``reduction`` (16), ReLU, 1x1 convolution up, sigmoid; the channels are rescaled by it) and a
skip. Head, pixel-shuffle tail and mean shift as EDSR (:mod:`nlnet.models.edsr`). The paper's
model: 10 groups of 20 RCABs, 64 channels.

The practitioner's super-resolution block (reduction 4) goes after the middle residual group
(``body.{n_resgroups // 2 - 1}``), with the same SR choices as EDSR's (2x2 key pooling,
affine-only norm at scale 0: no BatchNorm in the network).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from nlnet.models.edsr import (
    SR_BLOCK,
    SRNet,
    conv3x3,
    sr_block_path,
    sr_cfg,
)
from nlnet.models.placement import block_arguments, place_non_local
from nlnet.models.registry import register_model

__all__ = ["RCAN", "RCAB", "ChannelAttention", "ResidualGroup"]


class ChannelAttention(nn.Module):
    """Squeeze-and-excitation style channel attention (Eq. 8-9): ``x * sigmoid(W_U relu(W_D
    avgpool(x)))``."""

    def __init__(self, channels: int, reduction: int = 16) -> None:
        super().__init__()
        mid = max(channels // reduction, 1)
        self.avg_pool = nn.AdaptiveAvgPool2d(1)
        self.conv_du = nn.Sequential(
            nn.Conv2d(channels, mid, 1), nn.ReLU(True), nn.Conv2d(mid, channels, 1), nn.Sigmoid()
        )

    def forward(self, x: Tensor) -> Tensor:
        return x * self.conv_du(self.avg_pool(x))


class RCAB(nn.Module):
    """Residual channel attention block: ``x + CA(conv(ReLU(conv(x))))``."""

    def __init__(self, channels: int, reduction: int = 16) -> None:
        super().__init__()
        self.body = nn.Sequential(
            conv3x3(channels, channels), nn.ReLU(True), conv3x3(channels, channels),
            ChannelAttention(channels, reduction),
        )  # fmt: skip

    def forward(self, x: Tensor) -> Tensor:
        return x + self.body(x)


class ResidualGroup(nn.Module):
    """``n`` RCABs and a 3x3 convolution with a short skip connection."""

    def __init__(self, channels: int, n_resblocks: int, reduction: int = 16) -> None:
        super().__init__()
        self.body = nn.Sequential(
            *[RCAB(channels, reduction) for _ in range(n_resblocks)], conv3x3(channels, channels)
        )

    def forward(self, x: Tensor) -> Tensor:
        return x + self.body(x)


class RCAN(SRNet):
    """RCAN: head, residual-in-residual body, pixel-shuffle tail.

    Args:
        upscale: up-sampling factor (2, 3, 4) (``scale`` is the block's softmax option).
        num_classes: output channels (3: RGB).
        in_channels: input channels.
        n_resgroups: residual groups (10).
        n_resblocks: RCABs per group (20).
        n_feats: channels (64).
        ca_reduction: channel-attention reduction (16; ``reduction`` is the block's option).
    """

    def __init__(
        self,
        upscale: int = 2,
        num_classes: int = 3,
        *,
        in_channels: int = 3,
        n_resgroups: int = 10,
        n_resblocks: int = 20,
        n_feats: int = 64,
        ca_reduction: int = 16,
    ) -> None:
        super().__init__()
        self._build_ends(in_channels, num_classes, upscale, n_feats, n_resgroups=n_resgroups,
                         n_resblocks=n_resblocks, ca_reduction=ca_reduction)  # fmt: skip
        self.body = nn.Sequential(
            *[ResidualGroup(n_feats, n_resblocks, ca_reduction) for _ in range(n_resgroups)],
            conv3x3(n_feats, n_feats),
        )


def build_rcan(with_block: bool, **kwargs: Any) -> RCAN:
    """:class:`RCAN` with one block (``SR_BLOCK`` unless overridden) after the middle group."""
    default_at = sr_block_path(kwargs.get("n_resgroups", 10)) if with_block else None
    block, placement = block_arguments(kwargs, default_at)
    model = RCAN(**kwargs)
    where = {"dim": 2, "in_channels": model.head.out_channels}
    return place_non_local(model, placement, block, SR_BLOCK, **where)


_TEST = {"n_resgroups": 2, "n_resblocks": 1, "n_feats": 8, "ca_reduction": 4}


@register_model(
    description="RCAN (10 residual groups x 20 RCABs, 64 ch), x2/x3/x4 pixel-shuffle (upscale=)",
    default_cfg={**sr_cfg(None, "rcan"), "test_overrides": _TEST},
)
def rcan(**kwargs: Any) -> nn.Module:
    """RCAN without a non-local block (``upscale=2`` by default)."""
    return build_rcan(False, **kwargs)


@register_model(
    description="RCAN + 1 non-local block after group 5 (reduction 4, sub-sample 2)",
    default_cfg={**sr_cfg("mid", "rcan"), "test_overrides": _TEST},
)
def rcan_nl(**kwargs: Any) -> nn.Module:
    """RCAN with the guide's block (reduction 4) after the 5th of 10 residual groups."""
    return build_rcan(True, **kwargs)
