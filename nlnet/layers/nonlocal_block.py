"""The non-local block z = W_z y + x (Wang et al., CVPR 2018, Eq. 6, Figure 2) in 1D, 2D and 3D.

One implementation, :class:`NonLocalNd`, serves :class:`NonLocal1d` (sequences ``(B, C, L)``),
:class:`NonLocal2d` (images ``(B, C, H, W)``) and :class:`NonLocal3d` (videos ``(B, C, T, H, W)``).

Design, following Sec. 3.3 "Implementation of Non-local Blocks" and Sec. 4.1 of
"Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971):

* bottleneck: ``theta``, ``phi`` and ``g`` are 1x1(x1) convolutions to ``inter_channels`` (half of
  ``in_channels`` by default; ``reduction=r`` gives ``in_channels // r`` as in the practitioner's guide,
  the practitioner's guide "Self-Attention for Images: Non-Local Networks"); ``W_z`` maps back to ``in_channels``;
* subsampling: keys and values come from a max-pooled grid (``sub_sample``; the paper pools space
  only, kernel (1, 2, 2) for video). By default the pooling is applied to ``x`` *before* the ``phi``
  and ``g`` convolutions, as the released Caffe2 code does; ``pool_position="after"`` pools the
  outputs of ``phi`` and ``g`` instead, as the paper's text ("a max pooling layer after phi and g")
  and mmcv/AlexHex7 implementations do. The two differ because max pooling does not commute with a
  1x1 convolution. Pooling uses floor mode: a size smaller than the kernel is an error;
* initial identity: ``norm="bn"`` puts a BatchNorm after ``W_z`` with its scale initialised to zero
  (Sec. 4.1, following Goyal et al.), so a new block returns its input exactly; with ``norm=None``
  ``W_z`` itself is zero-initialised. The other layers use He (MSRA) initialisation;
* 3D ``mode`` (Table 2d): ``"spacetime"`` sums over all positions; ``"space"`` only over the query's
  own frame; ``"time"`` only over the query's own spatial position across frames. With subsampling
  a query uses the keys of the pooled cell that contains it (frame ``t // k_t`` in ``space`` mode,
  cell ``(h // k_h, w // k_w)`` in ``time`` mode; a remainder row/column left by floor pooling uses
  the last cell).

Fast path: the three 1x1 convolutions run as one fused matmul on the token layout (two when keys
are pooled before the projections), the pairwise part goes through :func:`nlnet.functional.non_local`
(which never builds the N x N' matrix unless asked), and ``W_z`` is applied as a matmul that writes
the channel-first layout directly. ``return_attention=True`` evaluates the explicit reference path
and also returns the weights ``f / C`` as ``(B, N, N')`` over the row-major flattened input grid
(N) and pooled grid (N'); in ``space``/``time`` mode the entries outside the query's frame /
position are exactly zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nlnet.functional.nonlocal_op import (
    INSTANTIATIONS,
    Impl,
    Instantiation,
    check_instantiation,
    choose_impl,
    concatenation_from_scores,
    non_local,
)

Mode = Literal["spacetime", "space", "time"]
MODES: tuple[str, ...] = ("spacetime", "space", "time")

_CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
_BN = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}
_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_LAYOUT = {1: "(B, C, L)", 2: "(B, C, H, W)", 3: "(B, C, T, H, W)"}


def resolve_sub_sample(sub_sample: bool | int | Sequence[int] | None, dim: int) -> tuple[int, ...]:
    """Turn the ``sub_sample`` argument into a per-dimension max-pooling kernel.

    Args:
        sub_sample: ``True`` for the paper's default (2 in 1D, (2, 2) in 2D, (1, 2, 2) in 3D: space
            only); ``False``, ``None`` or 1 for none; an int ``k`` for a *spatial* factor as in the
            practitioner's guide ((k,), (k, k), (1, k, k)); or a tuple with one kernel per dimension.
        dim: 1, 2 or 3.

    Returns:
        A tuple of ``dim`` positive ints (all ones means no subsampling).
    """
    if sub_sample is None or sub_sample is False:
        return (1,) * dim
    if sub_sample is True:
        return (1, 2, 2) if dim == 3 else (2,) * dim
    if isinstance(sub_sample, int):
        if sub_sample < 1:
            raise ValueError(f"sub_sample must be >= 1, got {sub_sample}")
        return (1, sub_sample, sub_sample) if dim == 3 else (sub_sample,) * dim
    kernel = tuple(int(k) for k in sub_sample)
    if len(kernel) != dim or any(k < 1 for k in kernel):
        raise ValueError(
            f"sub_sample must be a bool, an int or {dim} positive ints for a {dim}D block, "
            f"got {sub_sample!r}"
        )
    return kernel


class NonLocalNd(nn.Module):
    """Non-local block z = W_z y + x (Eq. 6) for ``dim``-dimensional feature maps.

    Args:
        dim: Number of grid dimensions: 1 (sequence), 2 (image) or 3 (video).
        in_channels: Channels C of the input ``x``.
        inter_channels: Bottleneck width of ``theta``, ``phi`` and ``g``; default ``C // 2``.
        reduction: Alternative to ``inter_channels``: width ``max(C // reduction, 1)``.
        instantiation: ``"embedded_gaussian"`` (default), ``"gaussian"``, ``"dot_product"`` or
            ``"concatenation"`` (Sec. 3.2, Eqs. 2-5).
        sub_sample: Max-pooling kernel for keys and values, see :func:`resolve_sub_sample`.
        pool_position: ``"before"`` the ``phi``/``g`` convolutions (released code, default) or
            ``"after"`` them.
        norm: ``"bn"``: BatchNorm after ``W_z`` with zero-initialised scale (Sec. 4.1); ``None``:
            no norm, ``W_z`` zero-initialised.
        mode: 3D only: ``"spacetime"`` (default), ``"space"`` or ``"time"`` (Table 2d).
        scale: Logit scale of the softmax forms: ``True`` = 1/sqrt(d) (released code), ``False`` =
            the paper's equations, or a float.
        impl: ``"auto"`` (fastest exact path for the size), ``"fast"`` or ``"reference"``.

    Shape:
        Input ``(B, C, *grid)``; output the same. With ``return_attention=True`` also the weights
        ``(B, N, N')``.
    """

    def __init__(
        self,
        dim: int,
        in_channels: int,
        inter_channels: int | None = None,
        *,
        reduction: int | None = None,
        instantiation: Instantiation = "embedded_gaussian",
        sub_sample: bool | int | Sequence[int] | None = True,
        pool_position: Literal["before", "after"] = "before",
        norm: Literal["bn"] | None = "bn",
        mode: Mode = "spacetime",
        scale: bool | float = True,
        impl: Impl = "auto",
    ) -> None:
        super().__init__()
        if dim not in (1, 2, 3):
            raise ValueError(f"dim must be 1, 2 or 3, got {dim}")
        if not isinstance(in_channels, int) or in_channels < 1:
            raise ValueError(f"in_channels must be a positive int, got {in_channels!r}")
        if inter_channels is not None and reduction is not None:
            raise ValueError("give either inter_channels or reduction, not both")
        if reduction is not None:
            if reduction < 1:
                raise ValueError(f"reduction must be >= 1, got {reduction}")
            inter_channels = max(in_channels // reduction, 1)
        elif inter_channels is None:
            inter_channels = max(in_channels // 2, 1)
        if inter_channels < 1:
            raise ValueError(f"inter_channels must be >= 1, got {inter_channels}")
        check_instantiation(instantiation)
        if pool_position not in ("before", "after"):
            raise ValueError(f"pool_position must be 'before' or 'after', got {pool_position!r}")
        if norm not in ("bn", None):
            raise ValueError(f"norm must be 'bn' or None, got {norm!r}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode != "spacetime" and dim != 3:
            raise ValueError(
                f"mode={mode!r} needs a 3D (video) block; a {dim}D block only has mode='spacetime'"
            )
        if impl not in ("auto", "fast", "reference"):
            raise ValueError(f"impl must be 'auto', 'fast' or 'reference', got {impl!r}")

        self.dim = dim
        self.in_channels = in_channels
        self.inter_channels = inter_channels
        self.instantiation = instantiation
        self.kernel = resolve_sub_sample(sub_sample, dim)
        self.pool_position = pool_position
        self.mode = mode
        self.scale = scale
        self.impl = impl

        conv = _CONV[dim]
        if instantiation == "gaussian":  # Eq. 2: no embedding, f on x itself (Fig. 2 caption)
            self.theta = None
            self.phi = None
        else:
            self.theta = conv(in_channels, inter_channels, kernel_size=1)
            self.phi = conv(in_channels, inter_channels, kernel_size=1)
        self.g = conv(in_channels, inter_channels, kernel_size=1)
        if instantiation == "concatenation":  # Eq. 5: w_f^T [theta_i, phi_j]
            self.w_f = nn.Parameter(torch.empty(2 * inter_channels))
        else:
            self.register_parameter("w_f", None)
        self.W_z = conv(inter_channels, in_channels, kernel_size=1, bias=norm is None)
        self.norm = _BN[dim](in_channels) if norm == "bn" else nn.Identity()
        self.reset_parameters()

    # ------------------------------------------------------------------ set-up
    def reset_parameters(self) -> None:
        """He initialisation of the embeddings; W_z's BN scale (or W_z itself) set to zero."""
        for m in (self.theta, self.phi, self.g, self.W_z):
            if m is not None:
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        if self.w_f is not None:
            nn.init.normal_(self.w_f, std=math.sqrt(1.0 / self.w_f.numel()))
        if isinstance(self.norm, nn.modules.batchnorm._BatchNorm):
            nn.init.zeros_(self.norm.weight)  # gamma = 0: the block starts as the identity
            nn.init.zeros_(self.norm.bias)
        else:
            nn.init.zeros_(self.W_z.weight)
            if self.W_z.bias is not None:
                nn.init.zeros_(self.W_z.bias)

    def extra_repr(self) -> str:
        return (
            f"in_channels={self.in_channels}, inter_channels={self.inter_channels}, "
            f"instantiation={self.instantiation!r}, sub_sample={self.kernel}, "
            f"pool_position={self.pool_position!r}, mode={self.mode!r}, scale={self.scale}"
        )

    @property
    def subsampled(self) -> bool:
        """Whether keys/values come from a pooled grid."""
        return any(k > 1 for k in self.kernel)

    def key_grid(self, input_size: Sequence[int]) -> tuple[int, ...]:
        """The pooled grid (N' positions) that keys and values live on for an input grid."""
        size = tuple(int(s) for s in input_size)
        if len(size) != self.dim:
            raise ValueError(f"input_size must have {self.dim} entries, got {input_size!r}")
        for axis, (s, k) in enumerate(zip(size, self.kernel)):
            if s < k:
                raise ValueError(
                    f"input size {size} is too small for the sub_sample kernel {self.kernel}: "
                    f"dimension {axis} has {s} < {k} positions"
                )
        return tuple(s // k for s, k in zip(size, self.kernel))

    # ----------------------------------------------------------------- forward
    def _check_input(self, x: Tensor) -> None:
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        name = type(self).__name__
        if x.dim() != self.dim + 2:
            raise ValueError(
                f"{name} expects x of shape {_LAYOUT[self.dim]} ({self.dim + 2} dims), "
                f"got shape {tuple(x.shape)}"
            )
        if x.shape[1] != self.in_channels:
            raise ValueError(
                f"{name} was built for in_channels={self.in_channels}, got x with "
                f"{x.shape[1]} channels (shape {tuple(x.shape)})"
            )
        if not x.is_floating_point():
            raise TypeError(f"{name} expects a floating-point x, got dtype {x.dtype}")

    def _pool(self, t: Tensor) -> Tensor:
        return _POOL[self.dim](t, kernel_size=self.kernel, stride=self.kernel)

    @staticmethod
    def _weights(*convs: nn.Module | None) -> tuple[Tensor, Tensor | None]:
        """Stack 1x1 convolutions into one (out, in) matrix and bias for a fused projection."""
        convs = [c for c in convs if c is not None]
        weight = torch.cat([c.weight.flatten(1) for c in convs])
        biases = [c.bias for c in convs]
        bias = None if any(b is None for b in biases) else torch.cat(biases)
        return weight, bias

    def _embed(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, tuple[int, ...]]:
        """theta (B, N, d), phi (B, N', d), g (B, N', d_v) and the key grid, from x."""
        B, C = x.shape[:2]
        size = tuple(x.shape[2:])
        key_size = self.key_grid(size)
        d = self.inter_channels
        x_tok = x.reshape(B, C, -1).transpose(1, 2)  # (B, N, C), a view
        gaussian = self.instantiation == "gaussian"
        if not self.subsampled:
            w, b = self._weights(self.theta, self.phi, self.g)
            out = F.linear(x_tok, w, b)  # (B, N, 3d) or (B, N, d) for gaussian: one matmul
            if gaussian:
                return x_tok, x_tok, out, key_size
            return out[..., :d], out[..., d : 2 * d], out[..., 2 * d :], key_size
        if self.pool_position == "before":
            x_hat = self._pool(x)  # (B, C, *key_size)
            xh_tok = x_hat.reshape(B, C, -1).transpose(1, 2)  # (B, N', C)
            if gaussian:
                return (
                    x_tok,
                    xh_tok,
                    F.linear(xh_tok, self.g.weight.flatten(1), self.g.bias),
                    key_size,
                )
            theta = F.linear(x_tok, self.theta.weight.flatten(1), self.theta.bias)
            w, b = self._weights(self.phi, self.g)
            out = F.linear(xh_tok, w, b)  # (B, N', 2d)
            return theta, out[..., :d], out[..., d:], key_size
        # pool_position == "after": project at full resolution, then pool phi and g.
        w, b = self._weights(self.theta, self.phi, self.g)
        out = F.linear(x_tok, w, b)  # (B, N, 3d) or (B, N, d)
        if gaussian:
            theta, pg = x_tok, torch.cat([x_tok, out], dim=-1)
        else:
            theta, pg = out[..., :d], out[..., d:]
        pg = self._pool(pg.transpose(1, 2).reshape(B, pg.shape[-1], *size))  # (B, k, *key_size)
        pg = pg.reshape(B, pg.shape[1], -1).transpose(1, 2).contiguous()  # (B, N', k)
        split = C if gaussian else d
        return theta, pg[..., :split], pg[..., split:], key_size

    def _cell_index(self, size: int, key_size: int, k: int, device: torch.device) -> Tensor:
        """Pooled cell of each input position along one axis (floor pooling; remainder -> last)."""
        return (torch.arange(size, device=device) // k).clamp_max(key_size - 1)

    def _group_mask(
        self, size: tuple[int, ...], key_size: tuple[int, ...], device
    ) -> Tensor | None:
        """Boolean (N, N') mask of the pairs allowed by ``mode`` (None for spacetime)."""
        if self.mode == "spacetime":
            return None
        T, H, W = size
        Tk, Hk, Wk = key_size
        grid_q = torch.stack(
            torch.meshgrid(*(torch.arange(s, device=device) for s in size), indexing="ij")
        )
        grid_k = torch.stack(
            torch.meshgrid(*(torch.arange(s, device=device) for s in key_size), indexing="ij")
        )
        q = grid_q.reshape(3, -1)  # (3, N): t, h, w of each query
        kk = grid_k.reshape(3, -1)  # (3, N'): t', h', w' of each key
        if self.mode == "space":
            cell_t = self._cell_index(T, Tk, self.kernel[0], device)
            return cell_t[q[0]].unsqueeze(1) == kk[0].unsqueeze(0)
        cell_h = self._cell_index(H, Hk, self.kernel[1], device)
        cell_w = self._cell_index(W, Wk, self.kernel[2], device)
        return (cell_h[q[1]].unsqueeze(1) == kk[1].unsqueeze(0)) & (
            cell_w[q[2]].unsqueeze(1) == kk[2].unsqueeze(0)
        )

    def _grouped(self, theta, phi, g, size, key_size) -> Tensor:
        """Fast ``space``/``time`` modes: attention inside groups, as batched token sets."""
        B = theta.shape[0]
        T, H, W = size
        Tk, Hk, Wk = key_size
        dq, dk, dv = theta.shape[-1], phi.shape[-1], g.shape[-1]
        device = theta.device
        phi5 = phi.reshape(B, Tk, Hk, Wk, dk)
        g5 = g.reshape(B, Tk, Hk, Wk, dv)
        kw = {"scale": self.scale, "w_f": self.w_f, "impl": self.impl}
        if self.mode == "space":
            if Tk != T:  # keys of the pooled frame containing each query frame
                cell_t = self._cell_index(T, Tk, self.kernel[0], device)
                phi5, g5 = phi5.index_select(1, cell_t), g5.index_select(1, cell_t)
            q = theta.reshape(B * T, H * W, dq)
            y = non_local(
                q,
                phi5.reshape(B * T, Hk * Wk, dk),
                g5.reshape(B * T, Hk * Wk, dv),
                self.instantiation,
                **kw,
            )
            return y.reshape(B, T * H * W, dv)
        # time: keys at the pooled spatial cell containing each query position
        if (Hk, Wk) != (H, W):
            cell_h = self._cell_index(H, Hk, self.kernel[1], device)
            cell_w = self._cell_index(W, Wk, self.kernel[2], device)
            phi5 = phi5.index_select(2, cell_h).index_select(3, cell_w)
            g5 = g5.index_select(2, cell_h).index_select(3, cell_w)
        q = theta.reshape(B, T, H, W, dq).permute(0, 2, 3, 1, 4).reshape(B * H * W, T, dq)
        k = phi5.permute(0, 2, 3, 1, 4).reshape(B * H * W, Tk, dk)
        v = g5.permute(0, 2, 3, 1, 4).reshape(B * H * W, Tk, dv)
        y = non_local(q, k, v, self.instantiation, **kw)  # (B*H*W, T, dv)
        return y.reshape(B, H, W, T, dv).permute(0, 3, 1, 2, 4).reshape(B, T * H * W, dv)

    def _concatenation_shortcut(self, size: tuple[int, ...], device: torch.device) -> bool:
        """Whether the concatenation form can skip the theta/phi embeddings (see below)."""
        if self.instantiation != "concatenation" or self.mode != "spacetime":
            return False
        if self.subsampled and self.pool_position == "after":
            return False  # w_phi^T maxpool(phi(x)) needs phi itself
        if self.impl == "fast":
            return True
        if self.impl == "reference":
            return False
        n = math.prod(size)
        n_keys = math.prod(self.key_grid(size))
        d = self.inter_channels
        return choose_impl("concatenation", n, n_keys, d, d, device=device, training=True) == "fast"

    def _concatenation_scores(self, x: Tensor) -> Tensor:
        """Eq. 5 fast path: theta and phi are only ever seen through ``a = w_theta^T theta(x)``
        and ``b = w_phi^T phi(x_hat)``, so fold ``w_f`` into the embeddings:
        ``a = (W_theta^T w_theta)^T x + b_theta^T w_theta`` (one C-vector instead of a C x d
        projection), likewise ``b``. Exact; saves two of the four 1x1 convolutions.
        """
        B, C = x.shape[:2]
        d = self.inter_channels
        w_theta, w_phi = self.w_f[:d], self.w_f[d:]
        u_theta = self.theta.weight.flatten(1).t() @ w_theta  # (C,)
        u_phi = self.phi.weight.flatten(1).t() @ w_phi  # (C,)
        x_flat = x.reshape(B, C, -1)  # (B, C, N)
        a = torch.matmul(u_theta, x_flat) + self.theta.bias @ w_theta  # (B, N)
        x_hat = self._pool(x) if self.subsampled else x
        xh_flat = x_hat.reshape(B, C, -1)  # (B, C, N')
        b = torch.matmul(u_phi, xh_flat) + self.phi.bias @ w_phi  # (B, N')
        g = F.linear(xh_flat.transpose(1, 2), self.g.weight.flatten(1), self.g.bias)  # (B, N', d)
        return concatenation_from_scores(a, b, g)

    def forward(self, x: Tensor, return_attention: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Apply the block.

        Args:
            x: Input ``(B, C, *grid)``.
            return_attention: Also return the weights ``f / C`` of shape ``(B, N, N')``.

        Returns:
            ``z = BN(W_z y) + x`` with the shape of ``x``, and the weights if asked.
        """
        self._check_input(x)
        B, C = x.shape[:2]
        size = tuple(x.shape[2:])
        attn = None
        if not return_attention and self._concatenation_shortcut(size, x.device):
            y = self._concatenation_scores(x)
        elif return_attention or self.impl == "reference" or self.mode == "spacetime":
            theta, phi, g, key_size = self._embed(x)
            mask = self._group_mask(size, key_size, x.device)
            impl = "reference" if return_attention else self.impl
            out = non_local(
                theta, phi, g, self.instantiation, scale=self.scale, w_f=self.w_f,
                mask=mask, return_attention=return_attention, impl=impl,
            )  # fmt: skip
            y, attn = out if return_attention else (out, None)
        else:
            theta, phi, g, key_size = self._embed(x)
            y = self._grouped(theta, phi, g, size, key_size)
        # W_z y as (C, d_v) @ (B, d_v, N) -> (B, C, N): lands in channel-first layout directly.
        z = torch.matmul(self.W_z.weight.flatten(1), y.transpose(1, 2))
        if self.W_z.bias is not None:
            z = z + self.W_z.bias.unsqueeze(-1)
        z = self.norm(z.reshape(B, C, *size)) + x
        return (z, attn) if return_attention else z


class NonLocal1d(NonLocalNd):
    """Non-local block for sequences ``(B, C, L)``; see :class:`NonLocalNd` for the arguments."""

    def __init__(self, in_channels: int, inter_channels: int | None = None, **kwargs) -> None:
        super().__init__(1, in_channels, inter_channels, **kwargs)


class NonLocal2d(NonLocalNd):
    """Non-local block for images ``(B, C, H, W)``; see :class:`NonLocalNd` for the arguments."""

    def __init__(self, in_channels: int, inter_channels: int | None = None, **kwargs) -> None:
        super().__init__(2, in_channels, inter_channels, **kwargs)


class NonLocal3d(NonLocalNd):
    """Non-local block for videos ``(B, C, T, H, W)`` with ``mode`` space/time/spacetime."""

    def __init__(self, in_channels: int, inter_channels: int | None = None, **kwargs) -> None:
        super().__init__(3, in_channels, inter_channels, **kwargs)


__all__ = [
    "INSTANTIATIONS",
    "MODES",
    "NonLocal1d",
    "NonLocal2d",
    "NonLocal3d",
    "NonLocalNd",
    "resolve_sub_sample",
]
