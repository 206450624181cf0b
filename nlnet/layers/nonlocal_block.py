"""The non-local block z = W_z y + x (Wang et al., CVPR 2018, Eq. 6, Figure 2) in 1D, 2D and 3D.

One implementation, :class:`NonLocalNd`, serves :class:`NonLocal1d` (sequences ``(B, C, L)``),
:class:`NonLocal2d` (images ``(B, C, H, W)``) and :class:`NonLocal3d` (videos ``(B, C, T, H, W)``).

Design, following Sec. 3.3 "Implementation of Non-local Blocks" and Sec. 4.1 of
Wang et al., CVPR 2018, arXiv 1711.07971:

* bottleneck: ``theta``, ``phi`` and ``g`` are 1x1(x1) convolutions to ``inter_channels`` (half of
  ``in_channels`` by default; ``reduction=r`` gives ``in_channels // r`` as in the practitioner's
  guide "Self-Attention for Images - Non-Local Networks"); ``W_z`` maps back to ``in_channels``;
* subsampling: keys and values come from a max-pooled grid (``sub_sample``; the paper pools space
  only, kernel (1, 2, 2) for video). By default the pooling is applied to ``x`` *before* the ``phi``
  and ``g`` convolutions, as the released Caffe2 code does; ``pool_position="after"`` pools the
  outputs of ``phi`` and ``g`` instead, as the paper's text ("a max pooling layer after phi and g")
  and mmcv/AlexHex7 implementations do. The two differ because max pooling does not commute with a
  1x1 convolution. Pooling uses floor mode: a size smaller than the kernel (but not 0) is an
  error;
* empty inputs: an empty batch or a grid with an axis of size 0 (N = N' = 0) gives the empty
  output of the input's shape, with zero parameter gradients, on every path;
* initial identity: ``norm="bn"`` puts a BatchNorm after ``W_z`` with its scale initialised to zero
  (Sec. 4.1, following Goyal et al.), so a new block returns its input exactly; the other norms
  (GroupNorm, channel LayerNorm, affine-only) start the same way; with ``norm=None`` ``W_z`` itself
  is zero-initialised. The other layers use He (MSRA) initialisation;
* 3D ``mode`` (Table 2d): ``"spacetime"`` sums over all positions; ``"space"`` only over the query's
  own frame; ``"time"`` only over the query's own spatial position across frames. With subsampling
  a query uses the keys of the pooled cell that contains it (frame ``t // k_t`` in ``space`` mode,
  cell ``(h // k_h, w // k_w)`` in ``time`` mode; a remainder row/column left by floor pooling uses
  the last cell).

Fast path: the 1x1 convolutions run on the channel-first maps and hand the pairwise part token
views of their outputs (no copies; measured in ``benchmarks/nonlocal_block.py``, this beats fused
matmuls on the token layout, which pay a weight concatenation, an input copy and a materialised
per-sample weight gradient), the pairwise part goes through :func:`nlnet.functional.non_local`
(which never builds the N x N' matrix unless asked and returns y stored channel-first), and
``W_z`` is the 1x1 convolution on that layout. Where ``impl="auto"`` uses the explicit matrix and
it saves multiply-adds, ``W_theta`` and ``W_z`` are moved onto the pooled grid
(:mod:`nlnet.functional.reassociated`, exact by linearity); in eval mode a BatchNorm after ``W_z``
is folded into it; the max pooling is :func:`nlnet.functional.pooling.max_pool` (equal to
PyTorch's, faster on the CPU). A ``torch.fx`` trace keeps the textbook order. ``return_attention=True`` evaluates the explicit
reference path and also returns the weights ``f / C`` as ``(B, N, N')`` over the row-major
flattened input grid (N) and pooled grid (N'); in ``space``/``time`` mode the entries outside the
query's frame / position are exactly zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nlnet.functional.instantiations import form
from nlnet.functional.nonlocal_op import (
    INSTANTIATIONS,
    Impl,
    Instantiation,
    check_instantiation,
    check_scale,
    concatenation_non_local,
    non_local,
)
from nlnet.functional.plan import NonLocalPlan, plan_non_local
from nlnet.functional.pooling import max_pool
from nlnet.functional.reassociated import pointwise, reassociated_non_local
from nlnet.layers.gate import GATES, GatedNorm

Mode = Literal["spacetime", "space", "time"]
MODES: tuple[str, ...] = ("spacetime", "space", "time")
NormKind = Literal["bn", "gn", "ln", "affine"]
NORMS: tuple[str | None, ...] = ("bn", "gn", "ln", "affine", None)

_CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
_BN = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}
_LAYOUT = {1: "(B, C, L)", 2: "(B, C, H, W)", 3: "(B, C, T, H, W)"}

# torch.fx.symbolic_trace records these as single calls evaluated at run time (they read sizes
# and pick paths by size), so a traced block keeps its checks and its size-dependent choices.
torch.fx.wrap("non_local")
torch.fx.wrap("concatenation_non_local")
torch.fx.wrap("max_pool")


class ChannelAffine(nn.Module):
    """Per-channel scale and shift ``gamma_c x + beta_c`` (the released code's affine-only norm).

    Args:
        num_channels: Channels C (dim 1 of the input).
        dim: Number of grid dimensions after the channel dim (1, 2 or 3).
    """

    def __init__(self, num_channels: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_channels))
        self.bias = nn.Parameter(torch.zeros(num_channels))
        self._shape = (1, num_channels) + (1,) * dim

    def forward(self, x: Tensor) -> Tensor:
        return x * self.weight.view(self._shape) + self.bias.view(self._shape)


class ChannelLayerNorm(nn.Module):
    """LayerNorm over the channels at every position (``(B, C, *grid)``, as ConvNeXt's).

    Args:
        num_channels: Channels C.
        eps: Added to the variance.
    """

    def __init__(self, num_channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_channels))
        self.bias = nn.Parameter(torch.zeros(num_channels))
        self.eps = eps
        self.num_channels = num_channels

    def forward(self, x: Tensor) -> Tensor:
        y = F.layer_norm(x.movedim(1, -1), (self.num_channels,), self.weight, self.bias, self.eps)
        return y.movedim(-1, 1)


def make_norm(
    norm: str | None,
    dim: int,
    channels: int,
    *,
    eps: float = 1e-5,
    momentum: float | None = 0.1,
    groups: int | None = None,
) -> nn.Module:
    """The norm after ``W_z``: ``"bn"``, ``"gn"`` (GroupNorm), ``"ln"`` (LayerNorm over channels),
    ``"affine"`` (per-channel scale and shift) or ``None`` (identity). See :class:`NonLocalNd`."""
    if norm == "bn":
        return _BN[dim](channels, eps=eps, momentum=momentum)
    if norm == "gn":
        return nn.GroupNorm(groups if groups is not None else math.gcd(32, channels), channels, eps)
    if norm == "ln":
        return ChannelLayerNorm(channels, eps)
    if norm == "affine":
        return ChannelAffine(channels, dim)
    return nn.Identity()


def _check_block_input(
    x: Tensor,
    weight: Tensor,
    dim: int,
    channels: int,
    kernel: tuple[int, ...],
    name: str,
    allow_empty: bool = True,
) -> None:
    """The block's input checks (a leaf call under ``torch.fx``: it reads sizes).

    ``allow_empty=False`` (what a ``torch.fx`` trace records) refuses a grid with an axis of size
    0: the traced graph has no branch for it, only the eager block returns its empty output.
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != dim + 2:
        raise ValueError(
            f"{name} expects x of shape {_LAYOUT[dim]} ({dim + 2} dims), got shape {tuple(x.shape)}"
        )
    if x.shape[1] != channels:
        raise ValueError(
            f"{name} was built for in_channels={channels}, got x with {x.shape[1]} channels "
            f"(shape {tuple(x.shape)})"
        )
    if not x.is_floating_point():
        raise TypeError(f"{name} expects a floating-point x, got dtype {x.dtype}")
    if x.dtype != weight.dtype and not torch.is_autocast_enabled(x.device.type):
        raise TypeError(
            f"{name} has {weight.dtype} parameters but x is {x.dtype}: convert one of them "
            f"(block.to({x.dtype}) or x.to({weight.dtype})), or run under torch.autocast"
        )
    size = tuple(x.shape[2:])
    if 0 in size and not allow_empty:
        raise ValueError(
            f"{name} got an empty grid {size} (x of shape {tuple(x.shape)}) in a torch.fx-traced "
            "graph, which has no branch for it; the eager block returns an empty output"
        )
    for axis, (s, k) in enumerate(zip(size, kernel)):
        if k > 1 and 0 < s < k:  # size 0 is an empty grid (an empty output), not too small
            raise ValueError(
                f"input size {size} is too small for the sub_sample kernel {kernel}: "
                f"dimension {axis} has {s} < {k} positions"
            )


def _check_temporal_groups(x: Tensor, groups: int) -> None:
    if x.shape[2] % groups:
        raise ValueError(
            f"temporal_groups={groups} must divide the number of frames T, got T = {x.shape[2]}"
        )


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


torch.fx.wrap("_check_block_input")
torch.fx.wrap("_check_temporal_groups")
torch.fx.wrap("_cell_index")
torch.fx.wrap("_group_mask")


def _non_finite_guard(x: Tensor) -> Tensor:
    """``(B, 1, 1)``: 0 for a sample whose input is finite, NaN for one with a NaN/inf in it."""
    dt = torch.promote_types(x.dtype, torch.float32)
    return (x.flatten(1).sum(1, dtype=dt) * 0).view(-1, 1, 1)


def _positional_error(name: str, extra: tuple) -> TypeError:
    first = extra[0]
    return TypeError(
        f"{name} takes in_channels as its only positional argument; the others are "
        f"keyword-only, got {len(extra)} more positional ({', '.join(map(repr, extra))}). Write "
        f"inter_channels={first!r} for a bottleneck of width {first!r}, or reduction={first!r} "
        f"for in_channels // {first!r} (the practitioner's guide's NonLocalBlock(C, {first!r}) "
        f"means reduction={first!r})"
    )


def _check_int(name: str, value, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


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

    Every argument after ``in_channels`` is keyword-only (``NonLocal2d(512, 2)`` is an error:
    write ``inter_channels=2`` or ``reduction=2``).

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
        bias: Whether ``theta``, ``phi`` and ``g`` have a bias (``False``: the released code's
            ``NO_BIAS`` option and the practitioner's guide).
        norm: The norm after ``W_z``, its scale initialised to zero so a new block is the
            identity (Sec. 4.1): ``"bn"`` (BatchNorm, default), ``"gn"`` (GroupNorm),
            ``"ln"`` (LayerNorm over the channels at each position), ``"affine"`` (per-channel
            scale and shift only, the released code's ``USE_AFFINE``); ``None``: no norm,
            ``W_z`` itself zero-initialised.
        gate: ``None`` (default) or ``"scalar"``: SAGAN's learnable scalar ``gamma`` initialised
            at 0, ``z = gamma * norm(W_z y) + x`` (:mod:`nlnet.layers.gate`); the norm then
            keeps its ordinary initialisation (scale 1) and ``W_z`` its He initialisation.
        norm_eps: ``eps`` of the norm (BN, GN, LN).
        norm_momentum: BatchNorm ``momentum`` (PyTorch convention: 0.1 = Caffe2's 0.9).
        norm_groups: GroupNorm groups; default ``gcd(32, C)``.
        mode: 3D only: ``"spacetime"`` (default), ``"space"`` or ``"time"`` (Table 2d).
        temporal_groups: 3D only: attention only within groups of this many consecutive frames
            (the released code's temporal grouping); ``T`` must be a multiple of it.
        scale: Logit scale of the softmax forms: ``True`` = 1/sqrt(d) (released code), ``False`` =
            the paper's equations, or a finite positive float.
        impl: ``"auto"`` (fastest exact path for the size), ``"fast"`` or ``"reference"``.

    Shape:
        Input ``(B, C, *grid)``; output the same. With ``return_attention=True`` also the weights
        ``(B, N, N')``.

    Non-finite inputs: a NaN or infinity anywhere in a sample makes that sample's whole output
    NaN, on every path (the explicit matrix would spread it through zero weights anyway).
    """

    def __init__(
        self,
        dim: int,
        in_channels: int,
        *args,
        inter_channels: int | None = None,
        reduction: int | None = None,
        instantiation: Instantiation = "embedded_gaussian",
        sub_sample: bool | int | Sequence[int] | None = True,
        pool_position: Literal["before", "after"] = "before",
        bias: bool = True,
        norm: NormKind | None = "bn",
        norm_eps: float = 1e-5,
        norm_momentum: float | None = 0.1,
        norm_groups: int | None = None,
        gate: str | None = None,
        mode: Mode = "spacetime",
        temporal_groups: int | None = None,
        scale: bool | float = True,
        impl: Impl = "auto",
    ) -> None:
        super().__init__()
        if args:
            raise _positional_error(type(self).__name__, args)
        if dim not in (1, 2, 3):
            raise ValueError(f"dim must be 1, 2 or 3, got {dim}")
        _check_int("in_channels", in_channels)
        if inter_channels is not None and reduction is not None:
            raise ValueError("give either inter_channels or reduction, not both")
        if reduction is not None:
            _check_int("reduction", reduction)
            inter_channels = max(in_channels // reduction, 1)
        elif inter_channels is None:
            inter_channels = max(in_channels // 2, 1)
        _check_int("inter_channels", inter_channels)
        check_instantiation(instantiation)
        check_scale(scale)
        if pool_position not in ("before", "after"):
            raise ValueError(f"pool_position must be 'before' or 'after', got {pool_position!r}")
        if not isinstance(bias, bool):
            raise TypeError(f"bias must be True or False, got {bias!r}")
        self._check_norm_args(norm, in_channels, norm_eps, norm_momentum, norm_groups)
        if gate not in GATES:
            raise ValueError(f"gate must be one of {GATES}, got {gate!r}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode != "spacetime" and dim != 3:
            raise ValueError(
                f"mode={mode!r} needs a 3D (video) block; a {dim}D block only has mode='spacetime'"
            )
        if impl not in ("auto", "fast", "reference"):
            raise ValueError(f"impl must be 'auto', 'fast' or 'reference', got {impl!r}")
        kernel = resolve_sub_sample(sub_sample, dim)
        if temporal_groups is not None:
            if dim != 3:
                raise ValueError(f"temporal_groups needs a 3D (video) block, got a {dim}D block")
            _check_int("temporal_groups", temporal_groups)
            if temporal_groups % kernel[0]:
                raise ValueError(
                    f"temporal_groups={temporal_groups} must be a multiple of the temporal "
                    f"sub_sample kernel {kernel[0]}"
                )

        self.dim = dim
        self.in_channels = in_channels
        self.inter_channels = inter_channels
        self.instantiation = instantiation
        self.kernel = kernel
        self.pool_position = pool_position
        self.mode = mode
        self.temporal_groups = temporal_groups
        self.scale = scale
        self.impl = impl
        self.form = form(instantiation)  # how the instantiation behaves (one table row)

        conv = _CONV[dim]
        if not self.form.embedded:  # Eq. 2: no embedding, f on x itself (Fig. 2 caption)
            self.theta = None
            self.phi = None
        else:
            self.theta = conv(in_channels, inter_channels, kernel_size=1, bias=bias)
            self.phi = conv(in_channels, inter_channels, kernel_size=1, bias=bias)
        self.g = conv(in_channels, inter_channels, kernel_size=1, bias=bias)
        if self.form.scores == "concat":  # Eq. 5: w_f^T [theta_i, phi_j]
            self.w_f = nn.Parameter(torch.empty(2 * inter_channels))
        else:
            self.register_parameter("w_f", None)
        self.W_z = conv(inter_channels, in_channels, kernel_size=1, bias=norm is None)
        self.norm = make_norm(
            norm, dim, in_channels, eps=norm_eps, momentum=norm_momentum, groups=norm_groups
        )
        if gate == "scalar":
            self.norm = GatedNorm(self.norm)
        self.reset_parameters()

    @staticmethod
    def _check_norm_args(norm, channels: int, eps, momentum, groups) -> None:
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
        if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
            raise ValueError(f"norm_eps must be a finite positive float, got {eps!r}")
        if momentum is not None and not (
            isinstance(momentum, (int, float)) and 0.0 <= momentum <= 1.0
        ):
            raise ValueError(f"norm_momentum must be in [0, 1] or None, got {momentum!r}")
        if groups is not None:
            if norm != "gn":
                raise ValueError(f"norm_groups applies to norm='gn' only, got norm={norm!r}")
            _check_int("norm_groups", groups)
            if channels % groups:
                raise ValueError(
                    f"norm_groups={groups} must divide in_channels={channels} for GroupNorm"
                )

    # ------------------------------------------------------------------ set-up
    def reset_parameters(self) -> None:
        """He initialisation of the embeddings; the norm's scale (or W_z itself) set to zero."""
        for m in (self.theta, self.phi, self.g, self.W_z):
            if m is not None:
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        if self.w_f is not None:
            nn.init.normal_(self.w_f, std=math.sqrt(1.0 / self.w_f.numel()))
        if isinstance(self.norm, GatedNorm):
            nn.init.zeros_(self.norm.gamma)  # SAGAN's gamma = 0: the identity (layers/gate.py)
        elif isinstance(self.norm, nn.Identity):
            nn.init.zeros_(self.W_z.weight)
            if self.W_z.bias is not None:
                nn.init.zeros_(self.W_z.bias)
        else:
            nn.init.zeros_(self.norm.weight)  # gamma = 0: the block starts as the identity
            nn.init.zeros_(self.norm.bias)

    def extra_repr(self) -> str:
        extra = f", temporal_groups={self.temporal_groups}" if self.temporal_groups else ""
        return (
            f"in_channels={self.in_channels}, inter_channels={self.inter_channels}, "
            f"instantiation={self.instantiation!r}, sub_sample={self.kernel}, "
            f"pool_position={self.pool_position!r}, mode={self.mode!r}, scale={self.scale}" + extra
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
            if k > 1 and 0 < s < k:
                raise ValueError(
                    f"input size {size} is too small for the sub_sample kernel {self.kernel}: "
                    f"dimension {axis} has {s} < {k} positions"
                )
        return tuple(s // k for s, k in zip(size, self.kernel))

    # ----------------------------------------------------------------- forward
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

    def plan(self, x: Tensor) -> NonLocalPlan:
        """How :meth:`forward` evaluates ``x`` without attention weights: the
        :func:`~nlnet.functional.plan.plan_non_local` of its shape (cached per shape); a
        ``torch.fx`` trace gets the size-free plan and the ops decide at run time."""
        if isinstance(x, torch.fx.Proxy):
            return plan_non_local(
                self.instantiation, None, self.kernel, self.in_channels, self.inter_channels,
                mode=self.mode, pool_position=self.pool_position, impl=self.impl,
            )  # fmt: skip
        training = torch.is_grad_enabled() and (x.requires_grad or self.g.weight.requires_grad)
        return plan_non_local(
            self.instantiation, tuple(x.shape[2:]), self.kernel,
            self.in_channels, self.inter_channels, mode=self.mode,
            temporal_groups=self.temporal_groups, pool_position=self.pool_position,
            impl=self.impl, device=x.device, training=training,
        )  # fmt: skip

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

    def forward(self, x: Tensor, return_attention: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Apply the block.

        Args:
            x: Input ``(B, C, *grid)``.
            return_attention: ``True`` to also return the weights ``f / C`` of shape
                ``(B, N, N')`` (explicit path).

        Returns:
            ``z = norm(W_z y) + x`` with the shape of ``x``, and the weights if asked.
        """
        if not isinstance(return_attention, (bool, torch.fx.Proxy)):
            raise TypeError(f"return_attention must be True or False, got {return_attention!r}")
        want_attention = return_attention is True  # (a torch.fx trace takes the default path)
        eager = not isinstance(x, torch.fx.Proxy)  # a trace records no branch on sizes
        _check_block_input(
            x, self.g.weight, self.dim, self.in_channels, self.kernel, type(self).__name__, eager
        )
        if self.temporal_groups is not None:
            _check_temporal_groups(x, self.temporal_groups)
        if eager and 0 in x.shape[2:]:
            return self._empty_grid(x, want_attention)
        attn = None
        guard = _non_finite_guard(x)  # one rule on every path: a NaN/inf makes its sample NaN
        plan = self.plan(x) if not want_attention else NonLocalPlan("reference", "")
        fold = self._folded_output() if eager and plan.path != "reference" else None  # eval BN
        if plan.path == "reference":  # the textbook steps (the only path with the weights)
            y, attn = self._reference(x, want_attention)
        elif plan.path == "reassociated":  # (a torch.fx trace keeps the textbook order)
            w_z, b_z = fold if fold is not None else (self.W_z.weight, self.W_z.bias)
            wz = self._reassociated(x, w_z, b_z, plan.reassociate)  # W_z y (B, C, N), fresh
            wz = wz.add_(guard.to(wz.dtype)).unflatten(2, x.shape[2:])  # in place: one C x N map
            return (wz if fold is not None else self.norm(wz)) + x
        else:
            y = self._fast(x, plan)
        y = y + guard.to(y.dtype)  # (W_z spreads a NaN row of y over the sample)
        # W_z on the channel-first map (B, d_v, *grid): the 1x1 convolution, as theta/phi/g.
        # The fast paths return y token-major (B, N, d_v): its transpose would look channels-last
        # to the convolution, whose output then takes BatchNorm's slow channels-last backward
        # (measured 75 vs 13 ms at 56x56); the explicit path's y is already channel-first.
        y = y.transpose(1, 2).contiguous()  # (B, d_v, N)
        if fold is not None:
            return pointwise(y, *fold).unflatten(2, x.shape[2:]) + x
        z = self.norm(self.W_z(y.unflatten(2, x.shape[2:]))) + x
        return (z, attn) if want_attention else z


class NonLocal1d(NonLocalNd):
    """Non-local block for sequences ``(B, C, L)``; see :class:`NonLocalNd` for the arguments."""

    def __init__(self, in_channels: int, *args, **kwargs) -> None:
        super().__init__(1, in_channels, *args, **kwargs)


class NonLocal2d(NonLocalNd):
    """Non-local block for images ``(B, C, H, W)``; see :class:`NonLocalNd` for the arguments."""

    def __init__(self, in_channels: int, *args, **kwargs) -> None:
        super().__init__(2, in_channels, *args, **kwargs)


class NonLocal3d(NonLocalNd):
    """Non-local block for videos ``(B, C, T, H, W)`` with ``mode`` space/time/spacetime."""

    def __init__(self, in_channels: int, *args, **kwargs) -> None:
        super().__init__(3, in_channels, *args, **kwargs)


__all__ = [
    "INSTANTIATIONS",
    "MODES",
    "NORMS",
    "ChannelAffine",
    "ChannelLayerNorm",
    "NonLocal1d",
    "NonLocal2d",
    "NonLocal3d",
    "NonLocalNd",
    "make_norm",
    "resolve_sub_sample",
]
