"""The evaluation paths of the non-local block, as functions over explicit weights.

The block ``z = norm(W_z y) + x`` (Wang et al., CVPR 2018, arXiv 1711.07971, Eq. 6, Figure 2)
computes y of Eq. 1 from the 1x1(x1) projections ``theta``, ``phi``, ``g`` (Sec. 3.3) in one of
the ways that :func:`nlnet.functional.plan.plan_non_local` picks: the explicit reference path with
the ``N x N'`` matrix (masked for the 3D modes of Table 2d and for temporal groups), the token fast
path, the grouped ``space``/``time`` path, the Eq. 5 concatenation scores, the re-associated
projections, and the empty grid. Each path here is a function of the input, the weights
(:class:`BlockWeights`) and the block's static structure (:class:`BlockGeometry`); the module
:class:`nlnet.layers.NonLocalNd` owns the parameters and the norm and calls them.

Position (optional, :func:`nlnet.functional.pos_embed.sinusoidal_grid_encoding`): every path takes ``xq``, the input
of ``theta`` and ``phi`` (``x`` plus a position encoding); ``g`` always reads ``x``. ``xq=None``
means ``x`` itself, the paper's block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from nlnet.functional.instantiations import Form, form
from nlnet.functional.nonlocal_op import concatenation_non_local, non_local
from nlnet.functional.pooling import max_pool
from nlnet.functional.reassociated import reassociated_non_local

__all__ = [
    "BlockGeometry",
    "BlockWeights",
    "cell_index",
    "concatenation_scores_path",
    "embed",
    "empty_grid_path",
    "fast_path",
    "fold_batchnorm",
    "group_mask",
    "non_finite_sample_guard",
    "reassociated_path",
    "reference_path",
    "tokens",
]

# torch.fx.symbolic_trace records these as single calls evaluated at run time (they read sizes
# and pick paths by size), so a traced block keeps its size-dependent choices.
torch.fx.wrap("non_local")
torch.fx.wrap("concatenation_non_local")
torch.fx.wrap("max_pool")

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


@dataclass(frozen=True)
class BlockGeometry:
    """The static structure of a block: what its paths need besides the weights.

    Attributes:
        dim: grid dimensions (1, 2 or 3).
        in_channels: C.
        inter_channels: the bottleneck width d = d_v (Sec. 3.3).
        instantiation: one of :data:`~nlnet.functional.instantiations.INSTANTIATIONS`.
        kernel: the key/value max-pooling kernel, one entry per grid axis.
        pool_position: ``"before"`` or ``"after"`` the ``phi``/``g`` projections.
        mode: ``"spacetime"``, ``"space"`` or ``"time"`` (Table 2d).
        temporal_groups: attention within groups of this many frames, or ``None``.
        scale: the logit scale of the softmax forms.
        impl: the block's ``impl``.
    """

    dim: int
    in_channels: int
    inter_channels: int
    instantiation: str
    kernel: tuple[int, ...]
    pool_position: str = "before"
    mode: str = "spacetime"
    temporal_groups: int | None = None
    scale: bool | float = True
    impl: str = "auto"

    @property
    def form(self) -> Form:
        return form(self.instantiation)

    @property
    def subsampled(self) -> bool:
        return any(k > 1 for k in self.kernel)

    @property
    def pool_before(self) -> bool:
        return self.subsampled and self.pool_position == "before"

    @property
    def pool_after(self) -> bool:
        return self.subsampled and self.pool_position == "after"


class BlockWeights(NamedTuple):
    """The weights of the projections: ``(C_out, C_in, 1, ...)`` kernels and ``(C_out,)`` biases
    (``theta``/``phi`` are ``None`` for the forms on ``x`` itself; ``w_f`` for Eq. 5 only)."""

    g_w: Tensor
    g_b: Tensor | None
    theta_w: Tensor | None = None
    theta_b: Tensor | None = None
    phi_w: Tensor | None = None
    phi_b: Tensor | None = None
    w_f: Tensor | None = None


def conv(t: Tensor, weight: Tensor, bias: Tensor | None, dim: int) -> Tensor:
    """The 1x1(x1) convolution of a ``dim``-D channel-first map (what ``nn.Conv{dim}d``
    computes)."""
    return _CONV[dim](t, weight, bias)


def tokens(t: Tensor) -> Tensor:
    """``(B, D, *grid) -> (B, N, D)``: the token view of a channel-first map (no copy)."""
    return t.flatten(2).transpose(1, 2)


def cell_index(x: Tensor, axis: int, k: int) -> Tensor:
    """Pooled cell of each position of ``x`` along ``axis`` (floor pooling: remainder -> last)."""
    size = x.shape[axis]
    return (torch.arange(size, device=x.device) // k).clamp_max(max(size // k, 1) - 1)


def group_mask(
    x: Tensor, mode: str, kernel: tuple[int, ...], temporal_groups: int | None
) -> Tensor:
    """Boolean (N, N') mask of the pairs allowed by ``mode`` and ``temporal_groups`` (3D)."""
    size = tuple(x.shape[2:])
    key_size = tuple(s // k for s, k in zip(size, kernel))

    def coords(shape):  # (3, prod(shape)): t, h, w of each position, row-major
        grids = torch.meshgrid(*(torch.arange(s, device=x.device) for s in shape), indexing="ij")
        return torch.stack(grids).reshape(3, -1)

    q, kk = coords(size), coords(key_size)
    allowed = torch.ones(q.shape[1], kk.shape[1], dtype=torch.bool, device=x.device)
    if mode == "space":
        cell_t = cell_index(x, 2, kernel[0])
        allowed &= cell_t[q[0]].unsqueeze(1) == kk[0].unsqueeze(0)
    elif mode == "time":
        cell_h, cell_w = cell_index(x, 3, kernel[1]), cell_index(x, 4, kernel[2])
        allowed &= cell_h[q[1]].unsqueeze(1) == kk[1].unsqueeze(0)
        allowed &= cell_w[q[2]].unsqueeze(1) == kk[2].unsqueeze(0)
    if temporal_groups is not None:
        # a pooled key frame t' covers frames t' k_t .. t' k_t + k_t - 1, all in one group
        group_q = q[0] // temporal_groups
        group_k = (kk[0] * kernel[0]) // temporal_groups
        allowed &= group_q.unsqueeze(1) == group_k.unsqueeze(0)
    return allowed


torch.fx.wrap("cell_index")
torch.fx.wrap("group_mask")


def non_finite_sample_guard(x: Tensor) -> Tensor:
    """``(B, 1, 1)``: 0 for a sample whose input is finite, NaN for one with a NaN/inf in it."""
    dt = torch.promote_types(x.dtype, torch.float32)
    return (x.flatten(1).sum(1, dtype=dt) * 0).view(-1, 1, 1)


def fold_batchnorm(
    w_z: Tensor, b_z: Tensor | None, mean: Tensor, var: Tensor, eps: float,
    gamma: Tensor | None, beta: Tensor | None,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """``(weight (C, d_v), bias (C,))`` of ``BN(W_z y)`` for a BatchNorm in eval mode.

    In eval mode BatchNorm is the per-channel affine map ``s (v - mu) + beta`` with
    ``s = gamma / sqrt(var + eps)`` from its running statistics, so ``BN(W_z y) =
    (s W_z) y + (beta - s mu + s b_z)``: one pass over the ``C x N`` output fewer, exact up to
    round-off; the parameters themselves are not changed (gradients reach them through the
    product).
    """
    s = torch.rsqrt(var + eps)  # (C,)
    if gamma is not None:
        s = s * gamma
    shift = -mean * s
    if beta is not None:
        shift = shift + beta
    if b_z is not None:
        shift = shift + s * b_z
    return w_z.flatten(1) * s.unsqueeze(1), shift


def embed(
    x: Tensor, w: BlockWeights, geo: BlockGeometry, xq: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """theta (B, N, d), phi (B, N', d) and g (B, N', d_v) from x ``(B, C, *grid)``.

    The 1x1 convolutions run on the channel-first map and the results are handed on as token
    views: nothing is copied, and autograd keeps the convolutions' own (cheap) backward.
    ``xq`` (default ``x``) is the input of ``theta`` and ``phi``.
    """
    x_hat = max_pool(x, geo.kernel) if geo.pool_before else x  # (B, C, *key_grid) or x
    g = conv(x_hat, w.g_w, w.g_b, geo.dim)  # (B, d, *grid of x_hat)
    if xq is None:
        xq, xq_hat = x, x_hat
    else:
        xq_hat = max_pool(xq, geo.kernel) if geo.pool_before else xq
    if not geo.form.embedded:  # f on x itself (in the projections' dtype under autocast)
        theta, phi = xq.to(g.dtype), xq_hat.to(g.dtype)
    else:
        theta, phi = (
            conv(xq, w.theta_w, w.theta_b, geo.dim),
            conv(xq_hat, w.phi_w, w.phi_b, geo.dim),
        )
    if geo.pool_after:  # pool the outputs of phi and g
        phi, g = max_pool(phi, geo.kernel), max_pool(g, geo.kernel)
    return tokens(theta), tokens(phi), tokens(g)


def grouped_path(
    theta: Tensor, phi: Tensor, g: Tensor, x: Tensor, w_f: Tensor | None, geo: BlockGeometry,
    impl: str,
) -> Tensor:  # fmt: skip
    """Fast ``space``/``time`` modes: attention inside groups, as batched token sets."""
    B, T, H, W = x.shape[0], x.shape[2], x.shape[3], x.shape[4]
    kt, kh, kw = geo.kernel
    Tk, Hk, Wk = T // kt, H // kh, W // kw
    dq = geo.inter_channels if geo.form.embedded else geo.in_channels
    dv = geo.inter_channels
    phi5 = phi.reshape(B, Tk, Hk, Wk, dq)
    g5 = g.reshape(B, Tk, Hk, Wk, dv)
    kw_ = {"scale": geo.scale, "w_f": w_f, "impl": impl, "nan_guard": False}
    if geo.mode == "space":
        if kt > 1:  # keys of the pooled frame containing each query frame
            cell_t = cell_index(x, 2, kt)
            phi5, g5 = phi5.index_select(1, cell_t), g5.index_select(1, cell_t)
        y = non_local(
            theta.reshape(B * T, H * W, dq),
            phi5.reshape(B * T, Hk * Wk, dq),
            g5.reshape(B * T, Hk * Wk, dv),
            geo.instantiation,
            **kw_,
        )
        return y.reshape(B, T * H * W, dv)
    # time: keys at the pooled spatial cell containing each query position
    if kh > 1:
        cell_h = cell_index(x, 3, kh)
        phi5, g5 = phi5.index_select(2, cell_h), g5.index_select(2, cell_h)
    if kw > 1:
        cell_w = cell_index(x, 4, kw)
        phi5, g5 = phi5.index_select(3, cell_w), g5.index_select(3, cell_w)
    q = theta.reshape(B, T, H, W, dq).permute(0, 2, 3, 1, 4).reshape(B * H * W, T, dq)
    k = phi5.permute(0, 2, 3, 1, 4).reshape(B * H * W, Tk, dq)
    v = g5.permute(0, 2, 3, 1, 4).reshape(B * H * W, Tk, dv)
    y = non_local(q, k, v, geo.instantiation, **kw_)  # (B*H*W, T, dv)
    return y.reshape(B, H, W, T, dv).permute(0, 3, 1, 2, 4).reshape(B, T * H * W, dv)


def concatenation_scores_path(
    x: Tensor, w: BlockWeights, geo: BlockGeometry, impl: str, xq: Tensor | None = None
) -> Tensor:
    """Eq. 5 fast path: theta and phi are only ever seen through ``a = w_theta^T theta(x)``
    and ``b = w_phi^T phi(x_hat)``, so fold ``w_f`` into the embeddings:
    ``a = (W_theta^T w_theta)^T x + b_theta^T w_theta`` (one C-vector instead of a C x d
    projection), likewise ``b``. Exact; saves two of the four 1x1 convolutions.
    """
    d = geo.inter_channels
    w_theta, w_phi = w.w_f[:d], w.w_f[d:]
    u_theta = w.theta_w.flatten(1).t() @ w_theta  # (C,)
    u_phi = w.phi_w.flatten(1).t() @ w_phi  # (C,)
    x_hat = max_pool(x, geo.kernel) if geo.subsampled else x
    if xq is None:
        xq, xq_hat = x, x_hat
    else:
        xq_hat = max_pool(xq, geo.kernel) if geo.subsampled else xq
    a = torch.matmul(u_theta, xq.flatten(2))  # (B, N)
    b = torch.matmul(u_phi, xq_hat.flatten(2))  # (B, N')
    if w.theta_b is not None:
        a = a + w.theta_b @ w_theta
        b = b + w.phi_b @ w_phi
    g = tokens(conv(x_hat, w.g_w, w.g_b, geo.dim))  # (B, N', d)
    return concatenation_non_local(a, b, g, impl=impl)


def reference_path(
    x: Tensor, w: BlockWeights, geo: BlockGeometry, return_attention: bool,
    xq: Tensor | None = None, bias: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:  # fmt: skip
    """The explicit path: embeddings, the N x N' matrix (masked for modes/groups), y.

    ``bias`` ``(N, N')`` (softmax forms) is added to the scaled logits (a relative position
    bias); pairs outside the query's group stay excluded."""
    theta, phi, g = embed(x, w, geo, xq)
    mask = None
    if geo.mode != "spacetime" or geo.temporal_groups is not None:
        mask = group_mask(x, geo.mode, geo.kernel, geo.temporal_groups)
    if bias is not None:
        mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
    out = non_local(
        theta, phi, g, geo.instantiation, scale=geo.scale, w_f=w.w_f, mask=mask,
        return_attention=return_attention, impl="reference", nan_guard=False,
    )  # fmt: skip
    return out if return_attention else (out, None)


def fast_path(
    x: Tensor, w: BlockWeights, geo: BlockGeometry, path: str, op_impl: str,
    xq: Tensor | None = None,
) -> Tensor:  # fmt: skip
    """y ``(B, N, d_v)`` on the ``tokens``/``scores``/``grouped`` paths of
    :class:`~nlnet.functional.plan.NonLocalPlan` (temporal groups folded into the batch)."""
    tg = geo.temporal_groups
    if tg is not None:  # (B, C, T, H, W) -> (B * T/k, C, k, H, W): groups as samples
        B, T, H, W = x.shape[0], x.shape[2], x.shape[3], x.shape[4]

        def fold(t: Tensor) -> Tensor:
            c = t.shape[1]
            return t.reshape(B, c, T // tg, tg, H, W).transpose(1, 2).reshape(-1, c, tg, H, W)

        x = fold(x)
        xq = None if xq is None else fold(xq)
    if path == "scores":
        y = concatenation_scores_path(x, w, geo, op_impl, xq)
    else:
        theta, phi, g = embed(x, w, geo, xq)
        if path == "tokens":
            y = non_local(
                theta, phi, g, geo.instantiation, scale=geo.scale, w_f=w.w_f, impl=op_impl,
                nan_guard=False,
            )  # fmt: skip
        else:
            y = grouped_path(theta, phi, g, x, w.w_f, geo, op_impl)
    if tg is not None:  # groups are consecutive frames: the t-major token order is kept
        y = y.reshape(B, T * H * W, geo.inter_channels)
    return y


def reassociated_path(
    x: Tensor, w: BlockWeights, geo: BlockGeometry, w_z: Tensor, b_z: Tensor | None,
    order: tuple[bool, bool], xq: Tensor | None = None,
) -> Tensor:  # fmt: skip
    """``W_z y`` ``(B, C, N)`` on the explicit matrix with the projections re-associated
    as ``order`` says (exact by linearity; see :mod:`nlnet.functional.reassociated`)."""
    gaussian = not geo.form.embedded
    x_hat = max_pool(x, geo.kernel) if geo.pool_before else x
    g = conv(x_hat, w.g_w, w.g_b, geo.dim)  # (B, d_v, *grid of x_hat)
    if xq is None:
        xq, xq_hat = x, x_hat
    else:
        xq_hat = max_pool(xq, geo.kernel) if geo.pool_before else xq
    phi = xq_hat.to(g.dtype) if gaussian else conv(xq_hat, w.phi_w, w.phi_b, geo.dim)
    if geo.pool_after:
        phi, g = max_pool(phi, geo.kernel), max_pool(g, geo.kernel)
    return reassociated_non_local(
        xq.flatten(2).to(g.dtype), phi.flatten(2), g.flatten(2),
        None if gaussian else w.theta_w, None if gaussian else w.theta_b,
        w_z, b_z, geo.instantiation, scale=geo.scale, plan=order,
    )  # fmt: skip


def empty_grid_path(
    x: Tensor, w: BlockWeights, geo: BlockGeometry, w_z: Tensor, b_z: Tensor | None,
    want_attention: bool, xq: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:  # fmt: skip
    """``W_z y`` of the shape of ``x`` on a grid with an axis of size 0 (N = N' = 0).

    The block's steps still run, with the 1x1 convolutions as matmuls on the token views
    (``nn.Conv`` rejects empty grids) and no pooling (the pooled grid ``s // k`` per axis is empty
    too), so every weight gets a zero gradient. Returns ``(W_z y, weights or None)``.
    """
    key_size = tuple(s // k for s, k in zip(x.shape[2:], geo.kernel))
    crop = (slice(None), slice(None), *(slice(0, s) for s in key_size))
    x_hat = x[crop]
    xq = x if xq is None else xq
    xq_hat = xq[crop]

    def project(weight: Tensor, bias: Tensor | None, t: Tensor) -> Tensor:  # -> (B, N, out)
        return F.linear(tokens(t), weight.flatten(1), bias)

    if not geo.form.embedded:
        theta, phi = tokens(xq), tokens(xq_hat)
    else:
        theta, phi = project(w.theta_w, w.theta_b, xq), project(w.phi_w, w.phi_b, xq_hat)
    out = non_local(
        theta, phi, project(w.g_w, w.g_b, x_hat),
        geo.instantiation, scale=geo.scale, w_f=w.w_f, return_attention=want_attention,
        impl="reference" if want_attention else geo.impl, nan_guard=False,
    )  # fmt: skip
    y, attn = out if want_attention else (out, None)  # (B, 0, d_v), (B, 0, 0)
    wz = F.linear(y, w_z.flatten(1), b_z).transpose(1, 2)
    return wz.reshape(x.shape), attn
