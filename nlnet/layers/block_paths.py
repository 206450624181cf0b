"""The evaluation paths of the non-local block (:class:`~nlnet.layers.nonlocal_block.NonLocalNd`).

:class:`NonLocalPaths` holds the ways the block computes y of Eq. 1 (Wang et al., CVPR 2018):
the explicit reference path with the N x N' matrix (masked for the 3D modes of Table 2d and for
temporal groups), the token fast path, the grouped ``space``/``time`` path, the Eq. 5
concatenation scores, the re-associated projections, the BatchNorm folded into ``W_z`` in eval
mode, and the empty grid. The layer itself (parameters, plan, dispatch) is in
:mod:`nlnet.layers.nonlocal_block`, which mixes this class in.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nlnet.functional.nonlocal_op import concatenation_non_local, non_local
from nlnet.functional.plan import NonLocalPlan
from nlnet.functional.pooling import max_pool
from nlnet.functional.reassociated import reassociated_non_local

# torch.fx.symbolic_trace records these as single calls evaluated at run time (they read sizes
# and pick paths by size), so a traced block keeps its size-dependent choices.
torch.fx.wrap("non_local")
torch.fx.wrap("concatenation_non_local")
torch.fx.wrap("max_pool")


def _cell_index(x: Tensor, axis: int, k: int) -> Tensor:
    """Pooled cell of each position of ``x`` along ``axis`` (floor pooling: remainder -> last)."""
    size = x.shape[axis]
    return (torch.arange(size, device=x.device) // k).clamp_max(max(size // k, 1) - 1)


def _group_mask(
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
        cell_t = _cell_index(x, 2, kernel[0])
        allowed &= cell_t[q[0]].unsqueeze(1) == kk[0].unsqueeze(0)
    elif mode == "time":
        cell_h, cell_w = _cell_index(x, 3, kernel[1]), _cell_index(x, 4, kernel[2])
        allowed &= cell_h[q[1]].unsqueeze(1) == kk[1].unsqueeze(0)
        allowed &= cell_w[q[2]].unsqueeze(1) == kk[2].unsqueeze(0)
    if temporal_groups is not None:
        # a pooled key frame t' covers frames t' k_t .. t' k_t + k_t - 1, all in one group
        group_q = q[0] // temporal_groups
        group_k = (kk[0] * kernel[0]) // temporal_groups
        allowed &= group_q.unsqueeze(1) == group_k.unsqueeze(0)
    return allowed


torch.fx.wrap("_cell_index")
torch.fx.wrap("_group_mask")


def _non_finite_guard(x: Tensor) -> Tensor:
    """``(B, 1, 1)``: 0 for a sample whose input is finite, NaN for one with a NaN/inf in it."""
    dt = torch.promote_types(x.dtype, torch.float32)
    return (x.flatten(1).sum(1, dtype=dt) * 0).view(-1, 1, 1)


class NonLocalPaths:
    """The evaluation paths of :class:`~nlnet.layers.nonlocal_block.NonLocalNd` (a mixin: the
    attributes it reads, ``kernel``, ``theta``, ``phi``, ``g``, ``W_z``, ``norm``, ..., are set
    by the block's constructor)."""

    def _pool(self, t: Tensor) -> Tensor:
        """Max pooling, kernel = stride (equal to ``F.max_pool{d}d``, faster on the CPU)."""
        return max_pool(t, self.kernel)

    @staticmethod
    def _tokens(t: Tensor) -> Tensor:
        """``(B, D, *grid) -> (B, N, D)``: the token view of a channel-first map (no copy)."""
        return t.flatten(2).transpose(1, 2)

    def _embed(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """theta (B, N, d), phi (B, N', d) and g (B, N', d_v) from x ``(B, C, *grid)``.

        The 1x1 convolutions run on the channel-first map and the results are handed on as token
        views: nothing is copied, and autograd keeps the convolutions' own (cheap) backward.
        """
        pool_before = self.subsampled and self.pool_position == "before"
        x_hat = self._pool(x) if pool_before else x  # (B, C, *key_grid) or x
        g = self.g(x_hat)  # (B, d, *grid of x_hat)
        if not self.form.embedded:  # Eq. 2 on x itself (in the projections' dtype under autocast)
            theta, phi = x.to(g.dtype), x_hat.to(g.dtype)
        else:
            theta, phi = self.theta(x), self.phi(x_hat)
        if self.subsampled and self.pool_position == "after":  # pool the outputs of phi and g
            phi, g = self._pool(phi), self._pool(g)
        return self._tokens(theta), self._tokens(phi), self._tokens(g)

    def _grouped(self, theta: Tensor, phi: Tensor, g: Tensor, x: Tensor, impl: str) -> Tensor:
        """Fast ``space``/``time`` modes: attention inside groups, as batched token sets."""
        B, T, H, W = x.shape[0], x.shape[2], x.shape[3], x.shape[4]
        kt, kh, kw = self.kernel
        Tk, Hk, Wk = T // kt, H // kh, W // kw
        dq = self.inter_channels if self.form.embedded else self.in_channels
        dv = self.inter_channels
        phi5 = phi.reshape(B, Tk, Hk, Wk, dq)
        g5 = g.reshape(B, Tk, Hk, Wk, dv)
        kw_ = {"scale": self.scale, "w_f": self.w_f, "impl": impl, "nan_guard": False}
        if self.mode == "space":
            if kt > 1:  # keys of the pooled frame containing each query frame
                cell_t = _cell_index(x, 2, kt)
                phi5, g5 = phi5.index_select(1, cell_t), g5.index_select(1, cell_t)
            y = non_local(
                theta.reshape(B * T, H * W, dq),
                phi5.reshape(B * T, Hk * Wk, dq),
                g5.reshape(B * T, Hk * Wk, dv),
                self.instantiation,
                **kw_,
            )
            return y.reshape(B, T * H * W, dv)
        # time: keys at the pooled spatial cell containing each query position
        if kh > 1:
            cell_h = _cell_index(x, 3, kh)
            phi5, g5 = phi5.index_select(2, cell_h), g5.index_select(2, cell_h)
        if kw > 1:
            cell_w = _cell_index(x, 4, kw)
            phi5, g5 = phi5.index_select(3, cell_w), g5.index_select(3, cell_w)
        q = theta.reshape(B, T, H, W, dq).permute(0, 2, 3, 1, 4).reshape(B * H * W, T, dq)
        k = phi5.permute(0, 2, 3, 1, 4).reshape(B * H * W, Tk, dq)
        v = g5.permute(0, 2, 3, 1, 4).reshape(B * H * W, Tk, dv)
        y = non_local(q, k, v, self.instantiation, **kw_)  # (B*H*W, T, dv)
        return y.reshape(B, H, W, T, dv).permute(0, 3, 1, 2, 4).reshape(B, T * H * W, dv)

    def _concatenation_scores(self, x: Tensor, impl: str) -> Tensor:
        """Eq. 5 fast path: theta and phi are only ever seen through ``a = w_theta^T theta(x)``
        and ``b = w_phi^T phi(x_hat)``, so fold ``w_f`` into the embeddings:
        ``a = (W_theta^T w_theta)^T x + b_theta^T w_theta`` (one C-vector instead of a C x d
        projection), likewise ``b``. Exact; saves two of the four 1x1 convolutions.
        """
        d = self.inter_channels
        w_theta, w_phi = self.w_f[:d], self.w_f[d:]
        u_theta = self.theta.weight.flatten(1).t() @ w_theta  # (C,)
        u_phi = self.phi.weight.flatten(1).t() @ w_phi  # (C,)
        x_hat = self._pool(x) if self.subsampled else x
        a = torch.matmul(u_theta, x.flatten(2))  # (B, N)
        b = torch.matmul(u_phi, x_hat.flatten(2))  # (B, N')
        if self.theta.bias is not None:
            a = a + self.theta.bias @ w_theta
            b = b + self.phi.bias @ w_phi
        g = self._tokens(self.g(x_hat))  # (B, N', d)
        return concatenation_non_local(a, b, g, impl=impl)

    def _reference(self, x: Tensor, return_attention: bool) -> tuple[Tensor, Tensor | None]:
        """The explicit path: embeddings, the N x N' matrix (masked for modes/groups), y."""
        theta, phi, g = self._embed(x)
        mask = None
        if self.mode != "spacetime" or self.temporal_groups is not None:
            mask = _group_mask(x, self.mode, self.kernel, self.temporal_groups)
        out = non_local(
            theta, phi, g, self.instantiation, scale=self.scale, w_f=self.w_f, mask=mask,
            return_attention=return_attention, impl="reference", nan_guard=False,
        )  # fmt: skip
        return out if return_attention else (out, None)

    def _fast(self, x: Tensor, plan: NonLocalPlan) -> Tensor:
        """y ``(B, N, d_v)`` on the ``tokens``/``scores``/``grouped`` paths (temporal groups
        folded into the batch)."""
        tg = self.temporal_groups
        if tg is not None:  # (B, C, T, H, W) -> (B * T/k, C, k, H, W): groups as samples
            B, C, T, H, W = x.shape[0], x.shape[1], x.shape[2], x.shape[3], x.shape[4]
            x = (
                x.reshape(B, C, T // tg, tg, H, W)
                .transpose(1, 2)
                .reshape(B * (T // tg), C, tg, H, W)
            )
        if plan.path == "scores":
            y = self._concatenation_scores(x, plan.op_impl)
        else:
            theta, phi, g = self._embed(x)
            if plan.path == "tokens":
                y = non_local(
                    theta, phi, g, self.instantiation, scale=self.scale, w_f=self.w_f,
                    impl=plan.op_impl, nan_guard=False,
                )  # fmt: skip
            else:
                y = self._grouped(theta, phi, g, x, plan.op_impl)
        if tg is not None:  # groups are consecutive frames: the t-major token order is kept
            y = y.reshape(B, T * H * W, self.inter_channels)
        return y

    def _folded_output(self) -> tuple[Tensor, Tensor] | None:
        """``(weight, bias)`` of ``BN(W_z y)`` as one 1x1 projection, for an evaluating BatchNorm.

        In eval mode BatchNorm is the per-channel affine map ``s (v - mu) + beta`` with
        ``s = gamma / sqrt(var + eps)`` from its running statistics, so ``BN(W_z y) =
        (s W_z) y + (beta - s mu + s b_z)``: one pass over the ``C x N`` output fewer, exact up to
        round-off; the parameters themselves are not changed (gradients reach them through the
        product). ``None`` in training or without running statistics.
        """
        bn = self.norm
        if not isinstance(bn, nn.modules.batchnorm._BatchNorm) or bn.training:
            return None
        if bn.running_mean is None or bn.running_var is None:
            return None
        s = torch.rsqrt(bn.running_var + bn.eps)  # (C,)
        if bn.weight is not None:
            s = s * bn.weight
        shift = -bn.running_mean * s
        if bn.bias is not None:
            shift = shift + bn.bias
        if self.W_z.bias is not None:
            shift = shift + s * self.W_z.bias
        return self.W_z.weight.flatten(1) * s.unsqueeze(1), shift

    def _reassociated(
        self, x: Tensor, w_z: Tensor, b_z: Tensor | None, order: tuple[bool, bool]
    ) -> Tensor:
        """``W_z y`` ``(B, C, N)`` on the explicit matrix with the projections re-associated
        as ``order`` says (exact by linearity; see :mod:`nlnet.functional.reassociated`)."""
        gaussian = not self.form.embedded
        pool_before = self.subsampled and self.pool_position == "before"
        x_hat = self._pool(x) if pool_before else x
        g = self.g(x_hat)  # (B, d_v, *grid of x_hat)
        phi = x_hat.to(g.dtype) if gaussian else self.phi(x_hat)
        if self.subsampled and self.pool_position == "after":
            phi, g = self._pool(phi), self._pool(g)
        return reassociated_non_local(
            x.flatten(2).to(g.dtype), phi.flatten(2), g.flatten(2),
            None if gaussian else self.theta.weight, None if gaussian else self.theta.bias,
            w_z, b_z, self.instantiation, scale=self.scale, plan=order,
        )  # fmt: skip

    def _empty_grid(self, x: Tensor, want_attention: bool) -> Tensor | tuple[Tensor, Tensor]:
        """The block on a grid with an axis of size 0: no query (N = 0) and no key (N' = 0).

        ``z = norm(W_z y) + x`` is then the empty tensor of the shape of ``x``, as PyTorch's own
        layers return for empty inputs. The block's steps still run, with the 1x1 convolutions as
        matmuls on the token views (``nn.Conv`` rejects empty grids) and no pooling (the pooled
        grid ``s // k`` per axis is empty too), so every parameter gets a zero gradient and
        BatchNorm treats the empty map as it treats an empty batch (running statistics kept).
        """
        key_size = tuple(s // k for s, k in zip(x.shape[2:], self.kernel))
        x_hat = x[(slice(None), slice(None), *(slice(0, s) for s in key_size))]

        def project(conv: nn.Module, t: Tensor) -> Tensor:  # (B, C, *grid) -> (B, N, out)
            return F.linear(self._tokens(t), conv.weight.flatten(1), conv.bias)

        if not self.form.embedded:
            theta, phi = self._tokens(x), self._tokens(x_hat)
        else:
            theta, phi = project(self.theta, x), project(self.phi, x_hat)
        out = non_local(
            theta, phi, project(self.g, x_hat),
            self.instantiation, scale=self.scale, w_f=self.w_f, return_attention=want_attention,
            impl="reference" if want_attention else self.impl, nan_guard=False,
        )  # fmt: skip
        y, attn = out if want_attention else (out, None)  # (B, 0, d_v), (B, 0, 0)
        wz = F.linear(y, self.W_z.weight.flatten(1), self.W_z.bias).transpose(1, 2)
        wz = wz.reshape(x.shape)
        if isinstance(self.norm, nn.GroupNorm):  # F.group_norm rejects empty grids
            shape = (1, -1) + (1,) * self.dim
            wz = wz * self.norm.weight.view(shape) + self.norm.bias.view(shape)
        else:
            wz = self.norm(wz)
        z = wz + x
        return (z, attn) if want_attention else z
