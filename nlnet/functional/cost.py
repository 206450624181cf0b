"""Closed-form cost of self-attention (the encyclopedia article "Self-Attention", "Cost" and
"Windowed attention").

* Global multi-head self-attention on an ``h x w`` patch grid with ``C`` channels:
  ``4 h w C^2 + 2 (h w)^2 C`` multiply-adds (Liu et al. 2021, Eq. 1).
* Window attention with ``M x M`` windows: ``4 h w C^2 + 2 M^2 h w C`` (Liu et al. 2021, Eq. 2).
* The score matrix ``Q K^T`` has ``n^2`` entries per head (``n M^2`` with windows).
* The four projections hold ``4 d^2`` weights, ``4 d^2 + 4 d`` with biases.

These are formulas, not measurements; the FLOP counter of :mod:`nlnet.analysis` counts real models.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = [
    "num_tokens",
    "score_entries",
    "score_memory_bytes",
    "window_score_entries",
    "global_attention_macs",
    "window_attention_macs",
    "projection_params",
]


def _pair(v: int | Sequence[int], name: str) -> tuple[int, int]:
    out = (v, v) if isinstance(v, int) else tuple(int(x) for x in v)
    if len(out) != 2 or min(out) < 1:
        raise ValueError(f"{name} must be a positive int or (h, w), got {v!r}")
    return out


def num_tokens(image_size: int | Sequence[int], patch_size: int | Sequence[int]) -> int:
    """Tokens of an image cut into non-overlapping patches: ``(H/P) * (W/P)``.

    Sequence length is inversely proportional to the square of the patch size (seed, "Cost").
    """
    (ih, iw), (ph, pw) = _pair(image_size, "image_size"), _pair(patch_size, "patch_size")
    if ih % ph or iw % pw:
        raise ValueError(f"image_size {image_size!r} is not divisible by patch_size {patch_size!r}")
    return (ih // ph) * (iw // pw)


def score_entries(n: int, num_heads: int = 1) -> int:
    """Entries of the ``n x n`` score matrices of ``num_heads`` heads (per layer)."""
    if n < 0 or num_heads < 1:
        raise ValueError(f"n must be >= 0 and num_heads >= 1, got n={n}, num_heads={num_heads}")
    return n * n * num_heads


def score_memory_bytes(n: int, num_heads: int = 1, dtype: torch.dtype | int = torch.float32) -> int:
    """Memory of the stored score matrices: ``n^2 * heads * bytes per element``.

    Args:
        n: tokens.
        num_heads: heads.
        dtype: a torch dtype or a number of bytes per element (fp32 = 4).
    """
    nbytes = dtype if isinstance(dtype, int) else torch.empty((), dtype=dtype).element_size()
    return score_entries(n, num_heads) * nbytes


def window_score_entries(
    grid_size: int | Sequence[int], window_size: int | Sequence[int], num_heads: int = 1
) -> int:
    """Score entries of window attention: every token scores the ``M^2`` tokens of its window."""
    h, w = _pair(grid_size, "grid_size")
    mh, mw = _pair(window_size, "window_size")
    if h % mh or w % mw:
        raise ValueError(
            f"grid_size {grid_size!r} must be divisible by window_size {window_size!r}"
        )
    return h * w * mh * mw * num_heads


def global_attention_macs(h: int, w: int, channels: int) -> int:
    """Multiply-adds of global MSA on an ``h x w`` grid: ``4 h w C^2 + 2 (h w)^2 C``."""
    hw = h * w
    return 4 * hw * channels**2 + 2 * hw**2 * channels


def window_attention_macs(h: int, w: int, channels: int, window_size: int = 7) -> int:
    """Multiply-adds of window MSA (``M x M`` windows): ``4 h w C^2 + 2 M^2 h w C``."""
    hw = h * w
    return 4 * hw * channels**2 + 2 * window_size**2 * hw * channels


def projection_params(d: int, bias: bool = False) -> int:
    """Weights of the Q, K, V and output projections: ``4 d^2`` (``+ 4 d`` biases).

    Independent of the number of heads when ``d_k = d_v = d / h`` (seed, "Multi-head attention").
    """
    if d < 1:
        raise ValueError(f"d must be positive, got {d}")
    return 4 * d * d + (4 * d if bias else 0)
