"""Attention over image patches: two bright squares (the encyclopedia article "Self-Attention",
"Examples", first example).

A 32x32 image of two squares is cut into an 8x8 grid of 4x4 patches (64 tokens of 16 pixels, mean
removed). With ``W_Q = W_K = 2R`` (``R`` orthogonal) the scaled scores equal the patches' own dot
products, so the attention map of patch (0, 1), on the top edge of the first square, is readable
without training. Run: ``python examples/self_attention/patch_attention.py``.
"""

from __future__ import annotations

import numpy as np
import torch
from _sa_data import GRID, QUERY, replay

from nlnet.functional.attention import scaled_dot_product_attention


def main(verbose: bool = True) -> dict:
    """Compute and print the attention map of patch (0, 1).

    Returns:
        ``map`` (8x8 NumPy weights of the query), ``top`` (six most attended patches as
        (row, col)), ``edge_weight`` (weight on the second square's top edge, cols 5-6 of row 4,
        rounded to 3 decimals), ``weights`` (64x64 torch map), ``lines`` (printed text).
    """
    _, data = replay(1)
    x, w_qk, w_v = data["X"], data["W_qk"], data["W_v"]
    q, k, v = x @ w_qk, x @ w_qk, x @ w_v  # (64, 16) each
    _, weights = scaled_dot_product_attention(q, k, v, return_weights=True)  # (64, 64)

    row = weights[QUERY]
    grid_map = row.reshape(GRID, GRID).numpy()
    top = [divmod(int(j), GRID) for j in torch.topk(row, 6).indices]
    edge = round(float(row[4 * GRID + 5] + row[4 * GRID + 6]), 3)
    lines = [
        "attention of patch (0,1) over the 8x8 patch grid:",
        np.array2string(grid_map, precision=2, suppress_small=True),
        f"top patches: {top}",
        f"weight on the second square's top edge (row 4, cols 5-6): {edge}",
    ]
    if verbose:
        print("\n".join(lines))
    return {"map": grid_map, "top": top, "edge_weight": edge, "weights": weights, "lines": lines}


if __name__ == "__main__":
    main()
