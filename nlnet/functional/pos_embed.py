"""Position information for permutation-equivariant attention.

The encyclopedia article "Self-Attention", "Permutation equivariance and position": self-attention
satisfies ``f(PX) = P f(X)``, so position must be injected separately -- a fixed sinusoidal
encoding added to the tokens (Vaswani et al. 2017), learned absolute embeddings (ViT, Dosovitskiy
et al. 2021) or a learned relative position bias ``B`` added to the scores inside each window
(Swin, Liu et al. 2021).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "sinusoidal_embedding_1d",
    "sinusoidal_embedding_2d",
    "sinusoidal_grid_encoding",
    "clipped_offset_index",
    "resize_pos_embed",
    "relative_position_index",
    "relative_position_bias",
]


def sinusoidal_embedding_1d(
    num_positions: int | Tensor,
    dim: int,
    *,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """Fixed sinusoidal encoding (Vaswani et al. 2017, Sec. 3.5).

    ``PE[pos, 2i] = sin(pos / base^(2i/dim))``, ``PE[pos, 2i+1] = cos(pos / base^(2i/dim))``.

    Args:
        num_positions: ``n`` (positions ``0..n-1``) or a 1D tensor of positions.
        dim: encoding width, even.
        base: wavelength base.
        dtype: result dtype.
        device: result device.

    Returns:
        ``(n, dim)``.
    """
    if dim <= 0 or dim % 2:
        raise ValueError(f"dim must be a positive even number, got {dim}")
    if isinstance(num_positions, Tensor):
        pos = num_positions.to(dtype=torch.float64, device=device)
        if pos.dim() != 1:
            raise ValueError(f"num_positions as a tensor must be 1D, got {tuple(pos.shape)}")
    else:
        if num_positions < 1:
            raise ValueError(f"num_positions must be positive, got {num_positions}")
        pos = torch.arange(num_positions, dtype=torch.float64, device=device)
    freq = torch.exp(
        -math.log(base) * torch.arange(0, dim, 2, dtype=torch.float64, device=pos.device) / dim
    )  # (dim/2,)
    angle = pos[:, None] * freq[None, :]  # (n, dim/2)
    pe = torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(pos.shape[0], dim)
    return pe.to(dtype)


def sinusoidal_embedding_2d(
    grid_size: Sequence[int],
    dim: int,
    *,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """2D sinusoidal encoding: the first ``dim/2`` channels encode the row, the rest the column.

    Args:
        grid_size: ``(H, W)``.
        dim: encoding width, divisible by 4.

    Returns:
        ``(H * W, dim)`` in raster order.
    """
    if len(grid_size) != 2:
        raise ValueError(f"grid_size must be (H, W), got {grid_size!r}")
    if dim <= 0 or dim % 4:
        raise ValueError(f"dim must be a positive multiple of 4 for a 2D encoding, got {dim}")
    h, w = (int(v) for v in grid_size)
    eh = sinusoidal_embedding_1d(h, dim // 2, base=base, dtype=dtype, device=device)  # (H, d/2)
    ew = sinusoidal_embedding_1d(w, dim // 2, base=base, dtype=dtype, device=device)  # (W, d/2)
    return torch.cat(
        [eh[:, None, :].expand(h, w, -1), ew[None, :, :].expand(h, w, -1)], dim=-1
    ).reshape(h * w, dim)


def sinusoidal_grid_encoding(x: Tensor, channels: int, *, base: float = 10000.0) -> Tensor:
    """Fixed sinusoidal encoding of the grid coordinates of a channel-first map (Vaswani et al.
    2017, Sec. 3.5, one band of channels per grid axis).

    The ``channels // 2`` sine/cosine pairs are dealt to the ``k`` grid axes in turn (axis ``a``
    gets ``p_a = channels // 2 // k`` pairs, one more for the first ``channels // 2 % k`` axes),
    axis after axis; an odd last channel is 0. Within the band of axis ``a``, pair ``i`` is
    ``sin(t / base^(i / p_a))``, ``cos(t / base^(i / p_a))`` of the coordinate ``t`` along ``a``.
    Sizes are read from ``x`` when the encoding runs, so a traced or exported graph encodes the
    grid of each input.

    Args:
        x: A map ``(B, C, *grid)``; only its grid sizes, dtype and device are used.
        channels: Encoding width (``>= 2 k`` so that every axis gets a pair).
        base: Wavelength base.

    Returns:
        ``(channels, *grid)`` in the dtype of ``x`` (computed in at least float32).
    """
    grid = x.shape[2:]
    k = len(grid)
    pairs = channels // 2
    if k < 1 or pairs < k:
        raise ValueError(
            f"channels must give every one of the {k} grid axes a sine/cosine pair (>= {2 * k}), "
            f"got {channels}"
        )
    dt = torch.promote_types(x.dtype, torch.float32)
    bands = []
    for a in range(k):
        p = pairs // k + (1 if a < pairs % k else 0)
        t = torch.arange(grid[a], device=x.device, dtype=dt)  # coordinates along axis a
        freq = torch.exp(-math.log(base) * torch.arange(p, device=x.device, dtype=dt) / p)
        angle = t[:, None] * freq[None, :]  # (size_a, p)
        band = torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(grid[a], 2 * p).t()
        shape = [2 * p] + [1] * k
        shape[1 + a] = grid[a]
        bands.append(band.reshape(shape).expand(2 * p, *grid))
    if channels % 2:
        bands.append(x.new_zeros((1, *grid), dtype=dt))
    return torch.cat(bands, dim=0).to(x.dtype)


def clipped_offset_index(x: Tensor, kernel: Sequence[int], radius: int) -> Tensor:
    """Index of the clipped relative offset of every (query, key) pair of a block's grids.

    Queries are the positions of ``x``'s grid ``(B, C, *grid)``; keys are the cells of the grid
    max-pooled with ``kernel`` (floor mode). Along each axis the offset is the pooled cell that
    contains the query minus the key cell (a remainder position uses the last cell), clipped to
    ``[-radius, radius]`` (Shaw et al. 2018, Sec. 3.2); the index is the row-major position of
    the offsets in a ``(2 radius + 1,) * k`` table.

    Returns:
        ``(N, N')`` int64 indices (N queries row-major, N' keys row-major).
    """
    grid = x.shape[2:]
    k = len(grid)
    width = 2 * radius + 1
    total = None
    for a in range(k):
        n_keys = grid[a] // kernel[a]
        cell = (torch.arange(grid[a], device=x.device) // kernel[a]).clamp_max(max(n_keys, 1) - 1)
        off = cell[:, None] - torch.arange(n_keys, device=x.device)[None, :]  # (s_a, k_a)
        off = (off.clamp(-radius, radius) + radius) * width ** (k - 1 - a)
        shape = [1] * (2 * k)
        shape[a], shape[k + a] = grid[a], n_keys
        term = off.reshape(shape)
        total = term if total is None else total + term
    n = 1
    for s in grid:
        n = n * s
    return total.reshape(n, -1)


def _square_side(n: int, name: str) -> int:
    side = math.isqrt(n)
    if side * side != n:
        raise ValueError(
            f"{name} is needed: {n} grid tokens do not form a square grid; pass it explicitly"
        )
    return side


def resize_pos_embed(
    pos_embed: Tensor,
    new_grid: int | Sequence[int],
    old_grid: int | Sequence[int] | None = None,
    *,
    num_prefix_tokens: int = 0,
    mode: str = "bicubic",
    align_corners: bool = False,
    antialias: bool = False,
) -> Tensor:
    """Resize learned absolute position embeddings to another patch grid (ViT fine-tuning at a
    new resolution, Dosovitskiy et al. 2021, Sec. 3.2: 2D interpolation of the pre-trained
    embeddings).

    Args:
        pos_embed: ``(N, D)`` or ``(1, N, D)``; the first ``num_prefix_tokens`` rows (class token)
            are kept as they are, the other rows form the grid in raster order.
        new_grid: target ``(H', W')`` (int = square).
        old_grid: source ``(H, W)``; inferred when the grid is square, required otherwise.
        num_prefix_tokens: leading non-grid tokens (1 for ViT's class token).
        mode: ``F.interpolate`` mode, bicubic by default.
        align_corners: passed to ``F.interpolate``.
        antialias: passed to ``F.interpolate`` (useful when shrinking).

    Returns:
        Embeddings with ``num_prefix_tokens + H' * W'`` rows, same layout as the input.
    """
    if not isinstance(pos_embed, Tensor) or pos_embed.dim() not in (2, 3):
        raise ValueError(
            f"pos_embed must be (N, D) or (1, N, D), got {tuple(getattr(pos_embed, 'shape', ()))}"
        )
    squeeze = pos_embed.dim() == 2
    pe = pos_embed[None] if squeeze else pos_embed
    if pe.shape[0] != 1:
        raise ValueError(f"pos_embed must have batch size 1, got {tuple(pos_embed.shape)}")
    if not 0 <= num_prefix_tokens <= pe.shape[1]:
        raise ValueError(
            f"num_prefix_tokens must be in [0, {pe.shape[1]}], got {num_prefix_tokens}"
        )
    prefix, grid_tokens = pe[:, :num_prefix_tokens], pe[:, num_prefix_tokens:]
    n, d = grid_tokens.shape[1], grid_tokens.shape[2]
    if old_grid is None:
        side = _square_side(n, "old_grid")
        old = (side, side)
    else:
        old = (old_grid, old_grid) if isinstance(old_grid, int) else tuple(old_grid)
        if len(old) != 2 or old[0] * old[1] != n:
            raise ValueError(f"old_grid {old_grid!r} does not match the {n} grid tokens")
    new = (new_grid, new_grid) if isinstance(new_grid, int) else tuple(new_grid)
    if len(new) != 2 or min(new) < 1:
        raise ValueError(f"new_grid must be a positive int or (H, W), got {new_grid!r}")
    if tuple(new) == tuple(old):
        return pos_embed
    img = grid_tokens.reshape(1, old[0], old[1], d).permute(0, 3, 1, 2)  # (1, D, H, W)
    img = F.interpolate(img, size=new, mode=mode, align_corners=align_corners, antialias=antialias)
    grid_tokens = img.permute(0, 2, 3, 1).reshape(1, new[0] * new[1], d)
    out = torch.cat([prefix, grid_tokens], dim=1)
    return out[0] if squeeze else out


def relative_position_index(
    window_size: int | Sequence[int],
    table_size: Sequence[int] | None = None,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """Index into Swin's relative position bias table for every pair of tokens in a window.

    For tokens ``i, j`` with coordinates ``c_i, c_j`` the index is
    ``sum_d (c_i[d] - c_j[d] + T_d - 1) * stride_d`` with strides of the ``(2 T_d - 1)``-sized
    table axes (Liu et al. 2021, Sec. 3.2). ``T = table_size`` defaults to ``window_size``; a
    smaller ``window_size`` addresses the same table (used when a window is clipped to a small
    input grid).

    Args:
        window_size: ``M`` per dim (1, 2 or 3 dims).
        table_size: window the table was made for (default ``window_size``).

    Returns:
        Long ``(N, N)``, ``N = prod(window_size)``; values in ``[0, prod(2T-1))``.
    """
    window = (window_size,) if isinstance(window_size, int) else tuple(int(v) for v in window_size)
    table = window if table_size is None else tuple(int(v) for v in table_size)
    if len(table) != len(window) or any(w < 1 or w > t for w, t in zip(window, table)):
        raise ValueError(f"window_size {window} must be positive and fit table_size {table}")
    axes = [torch.arange(w, device=device) for w in window]
    coords = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=0).reshape(len(window), -1)
    rel = coords[:, :, None] - coords[:, None, :]  # (k, N, N)
    index = torch.zeros(rel.shape[1:], dtype=torch.long, device=device)
    stride = 1
    for d in reversed(range(len(window))):
        index += (rel[d] + table[d] - 1) * stride
        stride *= 2 * table[d] - 1
    return index


def relative_position_bias(table: Tensor, index: Tensor) -> Tensor:
    """Gather the bias ``B`` of ``softmax(Q K^T / sqrt(d) + B) V`` from a learned table.

    Args:
        table: ``(prod(2M-1), num_heads)``.
        index: ``(N, N)`` from :func:`relative_position_index`.

    Returns:
        ``(num_heads, N, N)``.
    """
    n = index.shape[-1]
    return table[index.reshape(-1)].reshape(n, n, -1).permute(2, 0, 1)
