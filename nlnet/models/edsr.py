"""EDSR (Lim et al., "Enhanced Deep Residual Networks for Single Image Super-Resolution", CVPRW 2017) +/- a non-local block.

The baseline model of the paper (Sec. 3.2, Fig. 3): a 3x3 head convolution to 64 channels, 16
residual blocks ``conv-ReLU-conv`` without BatchNorm (Sec. 3.1: BN removed, it normalises away
the range of the features) plus a 3x3 convolution, a global skip from the head, and a
pixel-shuffle up-sampler (Shi et al. 2016): ``log2(s)`` steps of a 3x3 convolution to 4x the
channels and ``PixelShuffle(2)`` for x2/x4, one step to 9x and ``PixelShuffle(3)`` for x3; a
last 3x3 convolution gives the RGB output. Inputs are RGB in ``[0, 1]``; the DIV2K mean colour is
subtracted at the input and added back at the output (the paper's ``MeanShift``).

The practitioner's super-resolution use case adds a non-local block with ``reduction=4``
(C/4 channels in theta/phi/g) inside the network; here one block in the middle of the body
(after residual block ``n_resblocks // 2 - 1``), with 2x2 max-pooled keys (``sub_sample=2``) so
that a whole low-resolution image fits in memory at test time. Without BatchNorm anywhere in the
network, the block's norm is the affine-only one (``norm="affine"``: per-channel scale and
shift, scale 0 at the start, no batch statistics), so a new block is the identity
("Non-local Neural Networks", arXiv:1711.07971, Sec. 4.1).

``edsr_baseline_res1`` is the control of Sec. 4.1 (the gain is not just more capacity): in the
block's place, a plain bottleneck residual unit (:class:`ResidualControl2d`, ``1x1 -> 3x3 -> 1x1``,
no BatchNorm, last convolution zero so it starts as the identity) whose inner width gives it about
the block's parameters; it adds about the block's multiply-adds too, but sees only a 3x3
neighbourhood.

``num_classes`` is the number of output channels (3: RGB), as the engine's one name for the size
of a model's output; ``upscale`` is the up-sampling factor (2, 3 or 4).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F
from torch import Tensor, nn

from nlnet.models.checks import check_input
from nlnet.models.placement import block_arguments, place_non_local
from nlnet.models.registry import register_model

__all__ = ["SRNet", "EDSR", "ResBlock", "ResidualControl2d", "Upsampler", "SR_BLOCK",
           "DIV2K_RGB_MEAN", "control_inner_channels", "sr_block_path"]  # fmt: skip

torch.fx.wrap("check_input")

#: Mean colour of DIV2K's training images (RGB in [0, 1]), EDSR's ``MeanShift``.
DIV2K_RGB_MEAN: tuple[float, float, float] = (0.4488, 0.4371, 0.4040)

#: The guide's block for super-resolution (reduction 4) with nlnet's SR choices (see above).
SR_BLOCK: dict[str, Any] = {"reduction": 4, "sub_sample": 2, "norm": "affine"}


def conv3x3(cin: int, cout: int) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, padding=1)


class ResBlock(nn.Module):
    """EDSR residual block: ``x + res_scale * conv(ReLU(conv(x)))`` (no BatchNorm)."""

    def __init__(self, channels: int, res_scale: float = 1.0) -> None:
        super().__init__()
        self.body = nn.Sequential(
            conv3x3(channels, channels), nn.ReLU(True), conv3x3(channels, channels)
        )
        self.res_scale = res_scale

    def forward(self, x: Tensor) -> Tensor:
        return x + self.body(x) * self.res_scale


class ResidualControl2d(nn.Module):
    """A plain bottleneck residual unit, ``x + conv1x1(ReLU(conv3x3(ReLU(conv1x1(x)))))``: the
    control that stands where the non-local block would (Sec. 4.1 of the paper adds standard
    residual blocks to check that its gain is not capacity). No BatchNorm (as EDSR); the last
    convolution starts at zero, so the unit starts as the identity like a new non-local block.

    Args:
        channels: input and output channels ``C``.
        inner: channels of the middle ``3x3`` convolution (:func:`control_inner_channels`).
    """

    def __init__(self, channels: int, inner: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, inner, 1), nn.ReLU(True), conv3x3(inner, inner), nn.ReLU(True),
            nn.Conv2d(inner, channels, 1),
        )  # fmt: skip
        if not self.body[-1].weight.is_meta:
            nn.init.zeros_(self.body[-1].weight)
            nn.init.zeros_(self.body[-1].bias)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.body(x)


def control_inner_channels(channels: int, budget: int) -> int:
    """The inner width whose :class:`ResidualControl2d` has the parameter count nearest to
    ``budget`` (the parameters of the block it stands in for)."""

    def params(m: int) -> int:  # 1x1, 3x3, 1x1 convolutions with biases
        return channels * m + m + 9 * m * m + m + m * channels + channels

    return min(range(1, channels + 1), key=lambda m: abs(params(m) - budget))


class Upsampler(nn.Sequential):
    """Sub-pixel convolution up-sampling by ``scale`` (2, 3, 4 or 8): conv + ``PixelShuffle``."""

    def __init__(self, scale: int, channels: int) -> None:
        if scale not in (2, 3, 4, 8):
            raise ValueError(f"scale: expected 2, 3, 4 or 8, got {scale!r}")
        mods: list[nn.Module] = []
        if scale == 3:
            mods += [conv3x3(channels, 9 * channels), nn.PixelShuffle(3)]
        else:
            for _ in range(int(math.log2(scale))):
                mods += [conv3x3(channels, 4 * channels), nn.PixelShuffle(2)]
        super().__init__(*mods)


class MeanShift(nn.Module):
    """Subtract (``sign=-1``) or add (``+1``) a fixed per-channel mean (a buffer, not trained)."""

    def __init__(self, mean: tuple[float, ...], sign: int) -> None:
        super().__init__()
        self.register_buffer("mean", sign * torch.tensor(mean).view(1, -1, 1, 1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.mean.to(x.dtype)


class SRNet(nn.Module):
    """The contract shared by EDSR and RCAN: ``head``, ``body`` (units + a conv, long skip),
    ``tail`` (up-sampler + conv to ``num_classes`` channels), ``sub_mean``/``add_mean``.

    ``forward(x) == forward_head(forward_features(x))`` (EDSR with ``bicubic_residual``: plus
    the bicubic up-sampling of ``x``).
    """

    in_channels: int
    bicubic_residual: bool = False

    def _build_ends(
        self, in_channels: int, num_classes: int, upscale: int, n_feats: int, **sizes: int
    ) -> None:
        """Check the sizes; ``sub_mean``/``add_mean`` (RGB in and out only), ``head``, ``tail``."""
        sizes = {"num_classes": num_classes, "in_channels": in_channels, **sizes}
        for key, val in {**sizes, "n_feats": n_feats}.items():
            if not isinstance(val, int) or val < 1:
                raise ValueError(f"{key}: expected a positive int, got {val!r}")
        self.upscale, self.in_channels = upscale, in_channels
        rgb = in_channels == 3 and num_classes == 3
        self.sub_mean = MeanShift(DIV2K_RGB_MEAN, -1) if rgb else nn.Identity()
        self.add_mean = MeanShift(DIV2K_RGB_MEAN, +1) if rgb else nn.Identity()
        self.head = conv3x3(in_channels, n_feats)
        self.tail = nn.Sequential(Upsampler(upscale, n_feats), conv3x3(n_feats, num_classes))

    def _run(self, x: Tensor, stages: dict[str, Tensor] | None = None) -> Tensor:
        check_input(x, 4, self.in_channels)
        x = self.head(self.sub_mean(x))
        if stages is not None:
            stages["head"] = x
        y = x
        for i, unit in enumerate(self.body):
            y = unit(y)
            if stages is not None and i < len(self.body) - 1:  # the last is the body's conv
                stages[f"body{i}"] = y
        return x + y  # the long (global) skip, Fig. 3 of EDSR / Fig. 2 of RCAN

    def forward_features(self, x: Tensor) -> Tensor:
        """The body's output plus the long skip ``(B, n_feats, h, w)``, at the input's size."""
        return self._run(x)

    def stage_maps(self, x: Tensor) -> dict[str, Tensor]:
        """``head``, ``body{i}`` after each residual unit (low resolution, ``(B, n_feats, h,
        w)``) and ``upsample``, the up-sampler's output ``(B, n_feats, s h, s w)``."""
        stages: dict[str, Tensor] = {}
        stages["upsample"] = self.tail[0](self._run(x, stages))
        return stages

    def forward_head(self, x: Tensor) -> Tensor:
        """Up-sampler, last conv (``tail``) and the mean added back: ``(B, K, s h, s w)``."""
        y = self.tail(x)
        return y if self.bicubic_residual else self.add_mean(y)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


class EDSR(SRNet):
    """EDSR: head, residual body with a global skip, pixel-shuffle tail.

    Args:
        upscale: up-sampling factor (2, 3, 4) (``scale`` is the block's softmax option).
        num_classes: output channels (3: RGB).
        in_channels: input channels (3: RGB).
        n_resblocks: residual blocks (16 baseline, 32 full EDSR).
        n_feats: channels (64 baseline, 256 full).
        res_scale: residual scaling (1 baseline, 0.1 full).
        bicubic_residual: add the bicubic up-sampling of the input to the output, so the network
            learns only the residual (VDSR's global residual; not in EDSR, which learns the
            whole image -- off by default). Short CPU trainings beat bicubic far sooner with it.

    Modules: ``sub_mean``, ``head``, ``body.{0..n-1}`` (ResBlocks) + ``body.{n}`` (conv),
    ``tail`` (Upsampler + conv), ``add_mean``. Input ``(B, C, h, w)`` in [0, 1]; output
    ``(B, num_classes, upscale h, upscale w)``.
    """

    def __init__(
        self,
        upscale: int = 2,
        num_classes: int = 3,
        *,
        in_channels: int = 3,
        n_resblocks: int = 16,
        n_feats: int = 64,
        res_scale: float = 1.0,
        bicubic_residual: bool = False,
    ) -> None:
        super().__init__()
        self._build_ends(in_channels, num_classes, upscale, n_feats, n_resblocks=n_resblocks)
        self.body = nn.Sequential(
            *[ResBlock(n_feats, res_scale) for _ in range(n_resblocks)], conv3x3(n_feats, n_feats)
        )
        if bicubic_residual and in_channels != num_classes:
            raise ValueError("bicubic_residual: needs num_classes == in_channels")
        self.bicubic_residual = bool(bicubic_residual)

    def forward(self, x: Tensor) -> Tensor:
        y = self.forward_head(self.forward_features(x))
        if self.bicubic_residual:  # the residual over bicubic (its own mean: no mean shift)
            return y + F.interpolate(x, scale_factor=self.upscale, mode="bicubic")
        return y


def sr_block_path(n: int, prefix: str = "body") -> str:
    """Where the SR models put their block: after the middle unit ``n // 2 - 1`` of the body."""
    return f"{prefix}.{max(n // 2 - 1, 0)}"


def build_edsr(with_block: bool, **kwargs: Any) -> EDSR:
    """:class:`EDSR` with one block (``SR_BLOCK`` unless overridden) in the middle of the body."""
    default_at = sr_block_path(kwargs.get("n_resblocks", 16)) if with_block else None
    block, placement = block_arguments(kwargs, default_at)
    model = EDSR(**kwargs)
    where = {"dim": 2, "in_channels": model.head.out_channels}
    return place_non_local(model, placement, block, SR_BLOCK, **where)


def build_edsr_control(**kwargs: Any) -> EDSR:
    """:class:`EDSR` with a :class:`ResidualControl2d` of about ``SR_BLOCK``'s parameters where
    :func:`build_edsr` puts the block (a new unit of the body after unit ``n // 2 - 1``)."""
    from nlnet.layers.nonlocal_block import NonLocal2d

    block, placement = block_arguments(kwargs)
    model = EDSR(**kwargs)
    channels = model.head.out_channels
    with torch.device("meta"):
        budget = sum(p.numel() for p in NonLocal2d(channels, **SR_BLOCK).parameters())
    ref = model.head.weight
    control = ResidualControl2d(channels, control_inner_channels(channels, budget))
    units = list(model.body)
    k = int(sr_block_path(len(units) - 1).split(".")[1]) + 1
    control = control.to(device=ref.device, dtype=ref.dtype)
    model.body = nn.Sequential(*units[:k], control, *units[k:])
    return place_non_local(model, placement, block, SR_BLOCK, dim=2, in_channels=channels)


def sr_cfg(blocks: str | None, family: str) -> dict[str, Any]:
    """Registry defaults of a super-resolution model (x2, RGB, 48x48 training patches)."""
    return {
        "num_classes": 3,
        "input_size": (3, 48, 48),
        "task": "super_resolution",
        "family": family,
        "upscale": 2,
        "first_conv": "head",
        "classifier": ("tail.1",),  # the conv to num_classes (output) channels
        "blocks": blocks,
        "test_input_size": (3, 16, 16),
    }


@register_model(
    description="EDSR baseline (16 res blocks, 64 ch), x2/x3/x4 pixel-shuffle (upscale=)",
    default_cfg={**sr_cfg(None, "edsr"), "test_overrides": {"n_resblocks": 2, "n_feats": 8}},
)
def edsr_baseline(**kwargs: Any) -> nn.Module:
    """EDSR baseline without a non-local block (``upscale=2`` by default)."""
    return build_edsr(False, **kwargs)


@register_model(
    description="EDSR baseline + 1 non-local block mid-body (reduction 4, sub-sample 2)",
    default_cfg={**sr_cfg("mid", "edsr"), "test_overrides": {"n_resblocks": 2, "n_feats": 8}},
)
def edsr_baseline_nl(**kwargs: Any) -> nn.Module:
    """EDSR baseline with the guide's block (reduction 4) after residual block 7 of 16."""
    return build_edsr(True, **kwargs)


@register_model(
    description="EDSR baseline + 1 plain bottleneck residual unit of the block's size (control)",
    default_cfg={**sr_cfg(None, "edsr"), "test_overrides": {"n_resblocks": 2, "n_feats": 8}},
)
def edsr_baseline_res1(**kwargs: Any) -> nn.Module:
    """EDSR baseline with a plain residual unit of about the block's parameters where
    ``edsr_baseline_nl`` has its block (the control of Sec. 4.1)."""
    return build_edsr_control(**kwargs)
