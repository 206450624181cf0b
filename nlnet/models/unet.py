"""U-Net 2D and 3D (Ronneberger et al., MICCAI 2015; Cicek et al., MICCAI 2016) +/- a non-local block.

The original encoder/decoder: each encoder level is two 3x3 (3x3x3) convolutions with ReLU, then a
2x max-pool; the deepest level (the "bottleneck") is the encoder's last block; each decoder level
up-samples with a 2x transposed convolution, concatenates the encoder feature map of the same
resolution (the skip connection) and applies two convolutions; a 1x1 convolution gives the
per-pixel (per-voxel) class logits. Two departures from both papers, as in most modern
re-implementations: "same" padding (the output has the input's size, no cropping of the skips)
and, for the 2D U-Net, BatchNorm after each convolution (the 3D U-Net's choice).

Two channel layouts (``style``):

* ``"ronneberger"`` (2D U-Net, 2015): level ``i`` has ``base * 2**i`` channels in both of its
  convolutions, the bottleneck ``base * 2**depth`` (64 -> 1024 for 4 poolings).
* ``"cicek"`` (3D U-Net, Cicek et al. 2016, Sec. 2 and Fig. 1): the channels double *before*
  each pooling: the analysis level ``i`` goes to ``base * 2**i`` then ``base * 2**(i+1)``
  (32 -> 64, 64 -> 128, 128 -> 256 with ``base = 32``), the bottleneck 256 -> 512; each
  up-convolution keeps its channels (512 -> 512), its output is concatenated with the skip
  (512 + 256 = 768) and two convolutions halve it (768 -> 256 -> 256). BatchNorm before each
  ReLU. The published count, 19,069,955 parameters for 3 input channels and 3 classes, is
  reached with a bias on every 3x3x3 and 1x1x1 convolution, none on the up-convolutions and
  BatchNorm without a learnable scale/shift (Caffe's ``BatchNorm`` layer, which the paper's
  Caffe implementation used, has none; a ``Scale`` layer would add them). The paper does not
  spell these out; we infer them from its count, which this layout matches exactly.

The practitioner's use case "semantic segmentation of medical images" puts one non-local block
(``reduction=2``, ``sub_sample=2``) after the last convolutional block of the encoder: here after
the bottleneck (``bottleneck.non_local``), on the coarsest map, where the attention matrix is
smallest (512 channels in the 3D U-Net). It starts as the identity ("Non-local Neural Networks",
arXiv:1711.07971, Sec. 4.1), so ``unet2d_nl`` with the weights of ``unet2d`` computes the same
function.

Inputs must have spatial sizes divisible by ``2 ** depth`` (16 for the default 4 poolings).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch import Tensor, nn
from torch.nn import functional as F

from nlnet.models.checks import check_input
from nlnet.models.placement import Placement, block_arguments, place_non_local
from nlnet.models.registry import register_model

__all__ = ["UNet", "STYLES", "check_divisible"]

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


def double_conv(
    dim: int, cin: int, cout: int, mid: int | None = None, *, caffe_bn: bool = False
) -> nn.Sequential:
    """Two 3x3(x3) convolutions ``cin -> mid -> cout`` (``mid`` defaults to ``cout``), each with
    BatchNorm and ReLU (one U-Net level). ``caffe_bn``: convolutions with a bias and BatchNorm
    without a learnable scale/shift (the 3D U-Net's Caffe layers); else no bias, affine BN."""
    conv, bn = _CONV[dim], _BN[dim]
    mid = cout if mid is None else mid
    bias, affine = caffe_bn, not caffe_bn
    return nn.Sequential(
        conv(cin, mid, 3, padding=1, bias=bias), bn(mid, affine=affine), nn.ReLU(inplace=True),
        conv(mid, cout, 3, padding=1, bias=bias), bn(cout, affine=affine), nn.ReLU(inplace=True),
    )  # fmt: skip


#: Channel layouts of :class:`UNet` (see the module docstring).
STYLES: tuple[str, ...] = ("ronneberger", "cicek")


class UNet(nn.Module):
    """U-Net encoder/decoder with skip connections, in 2D or 3D.

    Args:
        dim: 2 (images ``(B, C, H, W)``) or 3 (volumes ``(B, C, D, H, W)``).
        num_classes: output classes per pixel.
        in_channels: input channels.
        base_channels: width of the first convolution (64 in the 2015 paper, 32 in the 3D
            U-Net's); see ``style`` for the other levels.
        depth: number of poolings (4 in the 2015 paper, 3 in the 3D U-Net's).
        style: ``"ronneberger"`` (level ``i`` at ``base * 2**i`` channels, bottleneck
            ``base * 2**depth``) or ``"cicek"`` (channels doubled before each pooling,
            bottleneck ``base * 2**(depth+1)``, Caffe-style BN; the 3D U-Net, Cicek et al.
            2016, Fig. 1).
        deep_supervision: a second 1x1 classifier ``aux_classifier`` on the bottleneck's output
            (after its block), whose logits, up-sampled to the input size, join the training
            loss (nnU-Net's deep supervision at the coarsest level; torchvision's ``aux_loss``
            convention: in training mode the output is ``{"out", "aux"}``, the engine's
            segmentation loss is ``CE(out) + 0.5 CE(aux)``). Evaluation mode returns the
            logits alone, so a model with it tests and exports like one without.

    Modules: ``encoder.{0..depth-1}``, ``pool``, ``bottleneck``, ``up.{i}``, ``decoder.{i}``,
    ``classifier`` (and ``aux_classifier``). Output: logits ``(B, num_classes, *spatial)``.
    """

    def __init__(
        self,
        dim: int = 2,
        num_classes: int = 2,
        *,
        in_channels: int = 3,
        base_channels: int = 64,
        depth: int = 4,
        style: str = "ronneberger",
        deep_supervision: bool = False,
    ) -> None:
        super().__init__()
        if dim not in (2, 3):
            raise ValueError(f"dim: expected 2 or 3, got {dim!r}")
        if style not in STYLES:
            raise ValueError(f"style: expected one of {STYLES}, got {style!r}")
        for key, val in (("num_classes", num_classes), ("in_channels", in_channels),
                         ("base_channels", base_channels), ("depth", depth)):  # fmt: skip
            if not isinstance(val, int) or val < 1:
                raise ValueError(f"{key}: expected a positive int, got {val!r}")
        self.dim, self.depth, self.style = dim, depth, style
        if style == "cicek":
            self._build_cicek(in_channels, base_channels, depth, num_classes)
        else:
            self._build_ronneberger(in_channels, base_channels, depth, num_classes)
        self.aux_classifier: nn.Module | None = None
        if deep_supervision:  # on the bottleneck's output: the first up-convolution's input
            self.aux_classifier = _CONV[dim](self.up[0].in_channels, num_classes, 1)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Conv3d)):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _build_ronneberger(self, cin: int, base: int, depth: int, num_classes: int) -> None:
        dim = self.dim
        widths = [base * 2**i for i in range(depth + 1)]
        self.encoder = nn.ModuleList()
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

    def _build_cicek(self, cin: int, base: int, depth: int, num_classes: int) -> None:
        """Cicek et al. 2016, Fig. 1: analysis level ``i`` ``cin -> base 2^i -> base 2^(i+1)``;
        the up-convolutions keep their channels (no bias); two convolutions after each concat."""
        dim = self.dim
        self.encoder = nn.ModuleList()
        for i in range(depth):
            w = base * 2**i
            self.encoder.append(double_conv(dim, cin, 2 * w, w, caffe_bn=True))
            cin = 2 * w
        self.pool = _POOL[dim](2)
        w = base * 2**depth
        self.bottleneck = double_conv(dim, cin, 2 * w, w, caffe_bn=True)
        self.up = nn.ModuleList()
        self.decoder = nn.ModuleList()
        c = 2 * w
        for i in reversed(range(depth)):  # deepest first
            skip = base * 2 ** (i + 1)
            self.up.append(_UP[dim](c, c, 2, stride=2, bias=False))
            self.decoder.append(double_conv(dim, c + skip, skip, caffe_bn=True))
            c = skip
        self.classifier = _CONV[dim](c, num_classes, 1)

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

    def stage_maps(self, x: Tensor) -> dict[str, Tensor]:
        """Every level's map ``(B, C, *spatial)``: ``enc0`` .. ``enc{depth-1}`` (before each
        pooling), ``bottleneck``, ``dec0`` (coarsest) .. ``dec{depth-1}`` (input size)."""
        stages: dict[str, Tensor] = {}
        self._run(x, stages)
        return stages

    def forward_features(self, x: Tensor) -> Tensor:
        """The last decoder level ``(B, C, *spatial)`` at the input's size (``C``:
        ``base_channels``, or twice that with ``style="cicek"``)."""
        return self._run(x)

    def forward_head(self, x: Tensor) -> Tensor:
        """The 1x1 ``classifier``: per-pixel (per-voxel) logits ``(B, K, *spatial)``."""
        return self.classifier(x)

    def forward(self, x: Tensor) -> Tensor | dict[str, Tensor]:
        """Logits ``(B, num_classes, *spatial)`` (the features are already at the input size);
        in training mode with ``deep_supervision``, ``{"out": logits, "aux": bottleneck logits
        up-sampled to the input size}``."""
        if self.aux_classifier is None or not self.training:
            return self.forward_head(self.forward_features(x))
        stages: dict[str, Tensor] = {}
        out = self.forward_head(self._run(x, stages))
        aux = self.aux_classifier(stages["bottleneck"])
        mode = "bilinear" if self.dim == 2 else "trilinear"
        aux = F.interpolate(aux, size=x.shape[2:], mode=mode, align_corners=False)
        return {"out": out, "aux": aux}


#: The guide's configuration of the block (medical segmentation use case).
GUIDE_BLOCK = {"reduction": 2, "sub_sample": 2}


def _width_alias(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with ``width`` renamed ``base_channels`` (an error when both are given)."""
    if "width" not in kwargs:
        return kwargs
    if "base_channels" in kwargs:
        raise ValueError("width: the same option as base_channels; give one of them")
    out = {k: v for k, v in kwargs.items() if k != "width"}
    out["base_channels"] = kwargs["width"]
    return out


def build_unet(dim: int, with_block: bool, **kwargs: Any) -> UNet:
    """A :class:`UNet`; with ``with_block`` one block after the bottleneck (``placement=``
    elsewhere; ``GUIDE_BLOCK`` with ``block=`` changes). ``width`` is accepted as another name of
    ``base_channels`` (the first convolution's width: 32 in the 3D U-Net paper)."""
    kwargs = _width_alias(kwargs)
    block, placement = block_arguments(kwargs, "bottleneck" if with_block else None)
    model = UNet(dim, **kwargs)
    preset = {**GUIDE_BLOCK, "sub_sample": (2, 2, 2)} if dim == 3 else GUIDE_BLOCK  # depth is space
    if placement is None or "bottleneck" not in placement.paths:
        return place_non_local(model, placement, block, preset, dim=dim)
    # the bottleneck's Sequential ends in a ReLU: its channels are those of the BN before it
    channels = model.bottleneck[-2].num_features
    place_non_local(model, Placement(paths=("bottleneck",)), block, preset, dim=dim,
                    in_channels=channels)  # fmt: skip
    rest = tuple(p for p in placement.paths if p != "bottleneck")
    return place_non_local(model, Placement(paths=rest) if rest else None, block if rest else None,
                           preset, dim=dim)  # fmt: skip


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
        "test_overrides": {"base_channels": 4, "depth": 2}
        if dim == 2
        else {"width": 2, "depth": 2},
        "test_input_size": (3, 32, 32) if dim == 2 else (4, 8, 16, 16),
    }


#: 3D U-Net (Cicek et al. 2016, Fig. 1): 3 poolings, channels doubled before each (32 -> 64 ..
#: 256 -> 512 at the bottleneck); 4 MRI modalities as BraTS (the paper: 3 channels, 3 classes).
_UNET3D = {"in_channels": 4, "base_channels": 32, "depth": 3, "style": "cicek"}
_NL_DESC = ", 1 non-local block after the bottleneck (reduction 2, sub-sample 2)"


@register_model(description="U-Net 2D (encoder/decoder, skips)", default_cfg=_cfg(2, None))
def unet2d(**kwargs: Any) -> nn.Module:
    """The 2D U-Net without a non-local block."""
    return build_unet(2, False, **kwargs)


@register_model(description="U-Net 2D" + _NL_DESC, default_cfg=_cfg(2, "bottleneck"))
def unet2d_nl(**kwargs: Any) -> nn.Module:
    """The 2D U-Net with the guide's block after the encoder's last block."""
    return build_unet(2, True, **kwargs)


@register_model(
    description="3D U-Net (Cicek et al. 2016: channels doubled before each pooling, 32..512)",
    default_cfg=_cfg(3, None),
)
def unet3d(**kwargs: Any) -> nn.Module:
    """Cicek et al.'s 3D U-Net (4 input modalities as BraTS, 3 poolings, ``width`` 32, a
    512-channel bottleneck) without a block."""
    return build_unet(3, False, **{**_UNET3D, **_width_alias(kwargs)})


@register_model(
    description="3D U-Net (Cicek et al. 2016)" + _NL_DESC, default_cfg=_cfg(3, "bottleneck")
)
def unet3d_nl(**kwargs: Any) -> nn.Module:
    """Cicek et al.'s 3D U-Net with the guide's block (3D, 2x2x2 key pooling) after the
    bottleneck (512 channels)."""
    return build_unet(3, True, **{**_UNET3D, **_width_alias(kwargs)})
