"""Max pooling on the CPU: kernel = stride for the block's keys and values (Sec. 3.3), and the
overlapping windows of a video network's stem (``pool1``/``pool2`` of Table 1).

``max_pool(x, kernel)`` returns exactly what ``F.max_pool{1,2,3}d(x, kernel, kernel)`` returns (the
same values, NaN included, and the same gradient: to the first maximum of each window in
row-major order, or its last NaN, as PyTorch's CPU kernels pick them), computed as elementwise maxima of the
``prod(kernel)`` strided views of ``x``. On the CPU PyTorch's channel-first max-pooling kernels are
slow: measured with one thread for a ``(2, 512, H, W)`` map, 1.6 / 10.0 / 31.8 ms at
14x14 / 28x28 / 56x56 against 0.19 / 0.56 / 1.7 ms for the maxima of the views, about as much
as a 1x1 convolution of the block at 14x14. In training a custom ``autograd.Function`` keeps the
flat index of each maximum (what ``return_indices=True`` gives) and scatters the gradient with it.
One difference: in a window that holds a NaN, PyTorch's kernels send the gradient to the NaN and
this function to the window's first entry (the output is NaN either way).

``max_pool3d(x, kernel, stride, padding)`` is ``F.max_pool3d`` with overlapping windows and
padding (the stem's ``3 x 3 x 3`` / ``1 x 3 x 3`` pool and the ``3 x 1 x 1`` temporal pool after
res2). PyTorch's CPU kernel for channel-first input is slow here too (6.4 ms for a
``(2, 64, 4, 56, 56)`` map with two threads) while its channels-last kernel, vectorised over
channels, takes 1.6 ms with the layout changes; both pick the same maximum of each window (the
first in row-major order, or a NaN), so the forward runs channels-last and the backward through
PyTorch's channel-first kernel with those indices: the same values, indices and gradient, bit
for bit (2.6x faster forward and backward at that size). Used on the CPU for maps of at least
``FAST_MIN_NUMEL`` elements and 16 channels; elsewhere, and while tracing, compiling or
exporting, it is ``F.max_pool3d``.
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.modules.utils import _triple

#: Smallest input (elements) for which :func:`max_pool3d` takes its channels-last path.
FAST_MIN_NUMEL = 1 << 16


def _views(x: Tensor, kernel: tuple[int, ...]) -> list[Tensor]:
    """The ``prod(kernel)`` strided views ``x[..., o_1::k_1, o_2::k_2, ...]`` of the trimmed grid
    (floor mode: trailing positions that do not fill a window are dropped), in row-major order."""
    dim = len(kernel)
    keep = tuple(slice(0, (s // k) * k) for s, k in zip(x.shape[-dim:], kernel))
    x = x[(..., *keep)]
    return [
        x[(..., *(slice(o, None, k) for o, k in zip(offset, kernel)))]
        for offset in itertools.product(*(range(k) for k in kernel))
    ]


def _maximum(views: list[Tensor]) -> Tensor:
    out = views[0]
    for v in views[1:]:
        out = torch.maximum(out, v)  # NaN propagates, as in max pooling
    return out


def _window_index(views: list[Tensor], out: Tensor, grid: tuple[int, ...], kernel) -> Tensor:
    """Flat index (into the ``prod(grid)`` positions of the input) of the first maximum of each
    window in row-major order: the ``indices`` of ``F.max_pool{d}d(..., return_indices=True)``."""
    dim = len(kernel)
    strides = [math.prod(grid[i + 1 :]) for i in range(dim)]  # row-major strides of the grid
    base = torch.zeros((), dtype=torch.long, device=out.device)
    for i, (n_out, k, st) in enumerate(zip(out.shape[-dim:], kernel, strides)):
        axis = torch.arange(n_out, device=out.device) * (k * st)
        base = base + axis.view((n_out,) + (1,) * (dim - 1 - i))  # (*out_grid): grid-sized only
    offsets = [
        sum(o * st for o, st in zip(offset, strides))
        for offset in itertools.product(*(range(k) for k in kernel))
    ]
    index = (base + offsets[-1]).expand(out.shape)
    for o in range(len(views) - 2, -1, -1):  # the earliest maximum wins (ties: first)
        index = torch.where(views[o] == out, base + offsets[o], index)
    return index


class _MaxPool(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, kernel: tuple[int, ...]) -> Tensor:
        views = _views(x, kernel)
        out = _maximum(views)
        grid = tuple(x.shape[-len(kernel) :])
        ctx.save_for_backward(_window_index(views, out, grid, kernel))
        ctx.shape, ctx.dim = x.shape, len(kernel)
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor) -> tuple[Tensor, None]:
        (index,) = ctx.saved_tensors
        # windows do not overlap: every input position receives at most one gradient
        start = len(ctx.shape) - ctx.dim
        grad = grad_out.new_zeros(ctx.shape)
        grad.flatten(start).scatter_(-1, index.flatten(start), grad_out.flatten(start))
        return grad, None


def max_pool(x: Tensor, kernel: tuple[int, ...]) -> Tensor:
    """Max pooling of the last ``len(kernel)`` dims with stride = kernel, floor mode.

    Args:
        x: ``(B, C, *grid)`` with ``len(grid) == len(kernel)``; every grid size at least its kernel
            (or 0: an empty grid gives an empty output).
        kernel: Window size per grid dim (1 = no pooling along that dim).

    Returns:
        ``(B, C, *(s // k))``: equal to ``F.max_pool{d}d(x, kernel, kernel)``, value and gradient.
    """
    kernel = tuple(int(k) for k in kernel)
    if math.prod(kernel) == 1:
        return x
    if torch.is_grad_enabled() and x.requires_grad:
        return _MaxPool.apply(x, kernel)
    return _maximum(_views(x, kernel))


class _ChannelsLastMaxPool3d(torch.autograd.Function):
    """Forward with PyTorch's channels-last kernel, backward with its channel-first one."""

    @staticmethod
    def forward(ctx, x: Tensor, kernel, stride, padding) -> Tensor:
        x_cl = x.contiguous(memory_format=torch.channels_last_3d)
        out, index = torch.ops.aten.max_pool3d_with_indices(x_cl, kernel, stride, padding)
        out, index = out.contiguous(), index.contiguous()  # (B, C, T', H', W'), channel-first
        ctx.save_for_backward(x, index)
        ctx.window = (kernel, stride, padding)
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        x, index = ctx.saved_tensors
        kernel, stride, padding = ctx.window
        grad = torch.ops.aten.max_pool3d_with_indices_backward(
            grad_out.contiguous(), x, kernel, stride, padding, [1, 1, 1], False, index
        )  # the indices are positions in each (T, H, W) grid: the same in either layout
        return grad, None, None, None


def _traced(x: Tensor) -> bool:
    return (
        isinstance(x, torch.fx.Proxy)
        or torch.compiler.is_compiling()
        or torch.jit.is_tracing()
        or torch.jit.is_scripting()
    )


def max_pool3d(
    x: Tensor,
    kernel: int | tuple[int, int, int],
    stride: int | tuple[int, int, int],
    padding: int | tuple[int, int, int] = 0,
) -> Tensor:
    """``F.max_pool3d(x, kernel, stride, padding)`` (floor mode, no dilation), value and
    gradient bit for bit, faster on the CPU (module docstring).

    Args:
        x: ``(B, C, T, H, W)``.
        kernel, stride, padding: an int or per dim ``(t, h, w)``, as for ``F.max_pool3d``.

    Returns:
        ``(B, C, T', H', W')``.
    """
    if (
        _traced(x)
        or x.device.type != "cpu"
        or x.dim() != 5
        or x.shape[1] < 16
        or x.numel() < FAST_MIN_NUMEL
        or not x.is_floating_point()
        or x.is_contiguous(memory_format=torch.channels_last_3d)
        and not x.is_contiguous()
    ):  # channels-last input: PyTorch's own kernel is the fast one already
        return F.max_pool3d(x, kernel, stride, padding)
    if not (torch.is_grad_enabled() and x.requires_grad):  # no indices to keep for a backward
        x_cl = x.contiguous(memory_format=torch.channels_last_3d)
        return F.max_pool3d(x_cl, kernel, stride, padding).contiguous()
    return _ChannelsLastMaxPool3d.apply(x, _triple(kernel), _triple(stride), _triple(padding))
