"""Position embedding modules (the "Self-Attention" article, "Permutation equivariance and
position"): self-attention is permutation equivariant, so the layout of the patches must be
added to the tokens -- learned absolute embeddings as in ViT (Dosovitskiy et al. 2021) or fixed
sinusoidal encodings (Vaswani et al. 2017).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from nlnet.functional.pos_embed import (
    resize_pos_embed,
    sinusoidal_embedding_1d,
    sinusoidal_embedding_2d,
)

__all__ = ["LearnedPositionEmbedding", "SinusoidalPositionEmbedding"]


def _grid2(v: int | Sequence[int], name: str) -> tuple[int, int]:
    g = (v, v) if isinstance(v, int) else tuple(int(x) for x in v)
    if len(g) != 2 or min(g) < 1:
        raise ValueError(f"{name} must be a positive int or (H, W), got {v!r}")
    return g


class LearnedPositionEmbedding(nn.Module):
    """Learned absolute position embedding added to the tokens (ViT).

    Args:
        grid_size: patch grid ``(H, W)`` the embedding is learned for (int = square).
        dim: token width.
        num_prefix_tokens: leading non-grid tokens (1 for a class token), each with its own
            embedding that is never resized.
        init_std: std of the truncated-normal initialisation.

    Shapes:
        ``x``: ``(B, num_prefix_tokens + H' * W', dim)``; if ``(H', W')`` differs from
        ``grid_size`` pass ``grid_size=(H', W')`` and the embedding is resized bicubically on the
        fly (``resize_`` makes it permanent).
    """

    def __init__(
        self,
        grid_size: int | Sequence[int],
        dim: int,
        *,
        num_prefix_tokens: int = 0,
        init_std: float = 0.02,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.grid_size = _grid2(grid_size, "grid_size")
        self.dim = dim
        self.num_prefix_tokens = num_prefix_tokens
        n = num_prefix_tokens + self.grid_size[0] * self.grid_size[1]
        self.pos_embed = nn.Parameter(torch.empty(1, n, dim, device=device, dtype=dtype))
        nn.init.trunc_normal_(self.pos_embed, std=init_std)

    def embedding(self, grid_size: int | Sequence[int] | None = None) -> Tensor:
        """The ``(1, prefix + H' * W', dim)`` embedding for ``grid_size`` (bicubic if resized)."""
        new = self.grid_size if grid_size is None else _grid2(grid_size, "grid_size")
        return resize_pos_embed(
            self.pos_embed, new, self.grid_size, num_prefix_tokens=self.num_prefix_tokens
        )

    def forward(self, x: Tensor, grid_size: int | Sequence[int] | None = None) -> Tensor:
        """Return ``x + embedding``; ``grid_size`` is the token grid of ``x`` if not the default."""
        pe = self.embedding(grid_size)
        if x.dim() != 3 or x.shape[1:] != pe.shape[1:]:
            raise ValueError(
                f"x must be (B, {pe.shape[1]}, {self.dim}) for grid_size "
                f"{grid_size or self.grid_size} with {self.num_prefix_tokens} prefix tokens, "
                f"got {tuple(x.shape)}"
            )
        return x + pe.to(x.dtype)

    @torch.no_grad()
    def resize_(self, grid_size: int | Sequence[int]) -> LearnedPositionEmbedding:
        """Resize the parameter in place to a new grid (e.g. before fine-tuning at a new size)."""
        new = _grid2(grid_size, "grid_size")
        self.pos_embed = nn.Parameter(self.embedding(new).detach().clone())
        self.grid_size = new
        return self

    def extra_repr(self) -> str:
        return (
            f"grid_size={self.grid_size}, dim={self.dim}, "
            f"num_prefix_tokens={self.num_prefix_tokens}"
        )


class SinusoidalPositionEmbedding(nn.Module):
    """Fixed sinusoidal encoding added to the tokens (Vaswani et al. 2017, Sec. 3.5).

    Args:
        dim: token width (even for 1D, a multiple of 4 for 2D).
        ndim: 1 (sequence) or 2 (row-major patch grid; half the channels per axis).
        base: wavelength base.

    ``forward(x, grid_size=None)``: ``x`` is ``(B, n, dim)``; for ``ndim=2`` give ``grid_size``
    ``(H, W)`` unless ``n`` is a perfect square.
    """

    def __init__(self, dim: int, ndim: int = 1, *, base: float = 10000.0) -> None:
        super().__init__()
        if ndim not in (1, 2):
            raise ValueError(f"ndim must be 1 or 2, got {ndim}")
        if dim <= 0 or dim % (2 * ndim):
            raise ValueError(f"dim must be a positive multiple of {2 * ndim}, got {dim}")
        self.dim, self.ndim, self.base = dim, ndim, base

    def embedding(
        self,
        n: int,
        grid_size: int | Sequence[int] | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> Tensor:
        """The ``(n, dim)`` encoding."""
        if self.ndim == 1:
            return sinusoidal_embedding_1d(n, self.dim, base=self.base, dtype=dtype, device=device)
        if grid_size is None:
            side = int(round(n**0.5))
            if side * side != n:
                raise ValueError(
                    f"grid_size is needed: {n} tokens do not form a square grid; pass (H, W)"
                )
            grid_size = (side, side)
        grid = _grid2(grid_size, "grid_size")
        if grid[0] * grid[1] != n:
            raise ValueError(f"grid_size {grid} does not match {n} tokens")
        return sinusoidal_embedding_2d(grid, self.dim, base=self.base, dtype=dtype, device=device)

    def forward(self, x: Tensor, grid_size: int | Sequence[int] | None = None) -> Tensor:
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must be (B, n, {self.dim}), got {tuple(x.shape)}")
        return x + self.embedding(x.shape[1], grid_size, dtype=x.dtype, device=x.device)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, ndim={self.ndim}, base={self.base}"
