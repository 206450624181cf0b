"""Semantic segmentation with and without a non-local block: the guide's model, full and tiny.

the practitioner's guide "Self-Attention for Images — Non-Local Networks" ("Comparison with/without self-attention in semantic segmentation")
puts its segmentation head -- a 3x3 convolution to 512 channels with BN and ReLU, an optional
non-local block (``reduction=2``, ``sub_sample=2``), a 1x1 classifier and a bilinear upsampling
to the input size -- on a dilated ResNet (output stride 8). The full-size models are
``seg_r50`` / ``seg_r50_nl`` (:class:`nlnet.models.image.SegmentationNet`, torchvision ResNet-50
with ``replace_stride_with_dilation=[False, True, True]``).

This module adds the CPU-sized copy of the same design used by ``nlnet demo --task
segmentation``: :class:`TinyDilatedResNet` is built from torchvision's own ``Bottleneck`` blocks
(dilation included) with a 3x3 stride-1 stem, one block per stage and narrow widths, at output
stride 4 (stride 2 in the max pool and in res3; res4 and res5 dilated by 2 and 4 instead of
strided). Its receptive field is 45 pixels, so on the 64x64 digits images a convolution-only model
cannot see a digit 40 pixels away, while the head's non-local block sees every position.

Both heads are :class:`nlnet.models.image.SegmentationHead`; with the same weights a model with
the block computes exactly what the model without it computes (the block starts as the identity,
"Non-local Neural Networks", arXiv:1711.07971, Sec. 4.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn
from torchvision.models.resnet import Bottleneck, conv1x1

from nlnet.layers.block_spec import BlockLike
from nlnet.models.checks import check_input
from nlnet.models.image import SegmentationHead, build_segmentation
from nlnet.models.registry import register_model

__all__ = ["TinyDilatedResNet", "TinySegmentationNet", "receptive_field"]

torch.fx.wrap("check_input")  # traceable input check (models/checks.py)


class TinyDilatedResNet(nn.Module):
    """A narrow dilated ResNet of torchvision ``Bottleneck`` blocks (output stride 4).

    Parameter names follow torchvision (``conv1``, ``bn1``, ``layer1``..``layer4``).

    Args:
        planes: bottleneck widths of res2..res5 (outputs are 4x these, torchvision's expansion).
        layers: residual blocks per stage.
        stem_channels: channels of the 3x3 stem.
        in_channels: image channels.

    Input ``(B, C, H, W)``; output ``(B, 4 * planes[3], H/4, W/4)``.
    """

    def __init__(
        self,
        planes: Sequence[int] = (8, 16, 32, 32),
        layers: Sequence[int] = (1, 1, 1, 1),
        *,
        stem_channels: int = 16,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        if len(planes) != 4 or len(layers) != 4 or min(*planes, *layers) < 1:
            raise ValueError(f"planes, layers: expected 4 positive entries, got {planes}, {layers}")
        self.conv1 = nn.Conv2d(in_channels, stem_channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(stem_channels)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self._inplanes = stem_channels
        self._dilation = 1
        # (stride, dilate): res3 strided, res4/res5 dilated instead of strided (DeepLab style)
        plan = ((1, False), (2, False), (2, True), (2, True))
        for i, (p, n, (stride, dilate)) in enumerate(zip(planes, layers, plan), start=1):
            self.add_module(f"layer{i}", self._make_layer(p, n, stride, dilate))
        self.out_channels = self._inplanes
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(self, planes: int, blocks: int, stride: int, dilate: bool) -> nn.Sequential:
        # torchvision's ResNet._make_layer rule: a dilated stage keeps the previous dilation in
        # its first block and multiplies it by the replaced stride for the following ones.
        previous = self._dilation
        if dilate:
            self._dilation *= stride
            stride = 1
        out = planes * Bottleneck.expansion
        down = None
        if stride != 1 or self._inplanes != out:
            down = nn.Sequential(conv1x1(self._inplanes, out, stride), nn.BatchNorm2d(out))
        mods = [Bottleneck(self._inplanes, planes, stride, down, dilation=previous)]
        self._inplanes = out
        mods += [Bottleneck(out, planes, dilation=self._dilation) for _ in range(1, blocks)]
        return nn.Sequential(*mods)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))  # (B, stem, H/2, W/2)
        x = self.layer2(self.layer1(x))  # (B, 4 p2, H/4, W/4)
        return self.layer4(self.layer3(x))  # (B, 4 p4, H/4, W/4), dilated


class TinySegmentationNet(nn.Module):
    """:class:`TinyDilatedResNet` + the guide's head, upsampled to the input size.

    Args:
        num_classes: classes per pixel.
        use_attention: with or without the head's non-local block.
        mid_channels: channels of the head (512 in the guide).
        planes, layers, stem_channels: the backbone (:class:`TinyDilatedResNet`).
        block: options of the head's block (:class:`~nlnet.models.image.SegmentationHead`).

    Input ``(B, 3, H, W)``; output logits ``(B, num_classes, H, W)``.
    """

    def __init__(
        self,
        num_classes: int = 4,
        use_attention: bool = True,
        *,
        mid_channels: int = 32,
        planes: Sequence[int] = (8, 16, 32, 32),
        layers: Sequence[int] = (1, 1, 1, 1),
        stem_channels: int = 16,
        block: BlockLike = None,
    ) -> None:
        super().__init__()
        self.backbone = TinyDilatedResNet(planes, layers, stem_channels=stem_channels)
        self.head = SegmentationHead(
            self.backbone.out_channels,
            num_classes,
            use_attention,
            mid_channels=mid_channels,
            block=block,
        )

    def stage_maps(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The backbone's stem and stage outputs ``(B, C, H', W')`` (``conv1`` .. ``res5``)."""
        check_input(x, 4)
        b = self.backbone
        out = {"conv1": b.relu(b.bn1(b.conv1(x)))}
        out["pool1"] = b.maxpool(out["conv1"])
        out["res2"] = b.layer1(out["pool1"])
        out["res3"] = b.layer2(out["res2"])
        out["res4"] = b.layer3(out["res3"])
        out["res5"] = b.layer4(out["res4"])
        return out

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The backbone's output ``(B, C, H/4, W/4)``."""
        check_input(x, 4)
        return self.backbone(x)

    def forward_head(self, x: torch.Tensor) -> torch.Tensor:
        """Per-pixel logits at the feature resolution ``(B, K, H/4, W/4)``."""
        return self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, K, H, W)``: the head's output upsampled (bilinear) to the input size."""
        y = self.forward_head(self.forward_features(x))
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


def receptive_field(model: nn.Module) -> int:
    """Theoretical receptive field (pixels, one axis) of a chain of convs/pools in ``model``.

    Walks the modules in registration order, which is the execution order of the ResNets here;
    shortcut convolutions (1x1, parallel to the strided path) and non-local blocks are skipped.
    """
    rf, jump = 1, 1
    for name, m in model.named_modules():
        if "downsample" in name or "non_local" in name:
            continue  # 1x1 shortcuts and the block's key pooling
        if isinstance(m, (nn.Conv2d, nn.MaxPool2d)):
            k = m.kernel_size if isinstance(m.kernel_size, int) else m.kernel_size[0]
            s = m.stride if isinstance(m.stride, int) else m.stride[0]
            d = m.dilation if isinstance(m.dilation, int) else m.dilation[0]
            rf += (k - 1) * d * jump
            jump *= s
    return rf


_TINY_SEG_CFG = {
    "num_classes": 4,
    "input_size": (3, 64, 64),
    "task": "segmentation",
    "family": "segmentation",
    "takes_dropout": False,
    "first_conv": "backbone.conv1",
    "classifier": ("head.classifier",),
    "new_keys": ("head.",),
}


@register_model(
    description="Tiny dilated ResNet (torchvision Bottlenecks, OS 4) + the guide's head, no attention",
    default_cfg=_TINY_SEG_CFG,
)
def seg_tiny(**kwargs: Any) -> nn.Module:
    """CPU-sized segmentation baseline (``nlnet demo --task segmentation``)."""
    return build_segmentation(TinySegmentationNet, False, kwargs)


@register_model(
    description="Tiny dilated ResNet + the guide's head with a non-local block",
    default_cfg=_TINY_SEG_CFG,
)
def seg_tiny_nl(**kwargs: Any) -> nn.Module:
    """CPU-sized segmentation model with the head's non-local block (reduction 2, sub_sample 2)."""
    return build_segmentation(TinySegmentationNet, True, kwargs)
