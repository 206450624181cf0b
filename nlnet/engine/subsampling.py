"""Strided 1x1 convolutions computed as a subsampling and a 1x1 convolution (``train.subsample_1x1``).

A convolution with a ``1 x 1 (x 1)`` kernel, no padding and stride ``s`` reads only every
``s``-th position: ``conv(x, W, stride=s) = conv(x[..., ::s_1, ::s_2, ...], W)``. A ResNet's
projection shortcuts are such convolutions (the ``1 x 1 x 1`` stride-2 convolution at the start
of res3, res4 and res5 of the paper's C2D and I3D, Table 1 of Wang et al., "Non-local Neural
Networks", CVPR 2018; torchvision's and PySlowFast's ResNets alike). PyTorch's CPU convolution
(oneDNN) computes the strided form 2-2.7x slower than the subsampled one, forward and backward
(measured in docs/benchmarks/training_step.md), so the subsampled form is computed instead.

The two forms compute the same sums in another order: outputs and gradients agree to float
rounding (about 1e-7 relative), not bit for bit, which is why this is an option and not the
default. The convolution keeps its parameters and state-dict keys (only its class changes), and
a convolution folded with its frozen BatchNorm (:mod:`nlnet.engine.folding`) is subsampled too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["subsample_strided_pointwise", "is_strided_pointwise"]

_CONV_FN = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_SUBSAMPLED: dict[type, type] = {}  # convolution class -> its subsampling subclass


def is_strided_pointwise(conv: nn.Module) -> bool:
    """A convolution whose kernel is all ones, with zero padding and a stride above 1."""
    return (
        isinstance(conv, nn.modules.conv._ConvNd)
        and not conv.transposed
        and all(k == 1 for k in conv.kernel_size)
        and (conv.padding == "valid" or all(p == 0 for p in conv.padding))
        and any(s > 1 for s in conv.stride)
    )


class _Subsampled:
    """Mixin: the convolution of the ``stride``-th positions, with stride 1."""

    def _conv_forward(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
        nd = len(self.stride)
        x = x[(..., *(slice(None, None, s) for s in self.stride))]  # (B, C, *ceil(grid / s))
        return _CONV_FN[nd](x, weight, bias, 1, 0, self.dilation, self.groups)


def _subsampled_class(cls: type) -> type:
    if cls not in _SUBSAMPLED:
        _SUBSAMPLED[cls] = type(f"Subsampled{cls.__name__}", (_Subsampled, cls), {})
    return _SUBSAMPLED[cls]


def subsample_strided_pointwise(model: nn.Module) -> int:
    """Compute every strided 1x1 convolution of ``model`` as subsampling + 1x1 convolution
    (module docstring), in place. Returns how many convolutions changed."""
    count = 0
    for m in model.modules():
        if is_strided_pointwise(m) and not isinstance(m, _Subsampled):
            m.__class__ = _subsampled_class(type(m))
            count += 1
    return count
