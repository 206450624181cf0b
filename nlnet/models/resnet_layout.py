"""The ResNet layout every ResNet family of nlnet shares: blocks per stage, stage names.

He et al., "Deep Residual Learning for Image Recognition" (CVPR 2016), Table 1: the residual
blocks of the four stages for each depth. "Non-local Neural Networks" (Wang et al., CVPR 2018,
arXiv:1711.07971), Table 1, names the stages ``res2`` .. ``res5``; torchvision (whose parameter
names nlnet keeps, so that ImageNet weights load) names them ``layer1`` .. ``layer4``.
"""

from __future__ import annotations

__all__ = ["BLOCK_CONFIG", "STAGE_NAMES", "BASIC_BLOCK_DEPTHS"]

#: Residual blocks per stage (res2, res3, res4, res5) for each depth (He et al. 2016, Table 1).
BLOCK_CONFIG: dict[int, tuple[int, int, int, int]] = {
    18: (2, 2, 2, 2),
    34: (3, 4, 6, 3),
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    152: (3, 8, 36, 3),
}

#: Depths built from basic (two 3x3) blocks; the others use bottlenecks.
BASIC_BLOCK_DEPTHS: tuple[int, ...] = (18, 34)

#: Paper stage name -> torchvision attribute name.
STAGE_NAMES: dict[str, str] = {
    "res2": "layer1",
    "res3": "layer2",
    "res4": "layer3",
    "res5": "layer4",
}
