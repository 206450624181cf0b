"""Swin window attention (W-MSA / SW-MSA) for 2D and 3D token grids, and a Swin block.

The "Self-Attention" article, "Windowed attention" and "Permutation equivariance and
position": self-attention inside non-overlapping ``M x M`` windows, cost
``4 h w C^2 + 2 M^2 h w C``; alternate blocks shift the windows by ``floor(M/2)`` so that
information crosses window borders; a learned relative position bias ``B`` is added to the scores,
``softmax(Q K^T / sqrt(d) + B) V`` (Liu et al. 2021).

Inputs are channels-last, ``(B, H, W, C)`` or ``(B, T, H, W, C)``, like torchvision's Swin.
Parameter names (``qkv``, ``proj``, ``relative_position_bias_table``) follow
``torchvision.models.swin_transformer.ShiftedWindowAttention`` and
``torchvision.models.video.swin_transformer.ShiftedWindowAttention3d`` so their state dicts load
directly (the ``relative_position_index`` buffer is recomputed, not loaded).

Grids smaller than the window (``small_grid``):

* ``"pad"`` (2D default, as torchvision 2D): pad up to the window; no shift along that dim.
* ``"clip"`` (3D default, as torchvision 3D): shrink the window to the grid; no shift along that
  dim. The bias of the clipped window is read from the full table at the correct relative
  offsets. (torchvision 3D instead takes the first ``N x N`` block of the full-window index, which
  equals ours when only the first (time) dim is clipped and differs otherwise.)
* ``"error"``: raise a ``ValueError`` naming ``window_size``.

Padding tokens (sizes not divisible by ``M``) are zeros that take part in attention, as in Swin and
torchvision; ``mask_padding=True`` hides them as keys instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.ops import StochasticDepth

from nlnet.functional.attention import scaled_dot_product_attention
from nlnet.functional.masks import as_size, shifted_window_mask
from nlnet.functional.pos_embed import relative_position_bias, relative_position_index
from nlnet.functional.windows import (
    cyclic_shift,
    pad_to_window,
    window_partition,
    window_reverse,
)

__all__ = [
    "WindowAttention",
    "WindowAttention2d",
    "WindowAttention3d",
    "SwinBlock",
    "swin_blocks",
    "window_tuple",
]

_SMALL_GRID = ("pad", "clip", "error")


def window_tuple(
    window_size: int | Sequence[int], shift_size: int | Sequence[int] = 0, ndim: int | None = None
) -> tuple[int, ...]:
    """``window_size`` as a tuple: an int ``M`` becomes ``(M,) * ndim``, with ``ndim`` taken from
    ``shift_size`` when that is a sequence and 2 (an image grid) otherwise."""
    if ndim is not None and ndim not in (2, 3):
        raise ValueError(f"ndim must be 2 or 3, got {ndim!r}")
    if isinstance(window_size, bool) or not isinstance(window_size, int):
        if ndim is not None and len(window_size) != ndim:
            raise ValueError(f"window_size {window_size!r} does not have ndim={ndim} entries")
        return tuple(window_size)
    if ndim is None:
        ndim = 2 if isinstance(shift_size, int) else len(shift_size)
    return (window_size,) * ndim


class WindowAttention(nn.Module):
    """Window multi-head self-attention with relative position bias (W-MSA; SW-MSA if shifted).

    Args:
        dim: channels ``C``.
        window_size: ``M`` per grid dim; its length (2 or 3) sets the grid dimensionality. An
            int ``M`` is ``(M, M)``, or ``(M, M, M)`` with ``ndim=3`` or a 3-entry ``shift_size``.
        num_heads: heads; must divide ``dim``.
        shift_size: cyclic shift per dim (0 = W-MSA, ``M // 2`` = SW-MSA); ``0 <= s < M``.
        qkv_bias: bias of the ``qkv`` projection.
        proj_bias: bias of the output projection.
        attention_dropout: dropout on the attention weights.
        dropout: dropout on the output.
        small_grid: ``"pad"``, ``"clip"`` or ``"error"`` for grids smaller than the window.
        mask_padding: hide padding tokens as keys (Swin and torchvision do not).
        impl: attention implementation (see ``scaled_dot_product_attention``).
        ndim: 2 or 3: the grid dimensionality of an int ``window_size`` (default: the length of
            ``shift_size`` if it is a sequence, else 2).
    """

    def __init__(
        self,
        dim: int,
        window_size: int | Sequence[int],
        num_heads: int,
        shift_size: int | Sequence[int] = 0,
        *,
        qkv_bias: bool = True,
        proj_bias: bool = True,
        attention_dropout: float = 0.0,
        dropout: float = 0.0,
        small_grid: str = "pad",
        mask_padding: bool = False,
        impl: str = "auto",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        ndim: int | None = None,
    ) -> None:
        super().__init__()
        window_size = window_tuple(window_size, shift_size, ndim)
        if len(window_size) not in (2, 3):
            raise ValueError(
                f"window_size must be a sequence of 2 (2D) or 3 (3D) ints, got {window_size!r}"
            )
        window = as_size(window_size, len(window_size), "window_size")
        if min(window) < 1:
            raise ValueError(f"window_size must be positive, got {window_size!r}")
        shift = as_size(shift_size, len(window), "shift_size")
        if any(s >= m for s, m in zip(shift, window)):
            raise ValueError(f"shift_size {shift} must be smaller than window_size {window}")
        if not isinstance(num_heads, int) or num_heads < 1 or dim % num_heads:
            raise ValueError(
                f"num_heads must be a positive int dividing dim={dim}, got {num_heads!r}"
            )
        if small_grid not in _SMALL_GRID:
            raise ValueError(f"small_grid must be one of {_SMALL_GRID}, got {small_grid!r}")
        fk = {"device": device, "dtype": dtype}
        self.dim = dim
        self.window_size = window
        self.shift_size = shift
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.attention_dropout = attention_dropout
        self.dropout = dropout
        self.small_grid = small_grid
        self.mask_padding = mask_padding
        self.impl = impl
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias, **fk)
        self.proj = nn.Linear(dim, dim, bias=proj_bias, **fk)
        table_rows = 1
        for m in window:
            table_rows *= 2 * m - 1
        # one learned bias per relative offset and head: prod(2M - 1) x heads
        self.relative_position_bias_table = nn.Parameter(torch.zeros(table_rows, num_heads, **fk))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)
        self.register_buffer(
            "relative_position_index",
            relative_position_index(window, device=device),
            persistent=False,
        )

    # --- state dicts ----------------------------------------------------------------------------
    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # torchvision stores the index as a buffer; it is derived from window_size here
        state_dict.pop(prefix + "relative_position_index", None)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @classmethod
    def from_torchvision(cls, module: nn.Module, **kwargs) -> WindowAttention:
        """Copy a torchvision ``ShiftedWindowAttention`` (2D) or ``ShiftedWindowAttention3d``."""
        w = module.qkv.weight
        window = list(module.window_size)
        if len(window) == 2:
            kwargs.setdefault("small_grid", "pad")
        else:
            kwargs.setdefault("small_grid", "clip")
        new = cls(
            w.shape[1],
            window,
            module.num_heads,
            list(module.shift_size),
            qkv_bias=module.qkv.bias is not None,
            proj_bias=module.proj.bias is not None,
            attention_dropout=module.attention_dropout,
            dropout=module.dropout,
            device=w.device,
            dtype=w.dtype,
            **kwargs,
        )
        new.load_state_dict(module.state_dict())
        return new

    # --- geometry -------------------------------------------------------------------------------
    def effective_window(self, grid_size: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Window and shift actually used on a grid (see ``small_grid`` in the module doc)."""
        window, shift = list(self.window_size), list(self.shift_size)
        for i, g in enumerate(grid_size):
            if g < window[i]:
                if self.small_grid == "error":
                    raise ValueError(
                        f"window_size {self.window_size} is larger than the grid "
                        f"{tuple(grid_size)} (small_grid='error')"
                    )
                if self.small_grid == "clip":
                    window[i] = g
            if g <= window[i]:  # a single window along this dim: nothing to shift
                shift[i] = 0
        return tuple(window), tuple(shift)

    def get_relative_position_bias(self, window: Sequence[int] | None = None) -> Tensor:
        """Bias ``B`` of shape ``(heads, N, N)`` for ``window`` (default: the full window)."""
        window = self.window_size if window is None else tuple(window)
        if window == self.window_size:
            index = self.relative_position_index
        else:
            index = relative_position_index(
                window, self.window_size, device=self.relative_position_bias_table.device
            )
        return relative_position_bias(self.relative_position_bias_table, index)

    def _allowed_keys(
        self,
        grid: tuple[int, ...],
        padded: tuple[int, ...],
        window: tuple[int, ...],
        shift: tuple[int, ...],
        device: torch.device,
    ) -> Tensor | None:
        """Bool ``(nW, N, N)`` SW-MSA region mask (and padding-key mask), cached per geometry."""
        need_pad = self.mask_padding and padded != grid
        if not any(shift) and not need_pad:
            return None
        cache_key = (grid, window, shift, need_pad, str(device))
        # no caching while torch.compile / torch.export trace: their tensors are fake
        tracing = torch.compiler.is_compiling()
        cache = {} if tracing else self.__dict__.setdefault("_mask_cache", {})
        if cache_key in cache:
            return cache[cache_key]
        allowed = None
        if any(shift):
            allowed = shifted_window_mask(padded, window, shift, device=device)  # (nW, N, N)
        if need_pad:
            real = torch.zeros((1, *padded, 1), dtype=torch.bool, device=device)
            real[(slice(None), *(slice(0, g) for g in grid))] = True
            real = window_partition(cyclic_shift(real, shift), window)[..., 0]  # (nW, N)
            real = real[:, None, :]  # padded tokens are hidden as keys only
            allowed = real if allowed is None else allowed & real
        if len(cache) > 16:
            cache.clear()
        cache[cache_key] = allowed
        return allowed

    # --- forward --------------------------------------------------------------------------------
    def _empty_grid(self, x: Tensor, return_weights: bool) -> Tensor | tuple[Tensor, Tensor]:
        """A grid with an axis of size 0: the empty output like ``x``, with zero gradients for
        the projections (their values path runs on the empty tokens), and no windows."""
        out = self.proj(self.qkv(x)[..., 2 * self.dim :])  # (B, *grid, C), empty
        if not return_weights:
            return out
        n = math.prod(self.window_size)
        return out, x.new_zeros(x.shape[0], 0, self.num_heads, n, n)

    def forward(self, x: Tensor, *, return_weights: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Window attention on a channels-last grid.

        Args:
            x: ``(B, H, W, C)`` (2D) or ``(B, T, H, W, C)`` (3D).
            return_weights: also return the weights ``(B, num_windows, heads, N, N)`` of the
                (padded, shifted) windows in partition order, ``N = prod(window)``.

        Returns:
            Tensor like ``x`` (or ``(out, weights)``).
        """
        k = len(self.window_size)
        if x.dim() != k + 2 or x.shape[-1] != self.dim:
            layout = "(B, H, W, C)" if k == 2 else "(B, T, H, W, C)"
            raise ValueError(
                f"x must be channels-last {layout} with C={self.dim}, got {tuple(x.shape)}"
            )
        b, grid, c = x.shape[0], tuple(x.shape[1:-1]), self.dim
        if 0 in grid:  # no position, so no window: the empty output, whatever small_grid says
            return self._empty_grid(x, return_weights)
        window, shift = self.effective_window(grid)
        x, _ = pad_to_window(x, window)  # (B, *padded, C)
        padded = tuple(x.shape[1:-1])
        x = cyclic_shift(x, shift)
        win = window_partition(x, window)  # (B*nW, N, C)
        n = win.shape[1]
        nw = 1  # windows per sample (B may be 0); a loop, not a generator: no dynamo graph break
        for p, w in zip(padded, window):
            nw *= p // w

        qkv = self.qkv(win).reshape(b, nw, n, 3, self.num_heads, self.head_dim)
        q, key, v = qkv.permute(3, 0, 1, 4, 2, 5).unbind(0)  # each (B, nW, h, N, d_h)

        attn_mask = self.get_relative_position_bias(window).to(q.dtype)[None, None]  # (1,1,h,N,N)
        allowed = self._allowed_keys(grid, padded, window, shift, x.device)  # (nW, N, N) or None
        if allowed is not None:
            attn_mask = attn_mask.masked_fill(~allowed[None, :, None], float("-inf"))

        # fold windows into the head dim: 4D (B, nW*h, N, d_h) tensors with a mask broadcast over
        # the batch keep F.scaled_dot_product_attention on its fused kernels
        h, dh = self.num_heads, self.head_dim
        attn_mask = attn_mask.expand(1, nw, h, n, n).reshape(1, nw * h, n, n)
        res = scaled_dot_product_attention(
            q.reshape(b, nw * h, n, dh),
            key.reshape(b, nw * h, n, dh),
            v.reshape(b, nw * h, n, dh),
            attn_mask,
            scale=dh**-0.5,
            dropout_p=self.attention_dropout if self.training else 0.0,
            return_weights=return_weights,
            impl=self.impl,
        )
        out, weights = res if return_weights else (res, None)
        if weights is not None:
            weights = weights.reshape(b, nw, h, n, n)
        out = out.reshape(b, nw, h, n, dh).transpose(2, 3).reshape(b * nw, n, c)  # merge heads
        out = self.proj(out)
        out = F.dropout(out, p=self.dropout, training=self.training)
        out = window_reverse(out, window, padded)  # (B, *padded, C)
        out = cyclic_shift(out, shift, reverse=True)
        out = out[(slice(None), *(slice(0, g) for g in grid))].contiguous()
        return (out, weights) if return_weights else out

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, window_size={self.window_size}, num_heads={self.num_heads}, "
            f"shift_size={self.shift_size}, small_grid={self.small_grid!r}"
        )


class _RankedWindowAttention(WindowAttention):
    """:class:`WindowAttention` of a fixed rank: int sizes are expanded to ``rank`` axes, and a
    grid smaller than a window is handled the rank's way (``default_small_grid``)."""

    rank: int
    default_small_grid: str

    def __init__(
        self,
        dim: int,
        window_size: int | Sequence[int],
        num_heads: int,
        shift_size: int | Sequence[int] = 0,
        **kwargs,
    ) -> None:
        kwargs.setdefault("small_grid", self.default_small_grid)
        size = as_size(window_size, self.rank, "window_size")
        super().__init__(dim, size, num_heads, shift_size, **kwargs)


class WindowAttention2d(_RankedWindowAttention):
    """:class:`WindowAttention` on ``(B, H, W, C)``; int sizes are expanded to 2D; a small
    image is padded to a window (Swin)."""

    rank, default_small_grid = 2, "pad"


class WindowAttention3d(_RankedWindowAttention):
    """:class:`WindowAttention` on ``(B, T, H, W, C)``; int sizes are expanded to 3D; a short
    clip clips the window to the grid (Video Swin)."""

    rank, default_small_grid = 3, "clip"


class SwinBlock(nn.Module):
    """Swin transformer block: ``x + attn(norm1(x))`` then ``x + mlp(norm2(x))`` (Liu et al. 2021).

    Submodule names (``norm1``, ``attn``, ``norm2``, ``mlp.0``, ``mlp.3``) match torchvision's
    ``SwinTransformerBlock`` so its state dict loads directly.

    Args:
        dim: channels.
        num_heads: heads.
        window_size: ``M`` per dim (2 or 3 values), or an int ``M`` for every dim (2D unless
            ``ndim=3`` or ``shift_size`` has 3 entries).
        shift_size: 0 for W-MSA blocks, ``M // 2`` for SW-MSA blocks (see :func:`swin_blocks`).
        mlp_ratio: hidden width of the MLP relative to ``dim``.
        dropout: dropout in the MLP and after the attention projection.
        attention_dropout: dropout on the attention weights.
        stochastic_depth_prob: drop-path probability of the residual branches.
        norm_layer: normalisation constructor.
        **attn_kwargs: passed to :class:`WindowAttention` (``small_grid``, ``mask_padding``, ...).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window_size: int | Sequence[int],
        shift_size: int | Sequence[int] = 0,
        *,
        mlp_ratio: float = 4.0,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        stochastic_depth_prob: float = 0.0,
        norm_layer: Callable[..., nn.Module] = nn.LayerNorm,
        ndim: int | None = None,
        **attn_kwargs,
    ) -> None:
        super().__init__()
        window_size = window_tuple(window_size, shift_size, ndim)
        attn_kwargs.setdefault("small_grid", "pad" if len(window_size) == 2 else "clip")
        self.norm1 = norm_layer(dim)
        self.attn = WindowAttention(
            dim,
            window_size,
            num_heads,
            shift_size,
            attention_dropout=attention_dropout,
            dropout=dropout,
            **attn_kwargs,
        )
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")  # per sample
        self.norm2 = norm_layer(dim)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(
            nn.Linear(dim, hidden),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, dim),
            nn.Dropout(dropout),
        )
        for mod in self.mlp.modules():
            if isinstance(mod, nn.Linear):
                nn.init.xavier_uniform_(mod.weight)
                nn.init.normal_(mod.bias, std=1e-6)

    def forward(self, x: Tensor) -> Tensor:
        """``x``: channels-last ``(B, H, W, C)`` or ``(B, T, H, W, C)``; returns the same shape."""
        x = x + self.stochastic_depth(self.attn(self.norm1(x)))
        x = x + self.stochastic_depth(self.mlp(self.norm2(x)))
        return x


def swin_blocks(
    depth: int,
    dim: int,
    num_heads: int,
    window_size: int | Sequence[int],
    *,
    ndim: int | None = None,
    **kwargs,
) -> nn.Sequential:
    """``depth`` Swin blocks alternating W-MSA (shift 0) and SW-MSA (shift ``M // 2``).

    Seed, "Windowed attention": "Alternate blocks shift the windows by floor(M/2) patches". An
    int ``window_size`` is ``M`` for each of ``ndim`` (default 2) grid dims.
    """
    if depth < 1:
        raise ValueError(f"depth must be positive, got {depth}")
    window_size = window_tuple(window_size, 0, ndim)
    shifted = [m // 2 for m in window_size]
    return nn.Sequential(
        *[
            SwinBlock(
                dim,
                num_heads,
                window_size,
                [0] * len(window_size) if i % 2 == 0 else shifted,
                **kwargs,
            )
            for i in range(depth)
        ]
    )
