"""The effect of sqrt(d_k) on scikit-learn digits (the encyclopedia article "Self-Attention",
"Examples", third example).

Tokens are the sixteen 2x2 patches of 300 8x8 digit images (standardised per pixel), randomly
projected to queries and keys with roughly unit-variance entries. For each ``d_k`` the script
reports the spread of the raw scores, the mean largest weight and the mean softmax-Jacobian norm,
unscaled and scaled by ``1/sqrt(d_k)``. Uses the digits bundled with scikit-learn (no download).
Run: ``python examples/self_attention/sqrt_dk_digits.py``.
"""

from __future__ import annotations

from _sa_data import replay, to_torch
from sklearn.datasets import load_digits

from nlnet.functional.attention import attention_scores, masked_softmax, softmax_jacobian_norm
from nlnet.functional.windows import window_partition

DKS = (4, 16, 64, 256, 1024)
N_IMAGES = 300


def digit_tokens(n_images: int = N_IMAGES):
    """``(n, 16, 4)`` tokens: 2x2 patches (nlnet window partition), standardised per pixel."""
    imgs = to_torch(load_digits().images[:n_images])[..., None]  # (n, 8, 8, 1)
    t = window_partition(imgs, 2)[..., 0].reshape(n_images, 16, 4)
    return (t - t.mean(dim=(0, 1))) / t.std(dim=(0, 1), correction=0)


def main(verbose: bool = True) -> dict:
    """Print the table; returns ``rows`` of (d_k, logit std, max raw, max scaled, Jacobian raw,
    Jacobian scaled) as floats, and the printed ``lines``."""
    rng, _ = replay(2)  # continue after the first two examples' draws
    t = digit_tokens()
    header = " d_k  logit std  max weight (raw / scaled)  Jacobian norm (raw / scaled)"
    lines, rows = [header], []
    for dk in DKS:
        g_q, g_k = (to_torch(rng.standard_normal((N_IMAGES, 4, dk)) / 2.0) for _ in range(2))
        q, k = t @ g_q, t @ g_k  # (300, 16, d_k), entries of roughly unit variance
        s = attention_scores(q, k, scale=1.0)  # (300, 16, 16) raw logits
        p_raw = masked_softmax(s)
        p_scl = masked_softmax(attention_scores(q, k))  # default scale 1/sqrt(d_k)
        row = (
            dk,
            float(s.std(correction=0)),
            float(p_raw.amax(-1).mean()),
            float(p_scl.amax(-1).mean()),
            float(softmax_jacobian_norm(p_raw).mean()),
            float(softmax_jacobian_norm(p_scl).mean()),
        )
        rows.append(row)
        lines.append(
            f"{dk:5d} {row[1]:9.1f}      {row[2]:.2f} / {row[3]:.2f}"
            f"                {row[4]:.3f} / {row[5]:.3f}"
        )
    if verbose:
        print("\n".join(lines))
    return {"rows": rows, "lines": lines}


if __name__ == "__main__":
    main()
