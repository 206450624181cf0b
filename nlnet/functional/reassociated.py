"""The non-local block's explicit path with its 1x1 projections re-associated (exact algebra).

The block computes ``W_z y`` with ``y = A g`` (Eq. 1, ``A`` the ``N x N'`` matrix of ``f / C``) and
the logits ``theta_i^T phi_j`` of Eqs. 3-4 with ``theta = W_theta x + b_theta`` (Sec. 3.2 and
Eq. 6, Wang et al., CVPR 2018, arXiv 1711.07971). Both products can be taken in the other order:

* **value side** (every ``A``): ``W_z (sum_j A_ij g_j) = sum_j A_ij (W_z g_j)`` by linearity, so
  ``G' = W_z g`` is computed on the pooled grid (``N' d_v C`` multiply-adds) and then ``A G'``
  (``N N' C``), instead of ``A g`` (``N N' d_v``) and then ``W_z y`` on the full grid
  (``N d_v C``). It holds for any matrix ``A`` (masked rows, rows with no allowed key, the ``1/N'``
  of ``dot_product``) and for ``g``'s bias (part of ``g``); ``W_z``'s own bias is added after;
* **query side** (``embedded_gaussian``, ``dot_product``): ``theta_i^T phi_j =
  x_i^T (W_theta^T phi_j) + b_theta^T phi_j``, so ``K' = W_theta^T phi`` (``N' d C``) and the
  per-key term ``c_j = b_theta^T phi_j`` give the logits as ``x_i^T K'_j + c_j`` (``N N' C``)
  instead of ``theta`` (``N C d``) and ``theta phi^T`` (``N N' d``).

Each side is cheaper exactly when its count is smaller (:func:`reassociation_plan`): for the value
side ``N' d_v C + N N' C < N N' d_v + N d_v C``, i.e. ``N N' (C - d_v) < d_v C (N - N')``; the
query side is the same with ``d``. With the default bottleneck ``d = d_v = C/2`` both read
``N N' < C (N - N')``; with the paper's pooled keys (``N' = N/4``) that is ``N' < 3C/4``: at
``C = 512`` the 14x14 and 28x28 maps (N' = 49, 196) gain, 56x56 (N' = 784) does not. Only
positions with keys on a pooled grid (``N' < N``) can gain.

Exact up to floating-point round-off (``tests/functional/test_reassociated.py`` compares it with
the textbook order in float64, values and gradients).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from nlnet.functional.instantiations import FORMS, form
from nlnet.functional.nonlocal_op import logit_scale

#: Instantiations whose logits are ``theta_i^T phi_j`` (the query side applies).
BILINEAR_FORMS: tuple[str, ...] = tuple(n for n, f in FORMS.items() if f.query_side)
#: Instantiations this module evaluates (``concatenation`` keeps its own paths).
REASSOCIATED_FORMS: tuple[str, ...] = tuple(n for n, f in FORMS.items() if f.value_side)


def reassociation_plan(
    instantiation: str, n: int, n_keys: int, c: int, d: int, d_v: int
) -> tuple[bool, bool]:
    """Whether moving ``W_theta`` to the keys and ``W_z`` to the values saves multiply-adds.

    A pure function of the sizes (see the module docstring for the counts).

    Args:
        instantiation: One of the instantiations of Sec. 3.2.
        n: Query positions N.
        n_keys: Key/value positions N'.
        c: Input (and output) channels C.
        d: Query/key width (the bottleneck of ``theta`` and ``phi``).
        d_v: Value width (the bottleneck of ``g``).

    Returns:
        ``(query_side, value_side)``.
    """
    query = form(instantiation).query_side and n_keys * d * c + n * n_keys * c < n * c * d + (
        n * n_keys * d
    )
    value = n_keys * d_v * c + n * n_keys * c < n * n_keys * d_v + n * d_v * c
    return query, value


def block_macs(
    instantiation: str, n: int, n_keys: int, c: int, d: int, d_v: int, plan: tuple[bool, bool]
) -> int:
    """Multiply-adds of ``theta``, the pairwise products and ``W_z`` (per sample) on the explicit
    matrix in the association ``plan``; ``phi`` and ``g`` cost the same in every order."""
    query, value = plan
    if query:
        macs = n_keys * d * c + n * n_keys * c
    else:
        macs = (n * c * d if form(instantiation).embedded else 0) + n * n_keys * d
    if value:
        return macs + n_keys * d_v * c + n * n_keys * c
    return macs + n * n_keys * d_v + n * d_v * c


def associativity_macs(n: int, n_keys: int, c: int, d: int, d_v: int) -> int:
    """The same count for ``dot_product``'s fast path ``theta (phi^T g) / N'`` and ``W_z``."""
    return n * c * d + n_keys * d * d_v + n * d * d_v + n * d_v * c


def pointwise(t: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """A 1x1 convolution on a channel-first token map ``(B, C_in, N) -> (B, C_out, N)``."""
    return F.conv1d(t, weight.reshape(weight.shape[0], -1, 1), bias)


def reassociated_non_local(
    x: Tensor,
    phi: Tensor,
    g: Tensor,
    w_theta: Tensor | None,
    b_theta: Tensor | None,
    w_z: Tensor,
    b_z: Tensor | None,
    instantiation: str = "embedded_gaussian",
    *,
    scale: bool | float = True,
    plan: tuple[bool, bool] | None = None,
) -> Tensor:
    """``W_z y`` of a non-local block on the explicit ``N x N'`` matrix, channel-first.

    Args:
        x: The block input as channel-first tokens ``(B, C, N)`` (``x.flatten(2)``).
        phi: Keys channel-first ``(B, d, N')``: ``phi(x_hat)``, or ``x_hat`` for ``gaussian``.
        g: Values channel-first ``(B, d_v, N')``: ``g(x_hat)`` with its bias.
        w_theta: ``theta``'s weight ``(d, C[, 1...])``; ``None`` for ``gaussian`` (f on x).
        b_theta: ``theta``'s bias ``(d,)`` or ``None``.
        w_z: ``W_z``'s weight ``(C, d_v[, 1...])``.
        b_z: ``W_z``'s bias ``(C,)`` or ``None``.
        instantiation: ``"gaussian"``, ``"embedded_gaussian"`` or ``"dot_product"``.
        scale: Logit scale of the softmax forms (as in :func:`nlnet.functional.non_local`); the
            factor follows the embedding width ``d``, whichever side the product is taken on.
        plan: ``(query_side, value_side)``; default :func:`reassociation_plan` for the sizes.

    Returns:
        ``W_z y + b_z`` of shape ``(B, C, N)``.
    """
    if not form(instantiation).value_side:
        raise ValueError(
            f"instantiation must be one of {REASSOCIATED_FORMS}, got {instantiation!r}"
        )
    c, n, (d, n_keys), d_v = x.shape[1], x.shape[2], phi.shape[1:], g.shape[1]
    if plan is None:
        plan = reassociation_plan(instantiation, n, n_keys, c, d, d_v)
    query_side, value_side = plan
    if w_theta is None:
        query_side = False  # gaussian: theta is x itself
    dt = torch.promote_types(x.dtype, torch.float32)  # logits and softmax in at least fp32
    if query_side:  # x_i^T (W_theta^T phi_j) + b_theta^T phi_j
        w = w_theta.reshape(d, c)
        keys = pointwise(phi, w.t())  # (B, C, N')
        queries = x
        key_term = None if b_theta is None else pointwise(phi, b_theta.view(1, d))  # (B, 1, N')
    else:
        queries = x if w_theta is None else pointwise(x, w_theta, b_theta)  # (B, d, N)
        keys, key_term = phi, None
    softmax = form(instantiation).softmax
    s = logit_scale(scale, d) if softmax else 1.0 / max(n_keys, 1)
    q, k = queries.transpose(1, 2).to(dt), keys.to(dt)  # (B, N, C or d), (B, C or d, N')
    if key_term is not None:  # s (q k + c_j): one fused call, c broadcast over the queries
        logits = torch.baddbmm(key_term.to(dt), q, k, beta=s, alpha=s)
    elif k.shape[-1] > q.shape[-1]:  # scale the smaller of the queries and the logits
        logits = torch.bmm(q * s, k)
    else:
        logits = torch.bmm(q, k) * s
    weights = logits.softmax(dim=-1) if softmax else logits
    weights = weights.to(g.dtype)  # (B, N, N')
    if value_side:  # sum_j A_ij (W_z g_j): W_z on the pooled grid, then A (then b_z)
        g_z = pointwise(g, w_z)  # (B, C, N')
        if b_z is None:
            return torch.bmm(g_z, weights.transpose(1, 2))  # (B, C, N)
        return torch.baddbmm(b_z.unsqueeze(-1), g_z, weights.transpose(1, 2))
    y = torch.bmm(g, weights.transpose(1, 2))  # (B, d_v, N): y stored channel-first
    return pointwise(y, w_z, b_z)
