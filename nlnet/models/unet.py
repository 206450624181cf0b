"""U-Net 2D and 3D (Ronneberger et al., MICCAI 2015; Cicek et al., MICCAI 2016) +/- a non-local block.

The original encoder/decoder: each encoder level is two 3x3 (3x3x3) convolutions with ReLU, then a
2x max-pool; the deepest level (the "bottleneck", 16x the base width) is the encoder's last block;
each decoder level up-samples with a 2x transposed convolution, concatenates the encoder feature
map of the same resolution (the skip connection) and applies two convolutions; a 1x1 convolution
gives the per-pixel (per-voxel) class logits. Two departures from the 2015 paper, as in most
modern re-implementations: "same" padding (the output has the input's size, no cropping of the
skips) and BatchNorm after each convolution (3D U-Net's choice).

The practitioner's use case "semantic segmentation of medical images" puts one non-local block
(``reduction=2``, ``sub_sample=2``) after the last convolutional block of the encoder: here after
the bottleneck (``bottleneck.non_local``), on the coarsest map, where the attention matrix is
smallest. It starts as the identity ("Non-local Neural Networks", arXiv:1711.07971, Sec. 4.1), so
``unet2d_nl`` with the weights of ``unet2d`` computes the same function.

Inputs must have spatial sizes divisible by ``2 ** depth`` (16 for the default 4 poolings).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch import Tensor, nn

from nlnet.models.checks import check_input
from nlnet.models.placement import place_non_local, split_block_options
from nlnet.models.registry import register_model

__all__ = ["UNet", "check_divisible"]

torch.fx.wrap("check_input")


def check_divisible(x: Tensor, factor: int) -> None:
    """``ValueError`` naming ``x`` unless every spatial size is a multiple of ``factor``."""
    if any(int(s) % factor for s in x.shape[2:]):
        raise ValueError(
            f"x: expected spatial sizes divisible by {factor} (2 ** depth), got {tuple(x.shape)}"
        )


torch.fx.wrap("check_divisible")

_CONV = {2: nn.Conv2d, 3: nn.Conv3d}
_BN = {2: nn.BatchNorm2d, 3: nn.BatchNorm3d}
_POOL = {2: nn.MaxPool2d, 3: nn.MaxPool3d}
_UP = {2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}


def double_conv(dim: int, cin: int, cout: int) -> nn.Sequential:
    """Two 3x3(x3) convolutions, each with BatchNorm and ReLU (one U-Net level)."""
    conv, bn = _CONV[dim], _BN[dim]
    return nn.Sequential(
        conv(cin, cout, 3, padding=1, bias=False), bn(cout), nn.ReLU(inplace=True),
        conv(cout, cout, 3, padding=1, bias=False), bn(cout), nn.ReLU(inplace=True),
    )  # fmt: skip


class UNet(nn.Module):
    """U-Net encoder/decoder with skip connections, in 2D or 3D.

    Args:
        dim: 2 (images ``(B, C, H, W)``) or 3 (volumes ``(B, C, D, H, W)``).
        num_classes: output classes per pixel.
        in_channels: input channels.
        base_channels: width of the first level (64 in the paper); level ``i`` has
            ``base * 2**i`` channels, the bottleneck ``base * 2**depth``.
        depth: number of poolings (4 in the paper).

    Modules: ``encoder.{0..depth-1}``, ``pool``, ``bottleneck``, ``up.{i}``, ``decoder.{i}``,
    ``classifier``. Output: logits ``(B, num_classes, *spatial)``.
    """

    def __init__(
        self,
        dim: int = 2,
        num_classes: int = 2,
        *,
        in_channels: int = 3,
        base_channels: int = 64,
        depth: int = 4,
    ) -> None:
        super().__init__()
        if dim not in (2, 3):
            raise ValueError(f"dim: expected 2 or 3, got {dim!r}")
        for key, val in (("num_classes", num_classes), ("in_channels", in_channels),
                         ("base_channels", base_channels), ("depth", depth)):  # fmt: skip
            if not isinstance(val, int) or val < 1:
                raise ValueError(f"{key}: expected a positive int, got {val!r}")
        self.dim, self.depth = dim, depth
        widths = [base_channels * 2**i for i in range(depth + 1)]
        self.encoder = nn.ModuleList()
        cin = in_channels
        for w in widths[:-1]:
            self.encoder.append(double_conv(dim, cin, w))
            cin = w
        self.pool = _POOL[dim](2)
        self.bottleneck = double_conv(dim, widths[-2], widths[-1])
        self.up = nn.ModuleList()
        self.decoder = nn.ModuleList()
        for i in reversed(range(depth)):  # deepest first
            self.up.append(_UP[dim](widths[i + 1], widths[i], 2, stride=2))
            self.decoder.append(double_conv(dim, 2 * widths[i], widths[i]))
        self.classifier = _CONV[dim](widths[0], num_classes, 1)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Conv3d)):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _run(self, x: Tensor, stages: dict[str, Tensor] | None = None) -> Tensor:
        """Encoder, bottleneck (+ its block) and decoder; the last decoder map. With
        ``stages``, every level's output is recorded in it (``enc{i}``, ``bottleneck``,
        ``dec{i}``; ``dec{depth-1}`` is at the input's resolution)."""
        check_input(x, self.dim + 2)
        check_divisible(x, 2**self.depth)
        skips = []
        for i, enc in enumerate(self.encoder):
            x = enc(x)
            skips.append(x)
            if stages is not None:
                stages[f"enc{i}"] = x
            x = self.pool(x)
        x = self.bottleneck(x)  # (+ its non-local block, appended to the Sequential)
        if stages is not None:
            stages["bottleneck"] = x
        for i, (up, dec, skip) in enumerate(zip(self.up, self.decoder, reversed(skips))):
            x = dec(torch.cat([skip, up(x)], dim=1))
            if stages is not None:
                stages[f"dec{i}"] = x
        return x

    def forward_intermediates(self, x: Tensor) -> dict[str, Tensor]:
        """Every level's map ``(B, C, *spatial)``: ``enc0`` .. ``enc{depth-1}`` (before each
        pooling), ``bottleneck``, ``dec0`` (coarsest) .. ``dec{depth-1}`` (input size)."""
        stages: dict[str, Tensor] = {}
        self._run(x, stages)
        return stages

    def forward_features(self, x: Tensor) -> Tensor:
        """The last decoder level ``(B, base_channels, *spatial)``, at the input's size."""
        return self._run(x)

    def forward_head(self, x: Tensor) -> Tensor:
        """The 1x1 ``classifier``: per-pixel (per-voxel) logits ``(B, K, *spatial)``."""
        return self.classifier(x)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``(B, num_classes, *spatial)`` (the features are already at the input size)."""
        return self.forward_head(self.forward_features(x))


#: The guide's configuration of the block (medical segmentation use case).
GUIDE_BLOCK = {"reduction": 2, "sub_sample": 2}


def build_unet(dim: int, with_block: bool, **kwargs: Any) -> UNet:
    """A :class:`UNet`; with ``with_block`` one block after the bottleneck (``GUIDE_BLOCK``
    unless block options override it)."""
    opts = split_block_options(kwargs)
    at = kwargs.pop("nl_at", "bottleneck" if with_block else None)
    model = UNet(dim, **kwargs)
    if at:
        # the Sequential ends in a ReLU: its channels are those of the BN before it
        sub = {"sub_sample": (2, 2, 2)} if dim == 3 else {}  # a volume's depth is spatial too
        opts = {
            **GUIDE_BLOCK,
            **sub,
            "dim": dim,
            "in_channels": model.bottleneck[-2].num_features,
            **opts,
        }
    return place_non_local(model, at, opts)


def _cfg(dim: int, blocks: str | None) -> dict[str, Any]:
    return {
        "num_classes": 2,
        "input_size": (3, 256, 256) if dim == 2 else (4, 96, 96, 96),
        "task": "segmentation",
        "family": "unet",
        "input_kind": "image" if dim == 2 else "volume",
        **({} if dim == 2 else {"mean": (0.0,) * 4, "std": (1.0,) * 4}),  # 4 MRI modalities
        "first_conv": "encoder.0.0",
        "classifier": ("classifier",),
        "blocks": blocks,
        "new_keys": (),
        "test_overrides": {"base_channels": 4, "depth": 2},
        "test_input_size": (3, 32, 32) if dim == 2 else (4, 8, 16, 16),
    }


#: 3D U-Net (Cicek et al. 2016): 3 poolings, 32 channels in the first level; 4 MRI modalities.
_UNET3D = {"in_channels": 4, "base_channels": 32, "depth": 3}
_NL_DESC = ", 1 non-local block after the bottleneck (reduction 2, sub-sample 2)"


@register_model(description="U-Net 2D (encoder/decoder, skips)", default_cfg=_cfg(2, None))
def unet2d(**kwargs: Any) -> nn.Module:
    """The 2D U-Net without a non-local block."""
    return build_unet(2, False, **kwargs)


@register_model(description="U-Net 2D" + _NL_DESC, default_cfg=_cfg(2, "bottleneck"))
def unet2d_nl(**kwargs: Any) -> nn.Module:
    """The 2D U-Net with the guide's block after the encoder's last block."""
    return build_unet(2, True, **kwargs)


@register_model(description="U-Net 3D (encoder/decoder, skips)", default_cfg=_cfg(3, None))
def unet3d(**kwargs: Any) -> nn.Module:
    """The 3D U-Net (4 input modalities as BraTS, 3 poolings, base 32) without a block."""
    return build_unet(3, False, **{**_UNET3D, **kwargs})


@register_model(description="U-Net 3D" + _NL_DESC, default_cfg=_cfg(3, "bottleneck"))
def unet3d_nl(**kwargs: Any) -> nn.Module:
    """The 3D U-Net with the guide's block (3D, 2x2x2 key pooling) after the bottleneck."""
    return build_unet(3, True, **{**_UNET3D, **kwargs})
