"""Checking against PyTorch (the encyclopedia article "Self-Attention", "Examples", fourth example).

The example's weights go into ``torch.nn.MultiheadAttention``; nlnet's ``MultiheadSelfAttention``
is built from that module's state dict and compared output by output and per-head map by map, with
and without the window mask. Head 0 with the window mask is recomputed by
``torch.nn.functional.scaled_dot_product_attention`` and compared with nlnet's reference path.
The boolean masks are opposite: True forbids a position in ``MultiheadAttention`` and allows it in
``scaled_dot_product_attention`` and nlnet (``nlnet.functional.attention.to_mha_mask`` converts).
Run: ``python examples/self_attention/pytorch_agreement.py``.

The article compares PyTorch with its NumPy code and prints differences at rounding level
(e.g. 3.1e-17); here the comparison is PyTorch vs nlnet, and the exact rounding-level digits depend
on the BLAS in use, so only their order of magnitude is reproducible.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from _sa_data import GRID, replay

from nlnet.functional.attention import scaled_dot_product_attention, to_mha_mask
from nlnet.functional.masks import window_mask
from nlnet.layers.attention import MultiheadSelfAttention

HEADS = 4


def main(verbose: bool = True) -> dict:
    """Print the agreement figures; returns them (max abs differences) and the printed lines."""
    _, data = replay(2)
    x = data["X"][None]  # batch of one image: (1, 64, 16)
    d = x.shape[-1]
    dk = d // HEADS
    wq, wk, wv, wo = data["Wq"], data["Wk"], data["Wv"], data["Wo"]

    mha = torch.nn.MultiheadAttention(d, HEADS, bias=False, batch_first=True).double().eval()
    with torch.no_grad():  # PyTorch computes x @ W.T, so load the transposes
        mha.in_proj_weight.copy_(torch.cat([wq.T, wk.T, wv.T]))
        mha.out_proj.weight.copy_(wo.T)
    ours = MultiheadSelfAttention.from_torch(mha).eval()  # via the state dict
    mask = window_mask((GRID, GRID), 4)  # nlnet: True = may attend

    with torch.no_grad():
        y_t, a_t = mha(x, x, x, average_attn_weights=False)
        y_n, a_n = ours(x, return_weights=True)
        y_tw, _ = mha(x, x, x, attn_mask=to_mha_mask(mask))  # MultiheadAttention: True blocks
        y_nw = ours(x, mask=mask)  # fast path (F.scaled_dot_product_attention)
        q, k, v = (x @ w[:, :dk] for w in (wq, wk, wv))  # head 0
        y_sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y_h0 = scaled_dot_product_attention(q, k, v, mask, impl="reference")

    diffs = {
        "output": float((y_t - y_n).abs().max()),
        "maps": float((a_t - a_n).abs().max()),
        "windowed": float((y_tw - y_nw).abs().max()),
        "sdpa_head0": float((y_sdpa - y_h0).abs().max()),
    }
    n_params = sum(p.numel() for p in mha.parameters())
    n_params_ours = sum(p.numel() for p in ours.parameters())
    lines = [
        f"torch {torch.__version__}",
        f"MultiheadAttention vs nlnet, output:   {diffs['output']:.1e}",
        f"MultiheadAttention vs nlnet, maps:     {diffs['maps']:.1e}",
        f"windowed MultiheadAttention vs nlnet:  {diffs['windowed']:.1e}",
        f"windowed SDPA (head 0) vs nlnet:       {diffs['sdpa_head0']:.1e}",
        f"parameters: {n_params}",
    ]
    if verbose:
        print("\n".join(lines))
    return {**diffs, "parameters": n_params, "parameters_nlnet": n_params_ours, "lines": lines}


if __name__ == "__main__":
    main()
