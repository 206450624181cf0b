"""Max pooling with kernel = stride (floor mode), the subsampling of keys and values (Sec. 3.3).

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
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import Tensor


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
