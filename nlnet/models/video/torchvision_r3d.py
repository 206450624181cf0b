"""torchvision's ``r3d_18`` as a :class:`~nlnet.models.video.resnet3d.ResNet3d`, and its weights.

R3D (Tran et al., "A Closer Look at Spatiotemporal Convolutions for Action Recognition", CVPR
2018) is ResNet-18 with every 3x3 kernel inflated to 3x3x3, a ``3x7x7`` stem without pooling,
and time halved with space in res3..res5. :data:`R3D_18_OPTIONS` builds it with ``ResNet3d``;
:func:`r3d_state_from_torchvision` renames a torchvision ``VideoResNet`` state dict
(``stem.0``, ``layer1.0.conv1.0``, ...) to nlnet's names (``conv1``, ``layer1.0.conv1``, ...),
so that torchvision's weights load into it and the two compute the same function
(tests/models/test_resnet3d_basic.py; ``benchmarks/train_step_r3d.py`` times them).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["R3D_18_LAYERS", "R3D_18_OPTIONS", "r3d_state_from_torchvision"]

R3D_18_LAYERS: tuple[int, ...] = (2, 2, 2, 2)
#: ``ResNet3d(R3D_18_LAYERS, num_classes, **R3D_18_OPTIONS)`` is torchvision's ``r3d_18``.
R3D_18_OPTIONS: dict[str, object] = {
    "residual": "basic",
    "inflate": "3x3x3",
    "inflate_blocks": "all",
    "conv1_t": 3,
    "pooling": "none",
    "temporal_strides": (1, 1, 1),
    "stage_temporal_strides": (1, 2, 2, 2),
    "dropout": 0.0,  # torchvision's VideoResNet has none
}
_STEM = {"stem.0.": "conv1.", "stem.1.": "bn1."}
_BLOCK = {
    ".conv1.0.": ".conv1.",
    ".conv1.1.": ".bn1.",
    ".conv2.0.": ".conv2.",
    ".conv2.1.": ".bn2.",
}


def r3d_state_from_torchvision(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A torchvision ``VideoResNet`` (R3D) state dict with nlnet's ``ResNet3d`` names."""
    out = {}
    for key, value in state.items():
        new = key
        for theirs, ours in _STEM.items():
            if key.startswith(theirs):
                new = ours + key[len(theirs) :]
        for theirs, ours in _BLOCK.items():
            if key.startswith("layer") and theirs in key:
                new = key.replace(theirs, ours)
        out[new] = value
    return out
