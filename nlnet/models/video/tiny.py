"""A tiny C2D ResNet family for CPUs: the models of ``nlnet demo`` and of a first run on your videos.

The stage structure of the C2D baseline of Table 1 in "Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971) (a stem,
four stages res2..res5 with only 2D ``1 x k x k`` kernels, global average pooling, dropout, a
linear classifier), scaled down for small clips (e.g. 8 x 32 x 32) so that it trains in a minute
on a laptop CPU. Every model is the library's
:class:`~nlnet.models.video.resnet3d.ResNet3d` with these options (:func:`tiny_resnet`):

* the ``7x7`` stride-2 stem becomes a ``1x3x3`` stride-1 convolution followed by the ``1x2x2``
  max pool (total stride 16 at res5 instead of 32, so a 32 x 32 frame keeps a 4 x 4 res4 grid);
* the stages use ResNet *basic* blocks (two ``1x3x3`` convolutions, He et al. 2016) of
  ``width, 2 width, 4 width, 8 width`` channels (``width`` = 16 by default) with
  ``(1, 2, 3, 1)`` blocks: at a width of a few channels bottlenecks learn far slower;
* by default no temporal pooling (``temporal_pool=False``): every frame keeps its own features
  until the global average pool, so the C2D baseline is exactly a sum of per-frame terms. With
  ``temporal_pool=True`` the paper's pool1/pool2 temporal strides of 2 are used.

The C2D models are blind to frame order: every convolution sees one frame, the non-local block
sums over a *set* of positions (Eq. 1) and the head averages over time, so a clip and the same
clip reversed get the same logits. The ``i3d_tiny*`` models inflate the first ``1x3x3`` kernel
of some residual blocks to ``3x3x3`` (``inflate_blocks``, Section 4 "Inflated 3D ConvNet": one
kernel in every other block), the tiny counterpart of the paper's I3D: they see the order of
frames (``nlnet models`` shows which models do, :mod:`nlnet.analysis.time_order`).

The non-local placements are the paper's presets applied to this stage structure
(:func:`nlnet.models.surgery.non_local_paths`): ``nl1`` = one block in res4 right before its
last residual block (Table 2a), ``nl5`` = 2 blocks in res3 + 3 in res4 (Table 2c), and the
``space`` / ``time`` / ``spacetime`` variants of Table 2d.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from nlnet.models.placement import block_arguments, place_non_local
from nlnet.models.registry import register_model
from nlnet.models.video.resnet3d import ResNet3d

__all__ = ["build_tiny", "tiny_resnet"]

TINY_LAYERS: tuple[int, int, int, int] = (1, 2, 3, 1)


def tiny_resnet(
    layers: Sequence[int] = TINY_LAYERS,
    num_classes: int = 10,
    *,
    width: int = 16,
    temporal_pool: bool = False,
    dropout: float = 0.2,
    in_channels: int = 3,
    inflate_blocks: str | Sequence[Sequence[bool]] = "none",
    temporal_kernel: int = 3,
) -> ResNet3d:
    """A narrow C2D :class:`~nlnet.models.video.resnet3d.ResNet3d` (Table 1 stage structure,
    basic blocks) for tiny clips on a CPU.

    Layout for a ``T x 32 x 32`` clip (width ``w``)::

        conv1  1x3x3, w, stride 1 + BN + ReLU  -> w   x T x 32 x 32
        pool1  1x2x2 max, stride 2 (temporal 3, stride 2 with temporal_pool)
                                                -> w   x T x 16 x 16
        res2   [1x3x3, w   | 1x3x3, w  ] x n2   -> w   x T x 16 x 16
        res3   [1x3x3, 2w  | 1x3x3, 2w ] x n3   -> 2w  x T x  8 x  8
        res4   [1x3x3, 4w  | 1x3x3, 4w ] x n4   -> 4w  x T x  4 x  4
        res5   [1x3x3, 8w  | 1x3x3, 8w ] x n5   -> 8w  x T x  2 x  2
        global average pool, dropout, fc

    That is ``ResNet3d(residual="basic", stem_kernel=3, stem_stride=1, pooling="2x2")``; an
    I3D's inflated block has its first kernel ``temporal_kernel x 3 x 3`` (``inflate="3x1x1"``,
    which for a basic block inflates the first kernel only).

    Args:
        layers: residual blocks of res2..res5 (default ``(1, 2, 3, 1)``).
        num_classes: number of logits.
        width: channels of the stem and of res2 (stage ``k`` has ``width * 2**k``).
        temporal_pool: temporal stride 2 in pool1 and pool2 as in Table 1 (default off: the
            frames are never mixed before the global pool, so C2D is a sum of per-frame terms).
        dropout: dropout ratio before ``fc``.
        in_channels: input channels.
        inflate_blocks: which residual blocks get a ``temporal_kernel x 3 x 3`` first kernel
            (I3D, Section 4): ``"none"`` (C2D, the default), ``"even"``, ``"all"``,
            ``"original"`` or one list of booleans per stage
            (:func:`nlnet.models.video.resnet3d.inflation_pattern`).
        temporal_kernel: temporal size of an inflated kernel (3 as in the paper's I3D).

    Input ``(B, in_channels, T, H, W)``; output ``(B, num_classes)``.
    """
    if not isinstance(temporal_pool, bool):
        raise TypeError(f"temporal_pool: expected a bool, got {temporal_pool!r}")
    sp = 2 if temporal_pool else 1
    inflate = None if isinstance(inflate_blocks, str) and inflate_blocks == "none" else "3x1x1"
    return ResNet3d(
        layers, num_classes, inflate=inflate, inflate_blocks=inflate_blocks, conv1_t=1,
        temporal_kernel=temporal_kernel, temporal_strides=(1, sp, sp), dropout=dropout,
        width=width, in_channels=in_channels, pooling="2x2", residual="basic",
        stem_kernel=3, stem_stride=1,
    )  # fmt: skip


def build_tiny(
    blocks: str | None = None, preset: Mapping[str, Any] | None = None, **kwargs: Any
) -> nn.Module:
    """Build a :func:`tiny_resnet` with non-local blocks at a placement preset.

    The blocks are placed after the network is built and initialised
    (:func:`~nlnet.models.placement.place_non_local`), so a model with blocks has the weights
    of the baseline built from the same seed.

    Args:
        blocks: ``None`` (the C2D baseline) or a preset (``"nl1"``, ``"nl5"``, ``"nl10"``,
            ``"res2"``..``"res5"``) or explicit module paths.
        preset: the variant's block options (``{"mode": "space"}``), under ``block``'s.
        **kwargs: :func:`tiny_resnet` options, ``placement`` (overrides ``blocks``) and
            ``block`` (:mod:`nlnet.models.placement`).
    """
    block, placement = block_arguments(kwargs, blocks)
    return place_non_local(tiny_resnet(**kwargs), placement, block, preset)


def _cfg(blocks: str | None, arch: str = "c2d") -> dict[str, Any]:
    return {
        "num_classes": 10,
        "input_size": (3, 8, 32, 32),
        "task": "video_classification",
        "family": "tiny",
        "first_conv": "conv1",
        "classifier": ("fc",),
        "arch": arch,
        "blocks": blocks,
        "test_overrides": {"width": 4},
        "test_input_size": (3, 4, 32, 32),
    }


@register_model(name="c2d_tiny", default_cfg=_cfg(None))
def c2d_tiny(**kwargs: Any) -> nn.Module:
    """Tiny C2D baseline for CPUs (the demo's baseline; no non-local block)."""
    return build_tiny(None, **kwargs)


@register_model(name="c2d_tiny_nl1", default_cfg=_cfg("nl1"))
def c2d_tiny_nl1(**kwargs: Any) -> nn.Module:
    """Tiny C2D + 1 spacetime non-local block in res4 (Table 2a/2d spacetime)."""
    return build_tiny("nl1", **kwargs)


@register_model(name="c2d_tiny_nl1_space", default_cfg=_cfg("nl1"))
def c2d_tiny_nl1_space(**kwargs: Any) -> nn.Module:
    """Tiny C2D + 1 space-only non-local block in res4 (Table 2d space-only)."""
    return build_tiny("nl1", preset={"mode": "space"}, **kwargs)


@register_model(name="c2d_tiny_nl1_time", default_cfg=_cfg("nl1"))
def c2d_tiny_nl1_time(**kwargs: Any) -> nn.Module:
    """Tiny C2D + 1 time-only non-local block in res4 (Table 2d time-only)."""
    return build_tiny("nl1", preset={"mode": "time"}, **kwargs)


@register_model(name="c2d_tiny_nl5", default_cfg=_cfg("nl5"))
def c2d_tiny_nl5(**kwargs: Any) -> nn.Module:
    """Tiny C2D + 5 spacetime non-local blocks (2 in res3, 3 in res4; Table 2c)."""
    return build_tiny("nl5", **kwargs)


# --------------------------------------------------------------------------------------------
# controls of the demo (Sec. 4.1): a plain residual block and a temporal one, in the block's slot
# --------------------------------------------------------------------------------------------


class ResidualControl3d(nn.Module):
    """A bottleneck residual block (``1x1x1`` -> ``kernel`` -> ``1x1x1``, He et al. 2016), the
    control of Sec. 4.1 ("adding standard residual blocks ... the accuracy is not increased").

    It goes where a non-local block would (the ``non_local`` slot of a residual block), with an
    inner width chosen by :func:`control_inner_channels` so that it has about the parameters of
    the block it replaces; its last BN starts with gamma = 0, so it starts as the identity like
    the non-local block (Sec. 4.1). With ``kernel=(3, 1, 1)`` it is a temporal (I3D-style) block:
    the only part of the model that mixes frames, and, through the zero padding at the clip's
    ends, one that sees their order.

    Args:
        channels: input and output channels ``C``.
        inner: channels of the middle convolution.
        kernel: the middle convolution's ``(t, h, w)`` kernel (odd sides; ``"same"`` padding).

    Input and output ``(B, C, T, H, W)``.
    """

    def __init__(self, channels: int, inner: int, kernel: tuple[int, int, int] = (1, 3, 3)):
        super().__init__()
        if any(k % 2 == 0 for k in kernel):
            raise ValueError(f"kernel: expected odd sides, got {kernel!r}")
        pad = tuple(k // 2 for k in kernel)
        self.conv_a = nn.Conv3d(channels, inner, 1, bias=False)
        self.bn_a = nn.BatchNorm3d(inner)
        self.conv_b = nn.Conv3d(inner, inner, kernel, padding=pad, bias=False)
        self.bn_b = nn.BatchNorm3d(inner)
        self.conv_c = nn.Conv3d(inner, channels, 1, bias=False)
        self.bn_c = nn.BatchNorm3d(channels)
        self.relu = nn.ReLU(inplace=True)
        if not self.bn_c.weight.is_meta:
            nn.init.zeros_(self.bn_c.weight)  # starts as the identity

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn_a(self.conv_a(x)))
        out = self.relu(self.bn_b(self.conv_b(out)))
        return self.relu(x + self.bn_c(self.conv_c(out)))


def control_inner_channels(channels: int, budget: int, kernel: tuple[int, int, int]) -> int:
    """The inner width whose :class:`ResidualControl3d` has the parameter count nearest to
    ``budget`` (the parameters of the non-local block it stands in for)."""
    taps = kernel[0] * kernel[1] * kernel[2]

    def params(m: int) -> int:  # three convolutions and three BNs (weight and bias)
        return 2 * channels * m + taps * m * m + 2 * (2 * m + channels)

    return min(range(1, channels + 1), key=lambda m: abs(params(m) - budget))


def build_control(kernel: tuple[int, int, int], **kwargs: Any) -> nn.Module:
    """:func:`build_tiny` with ``"nl1"``, then each non-local block replaced by a
    :class:`ResidualControl3d` of about its parameters (same place, same budget)."""
    model = build_tiny("nl1", **kwargs)
    for module in model.modules():
        block = getattr(module, "non_local", None)
        if isinstance(block, nn.Module):
            channels = module.bn2.num_features
            budget = sum(p.numel() for p in block.parameters())
            inner = control_inner_channels(channels, budget, kernel)
            module.non_local = ResidualControl3d(channels, inner, kernel)
    return model


@register_model(name="c2d_tiny_res1", default_cfg=_cfg(None))
def c2d_tiny_res1(**kwargs: Any) -> nn.Module:
    """Tiny C2D + 1 plain bottleneck residual block (``1x3x3``) where ``c2d_tiny_nl1`` has its
    non-local block, with about its parameters (the control of Sec. 4.1)."""
    return build_control((1, 3, 3), **kwargs)


@register_model(name="c2d_tiny_tconv1", default_cfg=_cfg(None))
def c2d_tiny_tconv1(**kwargs: Any) -> nn.Module:
    """Tiny C2D + 1 temporal residual block (``3x1x1``, I3D-style) where ``c2d_tiny_nl1`` has its
    non-local block: a model that sees the order of the frames (the demo's order control)."""
    return build_control((3, 1, 1), **kwargs)


#: The tiny I3D's inflated blocks: one kernel in every other residual block of each stage
#: (Section 4), i.e. blocks 0 of res2/res3/res5 and blocks 0, 2 of res4 for ``(1, 2, 3, 1)``.
TINY_I3D_INFLATE = "even"


@register_model(name="i3d_tiny", default_cfg=_cfg(None, "i3d"))
def i3d_tiny(**kwargs: Any) -> nn.Module:
    """Tiny I3D baseline for CPUs (3x3x3 kernels in every other block; sees frame order)."""
    kwargs.setdefault("inflate_blocks", TINY_I3D_INFLATE)
    return build_tiny(None, **kwargs)


@register_model(name="i3d_tiny_nl1", default_cfg=_cfg("nl1", "i3d"))
def i3d_tiny_nl1(**kwargs: Any) -> nn.Module:
    """Tiny I3D + 1 spacetime non-local block in res4: the first-run model for your videos."""
    kwargs.setdefault("inflate_blocks", TINY_I3D_INFLATE)
    return build_tiny("nl1", **kwargs)
