"""Multi-head attention, permutation equivariance and a window mask (the encyclopedia article "Self-Attention", "Examples", second example).

Continues the two-squares example: four heads of width 4 (nlnet ``MultiheadSelfAttention`` built
from the article's ``X @ W`` matrices), a shuffle of the 64 patches, and a Swin-style mask with four
windows of 4x4 patches (``nlnet.functional.masks.window_mask``).
Run: ``python examples/self_attention/multi_head_window.py``.
"""

from __future__ import annotations

import torch
from _sa_data import GRID, QUERY, replay

from nlnet.functional.masks import window_mask
from nlnet.layers.attention import MultiheadSelfAttention

HEADS = 4
WINDOW = 4


def main(verbose: bool = True) -> dict:
    """Run the example; returns the printed values and the tensors behind them."""
    _, data = replay(2)
    x = data["X"]  # (64, 16)
    mhsa = MultiheadSelfAttention.from_projections(
        data["Wq"], data["Wk"], data["Wv"], data["Wo"], HEADS
    ).eval()
    n_params = sum(p.numel() for p in mhsa.parameters())
    with torch.no_grad():
        y, maps = mhsa(x, return_weights=True)  # (64, 16), (4, 64, 64)

        perm = data["perm"]
        y_perm = mhsa(x[perm])
        equivariant = bool(torch.allclose(y_perm, y[perm], rtol=0, atol=1e-12))

        mask = window_mask((GRID, GRID), WINDOW)  # (64, 64), True = same 4x4-patch window
        y_win, maps_win = mhsa(x, mask=mask, return_weights=True)
    outside = float(maps_win[:, QUERY, ~mask[QUERY]].sum())
    lines = [
        f"output {tuple(y.shape)} attention maps {tuple(maps.shape)} parameters {n_params}",
        f"f(X[perm]) == f(X)[perm]: {equivariant}",
        f"patch (0,1): attention mass outside its window: {outside}",
        f"score entries per head: global {mask.numel()} windowed {int(mask.sum())}",
    ]
    if verbose:
        print("\n".join(lines))
    return {
        "output_shape": tuple(y.shape),
        "maps_shape": tuple(maps.shape),
        "parameters": n_params,
        "equivariant": equivariant,
        "mass_outside": outside,
        "entries_global": mask.numel(),
        "entries_windowed": int(mask.sum()),
        "Y": y,
        "A": maps,
        "Y_win": y_win,
        "A_win": maps_win,
        "mask": mask,
        "module": mhsa,
        "lines": lines,
    }


if __name__ == "__main__":
    main()
