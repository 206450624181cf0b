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

from nlnet.engine.folding import FoldedConv1d, FoldedConv2d, FoldedConv3d

__all__ = ["subsample_strided_pointwise", "is_strided_pointwise", "SubsampledConv1d",
           "SubsampledConv2d", "SubsampledConv3d", "SubsampledFoldedConv1d",
           "SubsampledFoldedConv2d", "SubsampledFoldedConv3d"]  # fmt: skip

_CONV_FN = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


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


# Named module-level classes (a pickled model finds them by name).
class SubsampledConv1d(_Subsampled, nn.Conv1d):
    """``nn.Conv1d`` with a strided 1x1 kernel, computed on the subsampled input."""


class SubsampledConv2d(_Subsampled, nn.Conv2d):
    """``nn.Conv2d`` with a strided 1x1 kernel, computed on the subsampled input."""


class SubsampledConv3d(_Subsampled, nn.Conv3d):
    """``nn.Conv3d`` with a strided 1x1x1 kernel, computed on the subsampled input."""


class SubsampledFoldedConv1d(_Subsampled, FoldedConv1d):
    """:class:`~nlnet.engine.folding.FoldedConv1d`, computed on the subsampled input."""


class SubsampledFoldedConv2d(_Subsampled, FoldedConv2d):
    """:class:`~nlnet.engine.folding.FoldedConv2d`, computed on the subsampled input."""


class SubsampledFoldedConv3d(_Subsampled, FoldedConv3d):
    """:class:`~nlnet.engine.folding.FoldedConv3d`, computed on the subsampled input."""


_SUBSAMPLED: dict[type, type] = {
    nn.Conv1d: SubsampledConv1d, nn.Conv2d: SubsampledConv2d, nn.Conv3d: SubsampledConv3d,
    FoldedConv1d: SubsampledFoldedConv1d, FoldedConv2d: SubsampledFoldedConv2d,
    FoldedConv3d: SubsampledFoldedConv3d,
}  # fmt: skip


def subsample_strided_pointwise(model: nn.Module) -> int:
    """Compute every strided 1x1 convolution of ``model`` as subsampling + 1x1 convolution
    (module docstring), in place. Returns how many convolutions changed (a convolution of
    another class, e.g. a user's subclass, is left as it is)."""
    count = 0
    for m in model.modules():
        if is_strided_pointwise(m) and type(m) in _SUBSAMPLED:
            m.__class__ = _SUBSAMPLED[type(m)]
            count += 1
    return count
