"""Attention mask builders (the encyclopedia article "Self-Attention", "Masks").

All masks follow nlnet's convention (see :mod:`nlnet.functional.attention`): **bool, True = this
query may use this key**. Tokens of a grid are flattened in row-major (raster) order.

* :func:`causal_mask` - position ``i`` attends to ``j <= i`` (the transformer decoder).
* :func:`key_mask_from_lengths`, :func:`padding_mask` - hide placeholder tokens.
* :func:`local_mask` - restricted self-attention in a neighbourhood of radius ``r`` (1D, 2D, 3D).
* :func:`window_mask` - Swin windows (optionally cyclically shifted) as one ``(N, N)`` mask over
  the raster-ordered grid.
* :func:`shifted_window_mask` - the same in window-partition order, ``(num_windows, M, M)``, as
  Swin's SW-MSA uses after the cyclic shift by ``floor(M/2)`` (Liu et al. 2021).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from nlnet.functional.windows import as_size, window_partition

__all__ = [
    "causal_mask",
    "key_mask_from_lengths",
    "padding_mask",
    "local_mask",
    "window_mask",
    "shifted_window_mask",
    "window_region_ids",
    "as_size",
]


def _grid(grid_size: int | Sequence[int]) -> tuple[int, ...]:
    g = (grid_size,) if isinstance(grid_size, int) else tuple(int(v) for v in grid_size)
    if not 1 <= len(g) <= 3 or any(v < 1 for v in g):
        raise ValueError(f"grid_size must be 1 to 3 positive ints, got {grid_size!r}")
    return g


def _coords(grid: tuple[int, ...], device: torch.device | str | None) -> Tensor:
    axes = [torch.arange(s, device=device) for s in grid]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, len(grid))


def causal_mask(
    n: int, m: int | None = None, *, device: torch.device | str | None = None
) -> Tensor:
    """Causal mask: query ``i`` may use key ``j`` iff ``j <= i`` (Vaswani et al. 2017 decoder).

    Aligned top-left like ``F.scaled_dot_product_attention(is_causal=True)``.

    Args:
        n: number of queries.
        m: number of keys (default ``n``).
        device: device of the result.

    Returns:
        Bool ``(n, m)``.
    """
    m = n if m is None else m
    if n < 1 or m < 1:
        raise ValueError(f"n and m must be positive, got n={n}, m={m}")
    return torch.ones(n, m, dtype=torch.bool, device=device).tril()


def key_mask_from_lengths(
    lengths: Tensor | Sequence[int],
    max_len: int | None = None,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """Bool ``(B, max_len)`` key mask, True for the first ``lengths[b]`` (real) tokens.

    Args:
        lengths: ``(B,)`` integer lengths.
        max_len: padded length (default ``max(lengths)``).
        device: device when ``lengths`` is not already a tensor.
    """
    lengths = torch.as_tensor(lengths, device=device)
    if lengths.dim() != 1 or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError(
            f"lengths must be a 1D integer tensor (B,), got {lengths.dtype} {tuple(lengths.shape)}"
        )
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError("lengths must be non-negative")
    longest = int(lengths.max()) if lengths.numel() else 0
    max_len = longest if max_len is None else max_len
    if max_len < longest:
        raise ValueError(f"max_len={max_len} is shorter than the longest length {longest}")
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


def padding_mask(
    lengths: Tensor | Sequence[int] | None = None,
    *,
    key_mask: Tensor | None = None,
    max_len: int | None = None,
    num_queries: int | None = None,
    mask_queries: bool = False,
) -> Tensor:
    """Padding mask hiding placeholder tokens (seed, "Masks", second bullet).

    Give either ``lengths`` (``(B,)``) or ``key_mask`` (bool ``(B, m)``, True = real token).

    Args:
        lengths: number of real tokens per batch element.
        key_mask: bool ``(B, m)`` with True for real tokens.
        max_len: padded length when ``lengths`` is given.
        num_queries: if given, the query dimension is materialised to this size.
        mask_queries: also forbid every key for padded *queries* (self-attention, ``n = m``); their
            output rows become exactly zero (all-masked rows, see
            :func:`~nlnet.functional.attention.scaled_dot_product_attention`).

    Returns:
        Bool mask ``(B, 1, n or 1, m)`` broadcastable over heads.
    """
    if (lengths is None) == (key_mask is None):
        raise ValueError("give exactly one of lengths or key_mask")
    if key_mask is None:
        key_mask = key_mask_from_lengths(lengths, max_len)
    elif not isinstance(key_mask, Tensor) or key_mask.dtype != torch.bool or key_mask.dim() != 2:
        raise TypeError(
            "key_mask must be a bool tensor of shape (B, m) with True = real token, got "
            f"{getattr(key_mask, 'dtype', type(key_mask).__name__)} "
            f"{tuple(getattr(key_mask, 'shape', ()))}"
        )
    mask = key_mask[:, None, None, :]  # (B, 1, 1, m)
    if mask_queries:
        mask = mask & key_mask[:, None, :, None]  # (B, 1, m, m)
        if num_queries is not None and num_queries != key_mask.shape[1]:
            raise ValueError(
                f"mask_queries needs num_queries == m ({key_mask.shape[1]}), got {num_queries}"
            )
    elif num_queries is not None:
        mask = mask.expand(-1, -1, num_queries, -1)
    return mask


def local_mask(
    grid_size: int | Sequence[int],
    radius: int,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """Local (restricted) attention: token ``i`` may use ``j`` iff their offset is within ``radius``.

    The neighbourhood is a ``(2r+1)^k`` box (Chebyshev distance ``<= r``) on a 1D sequence or a
    2D/3D grid flattened in raster order (seed, "Masks", third bullet).

    Args:
        grid_size: ``n`` for a sequence, ``(H, W)`` or ``(T, H, W)`` for a grid.
        radius: ``r >= 0``.
        device: device of the result.

    Returns:
        Bool ``(N, N)``, ``N = prod(grid_size)``.
    """
    grid = _grid(grid_size)
    if not isinstance(radius, int) or radius < 0:
        raise ValueError(f"radius must be a non-negative int, got {radius!r}")
    c = _coords(grid, device)  # (N, k)
    return (c[:, None, :] - c[None, :, :]).abs().amax(dim=-1) <= radius


def window_region_ids(
    grid_size: Sequence[int],
    window_size: Sequence[int],
    shift_size: Sequence[int],
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """Per-position labels of the Swin (shifted) windows on a grid divisible by the window.

    Two positions may attend to each other iff their labels are equal. Labels live in the
    *shifted* frame (after ``roll(-shift)``): position ``p`` belongs to window ``p // M`` and, inside
    the last window, to the region ``[G-M, G-s)`` or ``[G-s, G)`` (Liu et al. 2021).

    Returns:
        Long tensor of shape ``grid_size``.
    """
    k = len(grid_size)
    label = torch.zeros(tuple(grid_size), dtype=torch.long, device=device)
    mult = 1
    for dim in reversed(range(k)):
        g, m, s = grid_size[dim], window_size[dim], shift_size[dim]
        p = torch.arange(g, device=device)
        win = p // m
        region = torch.zeros_like(p)
        if s > 0:
            region = (p >= g - m).long() + (p >= g - s).long()
        ids = win * 3 + region  # unique per (window, region)
        shape = [1] * k
        shape[dim] = g
        label = label + ids.reshape(shape) * mult
        mult *= 3 * (g // m + 1)
    return label


def _check_window_args(
    grid_size: int | Sequence[int], window_size: int | Sequence[int], shift_size
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    grid = _grid(grid_size)
    k = len(grid)
    window = as_size(window_size, k, "window_size")
    shift = as_size(shift_size, k, "shift_size")
    for g, m, s in zip(grid, window, shift):
        if m < 1:
            raise ValueError(f"window_size must be positive, got {window_size!r}")
        if m > g:
            raise ValueError(f"window_size {window} is larger than the grid {grid}")
        if s >= m:
            raise ValueError(f"shift_size {shift} must be smaller than window_size {window}")
    return grid, window, shift


def window_mask(
    grid_size: int | Sequence[int],
    window_size: int | Sequence[int],
    shift_size: int | Sequence[int] = 0,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """Swin window mask over a raster-ordered grid: True iff two tokens share a (shifted) window.

    With ``shift_size = 0`` this is the block mask of non-overlapping ``M x M`` windows used in the
    seed's multi-head example; with ``shift_size = M // 2`` it reproduces SW-MSA (cyclic shift plus
    Swin's mask) without moving any token. Sizes not divisible by the window are handled as Swin
    does: the grid is padded at the end to a multiple of ``M`` and the mask cropped back.

    Args:
        grid_size: ``n``, ``(H, W)`` or ``(T, H, W)``.
        window_size: ``M`` (int or per dim); must not exceed the grid.
        shift_size: cyclic shift ``s`` per dim, ``0 <= s < M``.
        device: device of the result.

    Returns:
        Bool ``(N, N)``, ``N = prod(grid_size)``.
    """
    grid, window, shift = _check_window_args(grid_size, window_size, shift_size)
    padded = tuple(-(-g // m) * m for g, m in zip(grid, window))
    labels = window_region_ids(padded, window, shift, device=device)  # shifted frame
    # position p of the original grid sits at (p - s) mod G in the shifted frame
    labels = torch.roll(labels, shifts=shift, dims=tuple(range(len(grid))))
    labels = labels[tuple(slice(0, g) for g in grid)].reshape(-1)
    return labels[:, None] == labels[None, :]


def shifted_window_mask(
    grid_size: Sequence[int],
    window_size: int | Sequence[int],
    shift_size: int | Sequence[int],
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """Swin's SW-MSA mask in window-partition order.

    After the cyclic shift (``roll`` by ``-shift``) some windows hold tokens from regions that are
    not adjacent in the image; they may only attend within their own region (Liu et al. 2021).

    Args:
        grid_size: padded grid ``(H, W)`` or ``(T, H, W)``, divisible by ``window_size``.
        window_size: ``M`` per dim.
        shift_size: ``s`` per dim, ``0 <= s < M``.
        device: device of the result.

    Returns:
        Bool ``(num_windows, M^k, M^k)`` (True = may attend), windows in the order of
        :func:`nlnet.functional.windows.window_partition`.
    """
    grid, window, shift = _check_window_args(grid_size, window_size, shift_size)
    for g, m in zip(grid, window):
        if g % m:
            raise ValueError(
                f"grid_size {grid} must be divisible by window_size {window}; pad it first "
                "(nlnet.functional.windows.pad_to_window)"
            )
    labels = window_region_ids(grid, window, shift, device=device)  # shifted frame
    lw = window_partition(labels[None, ..., None], window)[..., 0]  # (nW, M^k)
    return lw[:, :, None] == lw[:, None, :]
