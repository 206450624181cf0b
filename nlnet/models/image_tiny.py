"""CPU-sized image ResNets with and without a non-local block: the image counterparts of the
tiny video models, for a first run on your own image folder (``smoke/image_folder_tiny``).

A ResNet-18 layout (basic blocks, two per stage) at a quarter of its width (16 -> 128 channels
instead of 64 -> 512), with a 3x3 stride-1 stem and no max-pool for small images (32 x 32 -> a
4 x 4 res5 map); torchvision's module names (``conv1``, ``layer1`` .. ``layer4``, ``fc``), so
the library's placement presets, features and fine-tuning apply. ``resnet_tiny_nl1`` adds one
2D non-local block before the last residual block of res4 ("Non-local Neural Networks",
Section 6, the COCO placement; an 8 x 8 map of 32 x 32 inputs, 64 positions).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torchvision.models import resnet

from nlnet.models.features import resnet_feature_info
from nlnet.models.image import ImageResNet
from nlnet.models.placement import block_arguments, place_non_local
from nlnet.models.registry import register_model

__all__ = ["TinyImageResNet", "resnet_tiny", "resnet_tiny_nl1"]


class TinyImageResNet(ImageResNet):
    """A narrow ResNet of basic blocks for small images (module docstring).

    Args:
        num_classes: classifier outputs.
        width: channels of res2 (doubled at each later stage; ResNet-18: 64).
        layers: basic blocks per stage res2..res5.
        in_channels: input channels.
        dropout: dropout before the classifier.
    """

    def __init__(
        self,
        num_classes: int = 10,
        *,
        width: int = 16,
        layers: tuple[int, ...] = (2, 2, 2, 2),
        in_channels: int = 3,
        dropout: float = 0.0,
    ) -> None:
        nn.Module.__init__(self)  # torchvision's ResNet.__init__ fixes the widths
        if width < 1 or len(layers) != 4 or min(layers) < 1:
            raise ValueError(f"width/layers: expected width >= 1 and 4 stage lengths >= 1, got "
                             f"{width}, {tuple(layers)}")  # fmt: skip
        self._norm_layer, self.dilation, self.groups, self.base_width = nn.BatchNorm2d, 1, 1, 64
        self.inplanes = width
        self.conv1 = nn.Conv2d(in_channels, width, 3, padding=1, bias=False)
        self.bn1, self.relu, self.maxpool = (
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Identity(),
        )
        block = resnet.BasicBlock
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, 2 * width, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 4 * width, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 8 * width, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(8 * width, num_classes)
        self.num_classes, self.num_features = num_classes, 8 * width
        self.feature_info = resnet_feature_info(width, [width * 2**k for k in range(4)],
                                                [1, 1, 2, 4, 8])  # fmt: skip
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Global average pool, dropout and ``fc`` (``pre_logits``: the pooled ``(B, C)``)."""
        x = torch.flatten(self.avgpool(x), 1)
        return x if pre_logits else self.fc(self.dropout(x))


_TINY_CFG = {
    "num_classes": 10,
    "input_size": (3, 32, 32),
    "task": "image_classification",
    "family": "resnet2d",
    "takes_dropout": True,
    "first_conv": "conv1",
    "classifier": ("fc",),
    "test_overrides": {"width": 4},
}


@register_model(
    description="CPU-sized image ResNet (ResNet-18 layout at 1/4 width, 32x32 inputs)",
    default_cfg=dict(_TINY_CFG),
)
def resnet_tiny(**kwargs: Any) -> nn.Module:
    """:class:`TinyImageResNet` without a block (the baseline of ``resnet_tiny_nl1``)."""
    return TinyImageResNet(**kwargs)


@register_model(
    description="CPU-sized image ResNet + 1 non-local block before the last block of res4",
    default_cfg={**_TINY_CFG, "blocks": "res4"},
)
def resnet_tiny_nl1(**kwargs: Any) -> nn.Module:
    """:class:`TinyImageResNet` with one 2D block after ``layer3.0`` (the paper's embedded
    Gaussian; the block's own options through ``kwargs``)."""
    block, placement = block_arguments(kwargs, "res4")
    return place_non_local(TinyImageResNet(**kwargs), placement, block, dim=2)
