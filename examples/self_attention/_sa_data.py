"""Shared data of the self-attention worked examples (the encyclopedia article "Self-Attention", "Examples").

The article draws every random number from ``numpy.random.default_rng(0)`` in one fixed order and
its later examples "continue" the earlier ones. The helpers below replay that order exactly, so each
example script can run on its own: random numbers and the QR factorisation come from NumPy, all
attention computations run in nlnet on float64 torch tensors.
"""

from __future__ import annotations

import numpy as np
import torch

from nlnet.functional.windows import window_partition

SEED = 0
GRID = 8  # the 32x32 image is an 8x8 grid of patches
PATCH = 4  # 4x4 pixels per patch
QUERY = 1  # patch (row 0, col 1): top edge of the first square


def new_rng() -> np.random.Generator:
    """The article's generator, ``default_rng(0)``."""
    return np.random.default_rng(SEED)


def to_torch(a: np.ndarray) -> torch.Tensor:
    """NumPy array -> float64 torch tensor (a copy)."""
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)).clone()


def two_squares_image(rng: np.random.Generator) -> np.ndarray:
    """32x32 image with two bright squares and light noise (draw 1: 32*32 normals)."""
    img = np.zeros((32, 32))
    img[2:14, 2:14] = 1.0
    img[18:30, 18:30] = 1.0
    img += 0.05 * rng.standard_normal(img.shape)
    return img


def patch_tokens(img: np.ndarray, patch: int = PATCH) -> torch.Tensor:
    """Cut the image into patches with nlnet's window partition; remove each patch's mean.

    Returns:
        ``(64, 16)`` float64 tokens, patches in raster order, pixels in raster order.
    """
    x = to_torch(img)[None, :, :, None]  # (1, 32, 32, 1) channels-last grid
    tokens = window_partition(x, patch)[..., 0]  # (64, 16)
    return tokens - tokens.mean(dim=1, keepdim=True)


def tied_projections(rng: np.random.Generator, d: int, s: float = 2.0):
    """``W_Q = W_K = s R`` with ``R`` orthogonal, and a random ``W_V`` (draws 2 and 3)."""
    r, _ = np.linalg.qr(rng.standard_normal((d, d)))
    w_v = rng.standard_normal((d, d)) / np.sqrt(d)
    return to_torch(s * r), to_torch(w_v)


def head_projections(rng: np.random.Generator, d: int):
    """``W_Q, W_K, W_V, W_O`` of the multi-head example, ``x @ W`` convention (draws 4 to 7)."""
    return tuple(to_torch(rng.standard_normal((d, d)) / np.sqrt(d)) for _ in range(4))


def stage1(rng: np.random.Generator) -> dict:
    """Example 1's data: image, tokens ``X`` and the tied projections."""
    img = two_squares_image(rng)
    x = patch_tokens(img)
    w_qk, w_v = tied_projections(rng, x.shape[1])
    return {"img": img, "X": x, "W_qk": w_qk, "W_v": w_v}


def stage2(rng: np.random.Generator, d: int) -> dict:
    """Example 2's draws: the four head projections, then the permutation of the 64 patches."""
    wq, wk, wv, wo = head_projections(rng, d)
    perm = torch.from_numpy(rng.permutation(GRID * GRID))
    return {"Wq": wq, "Wk": wk, "Wv": wv, "Wo": wo, "perm": perm}


def replay(stages: int) -> tuple[np.random.Generator, dict]:
    """A fresh ``default_rng(0)`` advanced through the first ``stages`` examples' draws."""
    rng = new_rng()
    data: dict = {}
    if stages >= 1:
        data.update(stage1(rng))
    if stages >= 2:
        data.update(stage2(rng, data["X"].shape[1]))
    return rng, data
