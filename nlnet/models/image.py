"""Image ResNets with non-local blocks.

* The COCO setting of "Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971) Section 6: one non-local block added to the
  ResNet backbone of Mask R-CNN, "right before the last residual block of res4" (after
  ``layer3.4`` of a ResNet-50, ``layer3.21`` of a ResNet-101).
* The practitioner's ``ResNet50NonLocal`` of the practitioner's guide "Self-Attention for Images: Non-Local Networks" ("Integration into a
  ResNet"): one block after stage 4 (``layer4``), ``reduction=2``, no subsampling.
* The guide's segmentation head with and without attention ("Comparison with/without
  self-attention in semantic segmentation"): a 3x3 conv to 512 channels with BN and ReLU, an
  optional non-local block (``reduction=2``, ``sub_sample=2``), a 1x1 classifier and a bilinear
  upsampling to the input size, on a dilated ResNet-50 (output stride 8).

All backbones are torchvision ResNets, so torchvision ImageNet weights load directly
(:func:`nlnet.models.inflate.load_pretrained_2d` copies equal-shaped tensors).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn
from torchvision.models import resnet

from nlnet.layers.block_spec import BlockLike
from nlnet.models.checks import check_input
from nlnet.models.features import ClassifierContract, resnet_feature_info, resnet_intermediates
from nlnet.models.placement import (
    Placement,
    PlacementLike,
    block_arguments,
    check_no_block,
    family_block,
    place_non_local,
)
from nlnet.models.registry import register_model
from nlnet.models.resnet_layout import BASIC_BLOCK_DEPTHS, BLOCK_CONFIG

__all__ = [
    "ImageResNet",
    "torchvision_resnet",
    "resnet_non_local",
    "SegmentationHead",
    "SegmentationNet",
    "HEAD_BLOCK",
    "GUIDE_IMAGE_BLOCK",
    "build_segmentation",
]

#: The guide's segmentation head block: reduction 2, 2x2 max-pool subsampling of the keys.
HEAD_BLOCK: dict[str, Any] = {"reduction": 2, "sub_sample": 2}
#: The guide's ``ResNet50NonLocal`` block after stage 4: reduction 2, no subsampling.
GUIDE_IMAGE_BLOCK: dict[str, Any] = {"reduction": 2, "sub_sample": False}

torch.fx.wrap("check_input")  # traceable input check (models/checks.py)


class ImageResNet(ClassifierContract, resnet.ResNet):
    """torchvision's ResNet (same modules and state-dict keys) with nlnet's model contract,
    timm's (:mod:`nlnet.models.features`): :meth:`forward_features`, :meth:`forward_head`,
    :meth:`forward_intermediates`, :attr:`feature_info`, :meth:`get_classifier`,
    :meth:`reset_classifier`. Arguments: torchvision's ``ResNet``."""

    classifier_name = "fc"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.num_features = self.fc.in_features
        dilated = kwargs.get("replace_stride_with_dilation") or (False, False, False)
        reductions = [2, 4]
        for d in dilated:
            reductions.append(reductions[-1] * (1 if d else 2))
        stages = [self.num_features // 2 ** (3 - k) for k in range(4)]
        self.feature_info = resnet_feature_info(self.conv1.out_channels, stages, reductions)

    def _forward_intermediates(
        self, x: torch.Tensor, indices: int | Sequence[int] | None, stop_early: bool
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The stem and the res2..res5 maps ``(B, C, H, W)`` (:attr:`feature_info`) and the res5
        map (or, ``stop_early``, the last one asked for)."""
        check_input(x, 4, self.conv1.in_channels)
        return resnet_intermediates(self, x, indices, stop_early)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The res5 map ``(B, C, H/32, W/32)``."""
        check_input(x, 4, self.conv1.in_channels)
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Global average pool and ``fc`` (``pre_logits``: the pooled features ``(B, C)``)."""
        x = torch.flatten(self.avgpool(x), 1)
        return x if pre_logits else self.fc(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def torchvision_resnet(depth: int, **kwargs: Any) -> ImageResNet:
    """An :class:`ImageResNet` of ``depth`` (:data:`~nlnet.models.resnet_layout.BLOCK_CONFIG`;
    ``kwargs``: torchvision ``ResNet`` options)."""
    if depth not in BLOCK_CONFIG:
        raise ValueError(f"depth: expected one of {sorted(BLOCK_CONFIG)}, got {depth!r}")
    block = resnet.BasicBlock if depth in BASIC_BLOCK_DEPTHS else resnet.Bottleneck
    return ImageResNet(block, list(BLOCK_CONFIG[depth]), **kwargs)


def resnet_non_local(
    depth: int = 50,
    num_classes: int = 1000,
    placement: PlacementLike = "res4",
    *,
    width_per_group: int = 64,
    block: BlockLike = None,
) -> ImageResNet:
    """A torchvision image ResNet with non-local blocks (2D blocks).

    Args:
        depth: 18, 34, 50, 101 or 152.
        num_classes: classifier outputs.
        placement: a preset (``"res4"`` = right before the last residual block of res4, the
            COCO setting of Section 6; :data:`nlnet.models.surgery.PLACEMENTS`), module paths
            (``"layer4"``: after stage 4, the guide's ``ResNet50NonLocal``) or anything
            :meth:`~nlnet.models.placement.Placement.of` reads.
        width_per_group: torchvision's bottleneck width (64 = standard; smaller for tests).
        block: options of :class:`nlnet.layers.nonlocal_block.NonLocal2d` (a record, or a
            mapping of changes over the block's defaults).

    Returns:
        The ResNet; input ``(B, 3, H, W)``, output ``(B, num_classes)``.
    """
    model = torchvision_resnet(depth, num_classes=num_classes, width_per_group=width_per_group)
    return place_non_local(model, Placement.of(placement), block, dim=2)


def build_segmentation(
    cls: type[nn.Module], with_block: bool, kwargs: dict[str, Any], *args: Any
) -> nn.Module:
    """A registered segmentation net (:class:`SegmentationNet` or the tiny one): its head's
    block where ``placement="head"`` (the name's default with ``with_block``), other module
    paths after construction; ``block=`` changes :data:`HEAD_BLOCK` for all of them."""
    block, placement = block_arguments(kwargs, "head" if with_block else None)
    if placement is not None and (placement.preset or placement.stage_options):
        raise ValueError("placement: a segmentation net takes module paths ('head', "
                         "'layer3.2', ...), not a preset or stage_options")  # fmt: skip
    paths = placement.paths if placement is not None else ()
    in_head = "head" in paths
    model = cls(*args, use_attention=in_head, block=block if in_head else None, **kwargs)
    if len(paths) == in_head:  # the head's block only, or none
        return place_non_local(model, None, None if in_head else block)
    rest = Placement(paths=tuple(p for p in paths if p != "head"))
    return place_non_local(model, rest, block, HEAD_BLOCK, dim=2)


class SegmentationHead(nn.Module):
    """The guide's segmentation head, with or without a non-local block.

    Args:
        in_channels: channels of the backbone features (2048 for a ResNet-50).
        num_classes: classes per pixel (19 for Cityscapes).
        use_attention: insert a non-local block after the channel reduction.
        mid_channels: channels after the reduction (512 in the guide).
        block: options of the 2D block (:class:`~nlnet.layers.block_spec.BlockOptions`, or a
            mapping of changes over :data:`HEAD_BLOCK`, the guide's ``reduction=2,
            sub_sample=2``).

    Input ``(B, in_channels, h, w)``; output ``(B, num_classes, h, w)`` (not upsampled).
    """

    def __init__(
        self,
        in_channels: int = 2048,
        num_classes: int = 19,
        use_attention: bool = True,
        mid_channels: int = 512,
        block: BlockLike = None,
    ) -> None:
        super().__init__()
        from nlnet.layers.nonlocal_block import NonLocal2d

        self.use_attention = bool(use_attention)
        self.reduce = nn.Sequential(
            nn.Conv2d(in_channels, mid_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(mid_channels),
            nn.ReLU(inplace=True),
        )
        if self.use_attention:
            opts = family_block(block, HEAD_BLOCK).kwargs()
            self.non_local: nn.Module | None = NonLocal2d(mid_channels, **opts)
        else:
            check_no_block(block)
            self.non_local = None
        self.classifier = nn.Conv2d(mid_channels, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.reduce(x)  # (B, 512, h, w)
        if self.non_local is not None:
            x = self.non_local(x)
        return self.classifier(x)  # (B, K, h, w)


class SegmentationNet(nn.Module):
    """Dilated ResNet backbone (output stride 8) + :class:`SegmentationHead`.

    The backbone keeps torchvision's parameter names (``conv1``, ``bn1``, ``layer1``..
    ``layer4``) so an ImageNet ResNet state dict loads; the head is ``head.*``.

    Args:
        depth: 50, 101 or 152.
        num_classes: classes per pixel.
        use_attention: with or without the non-local block in the head.
        mid_channels: channels of the head (512 in the guide).
        width_per_group: torchvision's bottleneck width (64 = standard; smaller for tests).
        block: options of the head's non-local block (:class:`SegmentationHead`).

    Input ``(B, 3, H, W)``; output logits ``(B, num_classes, H, W)``.
    """

    def __init__(
        self,
        depth: int = 50,
        num_classes: int = 19,
        use_attention: bool = True,
        *,
        mid_channels: int = 512,
        width_per_group: int = 64,
        block: BlockLike = None,
    ) -> None:
        super().__init__()
        if depth < 50:
            raise ValueError(f"depth: expected a bottleneck ResNet (50, 101, 152), got {depth!r}")
        base = torchvision_resnet(
            depth, replace_stride_with_dilation=[False, True, True], width_per_group=width_per_group
        )
        for name in ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4"):
            self.add_module(name, getattr(base, name))
        self.head = SegmentationHead(
            2048, num_classes, use_attention, mid_channels=mid_channels, block=block
        )

    def stage_maps(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The stem and stage outputs ``(B, C, H', W')`` (``conv1``, ``pool1``, ``res2`` ..)."""
        check_input(x, 4)
        out = {"conv1": self.relu(self.bn1(self.conv1(x)))}
        out["pool1"] = self.maxpool(out["conv1"])
        out["res2"] = self.layer1(out["pool1"])
        out["res3"] = self.layer2(out["res2"])
        out["res4"] = self.layer3(out["res3"])
        out["res5"] = self.layer4(out["res4"])  # dilated: (B, 2048, H/8, W/8)
        return out

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The dilated backbone's output ``(B, 2048, H/8, W/8)``."""
        check_input(x, 4)
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))

    def forward_head(self, x: torch.Tensor) -> torch.Tensor:
        """The segmentation head: per-pixel logits at the feature resolution ``(B, K, h, w)``."""
        return self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, K, H, W)``: the head's output upsampled (bilinear) to the input size."""
        y = self.forward_head(self.forward_features(x))
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


# --------------------------------------------------------------------------- registered names
_IMAGE_CFG = {
    "num_classes": 1000,
    "input_size": (3, 224, 224),
    "task": "image_classification",
    "family": "resnet2d",
    "weights_format": "inflate",
    "takes_dropout": False,
    "first_conv": "conv1",
    "classifier": ("fc",),
    "test_overrides": {"width_per_group": 4},
}


@register_model(
    description="ResNet-50 (image), 1 non-local block right before the last block of res4 (COCO)",
    default_cfg={**_IMAGE_CFG, "depth": 50, "blocks": "res4"},
)
def resnet50_nl_coco(**kwargs: Any) -> nn.Module:
    """ResNet-50 with one 2D block after ``layer3.4`` (Section 6 of the paper)."""
    block, placement = block_arguments(kwargs, "res4")
    return resnet_non_local(50, placement=placement, block=block, **kwargs)


@register_model(
    description="ResNet-101 (image), 1 non-local block right before the last block of res4 (COCO)",
    default_cfg={**_IMAGE_CFG, "depth": 101, "blocks": "res4"},
)
def resnet101_nl_coco(**kwargs: Any) -> nn.Module:
    """ResNet-101 with one 2D block after ``layer3.21`` (Section 6 of the paper)."""
    block, placement = block_arguments(kwargs, "res4")
    return resnet_non_local(101, placement=placement, block=block, **kwargs)


@register_model(
    description="ResNet-50 (image), 1 non-local block after layer4 (the guide's ResNet50NonLocal)",
    default_cfg={**_IMAGE_CFG, "depth": 50, "blocks": "after_layer4"},
)
def resnet50_nl_guide(**kwargs: Any) -> nn.Module:
    """The guide's ``ResNet50NonLocal``: reduction 2, no subsampling, after stage 4."""
    block, placement = block_arguments(kwargs, "layer4")
    model = torchvision_resnet(50, **kwargs)
    return place_non_local(model, placement, block, GUIDE_IMAGE_BLOCK, dim=2)


_SEG_CFG = {
    "num_classes": 19,
    "input_size": (3, 512, 1024),
    "task": "segmentation",
    "family": "segmentation",
    "weights_format": "inflate",  # the dilated ResNet backbone (head keys are new)
    "takes_dropout": False,
    "first_conv": "conv1",
    "classifier": ("head.classifier",),
    "new_keys": ("head.",),
    "test_overrides": {"width_per_group": 4, "mid_channels": 16},
}


@register_model(
    description="Dilated ResNet-50 + the guide's segmentation head, no attention",
    default_cfg={**_SEG_CFG, "depth": 50},
)
def seg_r50(**kwargs: Any) -> nn.Module:
    """Segmentation baseline of the guide (``use_attention=False``)."""
    return build_segmentation(SegmentationNet, False, kwargs, 50)


@register_model(
    description="Dilated ResNet-50 + the guide's segmentation head with a non-local block",
    default_cfg={**_SEG_CFG, "depth": 50},
)
def seg_r50_nl(**kwargs: Any) -> nn.Module:
    """Segmentation head of the guide with attention (reduction 2, sub_sample 2)."""
    return build_segmentation(SegmentationNet, True, kwargs, 50)
