"""Swin window partition / reverse, cyclic shift and padding for 2D and 3D token grids.

The encyclopedia article "Self-Attention", "Windowed attention": self-attention inside non-overlapping
windows of ``M x M`` patches, alternate blocks shifting the windows by ``floor(M/2)``; padding the
grid is the simple alternative for sizes that are not multiples of ``M`` (Liu et al. 2021).

Tensors are channels-last: ``(B, H, W, C)`` or ``(B, T, H, W, C)``; windows are
``(B * num_windows, prod(M), C)`` with windows in raster order of the window grid and tokens in
raster order inside each window.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "window_partition",
    "window_reverse",
    "cyclic_shift",
    "window_padding",
    "pad_to_window",
    "num_windows",
]


def as_size(value: int | Sequence[int], ndim: int, name: str) -> tuple[int, ...]:
    """Expand an int to an ``ndim``-tuple and validate a size tuple (positive ints)."""
    if isinstance(value, int):
        out = (value,) * ndim
    else:
        out = tuple(int(v) for v in value)
    if len(out) != ndim:
        raise ValueError(f"{name} must be an int or a sequence of {ndim} ints, got {value!r}")
    if any(v < 0 for v in out):
        raise ValueError(f"{name} must be non-negative, got {value!r}")
    return out


def _grid_of(
    x: Tensor, size, size_name: str = "window_size", name: str = "x"
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if not isinstance(x, Tensor) or x.dim() not in (4, 5):
        raise ValueError(
            f"{name} must be channels-last (B, H, W, C) or (B, T, H, W, C), got "
            f"{tuple(getattr(x, 'shape', ()))}"
        )
    grid = tuple(x.shape[1:-1])
    return grid, as_size(size, len(grid), size_name)


def window_padding(grid_size: Sequence[int], window_size: Sequence[int]) -> tuple[int, ...]:
    """Padding (at the end of each dim) that makes ``grid_size`` a multiple of ``window_size``."""
    return tuple((m - g % m) % m for g, m in zip(grid_size, window_size))


def num_windows(grid_size: Sequence[int], window_size: Sequence[int]) -> int:
    """Number of windows after padding ``grid_size`` to a multiple of ``window_size``."""
    n = 1
    for g, m in zip(grid_size, window_size):
        n *= -(-g // m)
    return n


def pad_to_window(x: Tensor, window_size: int | Sequence[int]) -> tuple[Tensor, tuple[int, ...]]:
    """Zero-pad a channels-last grid at the end of each dim to a multiple of the window.

    Returns:
        ``(x_padded, pad)`` with ``pad`` the number of added positions per grid dim.
    """
    grid, window = _grid_of(x, window_size)
    pad = window_padding(grid, window)
    if any(pad):
        spec = [0, 0]  # channels
        for p in reversed(pad):
            spec += [0, p]
        x = F.pad(x, spec)
    return x, pad


def window_partition(x: Tensor, window_size: int | Sequence[int]) -> Tensor:
    """Cut a channels-last grid into non-overlapping windows.

    Args:
        x: ``(B, H, W, C)`` or ``(B, T, H, W, C)``, each grid dim divisible by the window.
        window_size: ``M`` (int) or per-dim sizes.

    Returns:
        ``(B * num_windows, prod(window_size), C)``.

    Raises:
        ValueError: naming ``window_size`` if it is larger than the grid or does not divide it.
    """
    grid, window = _grid_of(x, window_size)
    for g, m in zip(grid, window):
        if m < 1 or m > g:
            raise ValueError(f"window_size {window} is larger than the grid {grid} (or < 1)")
        if g % m:
            raise ValueError(
                f"grid {grid} is not divisible by window_size {window}; pad it with pad_to_window"
            )
    b, c, k = x.shape[0], x.shape[-1], len(grid)
    shape = [b]
    for g, m in zip(grid, window):
        shape += [g // m, m]
    shape.append(c)
    x = x.reshape(shape)  # (B, G0/M0, M0, G1/M1, M1, [G2/M2, M2,] C)
    perm = [0] + [1 + 2 * i for i in range(k)] + [2 + 2 * i for i in range(k)] + [2 * k + 1]
    vol = 1
    for m in window:
        vol *= m
    return x.permute(perm).reshape(-1, vol, c)


def window_reverse(
    windows: Tensor, window_size: int | Sequence[int], grid_size: Sequence[int]
) -> Tensor:
    """Inverse of :func:`window_partition`.

    Args:
        windows: ``(B * num_windows, prod(window_size), C)``.
        window_size: window per dim.
        grid_size: ``(H, W)`` or ``(T, H, W)`` (divisible by the window).

    Returns:
        ``(B, *grid_size, C)``.
    """
    grid = tuple(int(g) for g in grid_size)
    k = len(grid)
    window = as_size(window_size, k, "window_size")
    if windows.dim() != 3:
        raise ValueError(f"windows must be (B*nW, M^k, C), got {tuple(windows.shape)}")
    counts = [g // m for g, m in zip(grid, window)]
    if any(g % m for g, m in zip(grid, window)):
        raise ValueError(f"grid_size {grid} is not divisible by window_size {window}")
    nw = 1
    for cnt in counts:
        nw *= cnt
    if windows.shape[0] % nw:
        raise ValueError(
            f"windows has {windows.shape[0]} windows, not a multiple of {nw} for grid {grid}"
        )
    c = windows.shape[-1]
    x = windows.reshape([-1, *counts, *window, c])
    perm = [0]
    for i in range(k):
        perm += [1 + i, 1 + k + i]
    perm.append(2 * k + 1)
    return x.permute(perm).reshape(-1, *grid, c)


def cyclic_shift(x: Tensor, shift_size: int | Sequence[int], *, reverse: bool = False) -> Tensor:
    """Swin's cyclic shift of a channels-last grid: roll by ``-shift`` (``+shift`` if ``reverse``).

    Args:
        x: ``(B, H, W, C)`` or ``(B, T, H, W, C)``.
        shift_size: ``s`` per grid dim (usually ``floor(M/2)``).
        reverse: undo the shift.
    """
    grid, shift = _grid_of(x, shift_size, "shift_size")
    sign = 1 if reverse else -1
    if not any(shift):
        return x
    return torch.roll(x, shifts=tuple(sign * s for s in shift), dims=tuple(range(1, len(grid) + 1)))
