"""``nn.MaxPool3d`` with the CPU fast path of :func:`nlnet.functional.pooling.max_pool3d`.

The stem pools of the video networks (``pool1`` and ``pool2`` of Table 1 of Wang et al.,
"Non-local Neural Networks", CVPR 2018). The same module otherwise: arguments, ``repr``, no
state; values and gradients bit for bit those of ``nn.MaxPool3d``.
"""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn.modules.utils import _triple

from nlnet.functional.pooling import max_pool3d

__all__ = ["MaxPool3d"]


class MaxPool3d(nn.MaxPool3d):
    """``nn.MaxPool3d`` computed by :func:`~nlnet.functional.pooling.max_pool3d` where it
    can be (floor mode, no dilation, no indices returned)."""

    def forward(self, x: Tensor) -> Tensor:
        if self.ceil_mode or self.return_indices or _triple(self.dilation) != (1, 1, 1):
            return super().forward(x)
        stride = self.stride if self.stride is not None else self.kernel_size
        return max_pool3d(x, self.kernel_size, stride, self.padding)
