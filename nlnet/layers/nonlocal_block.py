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

Paths: :func:`nlnet.functional.plan.plan_non_local` picks one per input shape and the functions
of :mod:`nlnet.functional.block_paths` evaluate it from this module's weights: the 1x1
convolutions on the channel-first maps with token views of their outputs (no copies), the pairwise
part through :func:`nlnet.functional.non_local`, ``W_theta``/``W_z`` re-associated around the
explicit matrix where that saves multiply-adds, and in eval mode a BatchNorm folded into ``W_z``.
A ``torch.fx`` trace keeps the textbook order. ``return_attention=True`` evaluates the explicit
path and also returns the weights ``f / C`` ``(B, N, N')`` over the row-major input grid (N) and
pooled grid (N'); in ``space``/``time`` mode the entries outside the query's frame / position are
exactly zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nlnet.functional.block_paths import (
    BlockGeometry,
    BlockWeights,
    empty_grid_path,
    fast_path,
    fold_batchnorm,
    non_finite_sample_guard,
    reassociated_path,
    reference_path,
)
from nlnet.functional.instantiations import form
from nlnet.functional.nonlocal_op import INSTANTIATIONS, Impl, Instantiation
from nlnet.functional.plan import NonLocalPlan, plan_non_local
from nlnet.functional.pos_embed import clipped_offset_index, sinusoidal_grid_encoding
from nlnet.functional.reassociated import pointwise
from nlnet.layers.block_norm import (
    NORMS,
    ChannelAffine,
    ChannelLayerNorm,
    NormKind,
    check_norm_args,
    make_norm,
)
from nlnet.layers.block_options import (
    MODES,
    RELATIVE_RADIUS,
    Mode,
    check_block_input,
    check_choices,
    check_temporal_groups,
    check_temporal_groups_option,
    positional_error,
    resolve_inter_channels,
    resolve_sub_sample,
)
from nlnet.layers.gate import GATES, GatedNorm

_CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}

# torch.fx.symbolic_trace records these as single calls evaluated at run time (they read sizes),
# so a traced block keeps its checks and computes the position encoding of each input's grid.
torch.fx.wrap("check_block_input")
torch.fx.wrap("check_temporal_groups")
torch.fx.wrap("sinusoidal_grid_encoding")
torch.fx.wrap("clipped_offset_index")


class NonLocalNd(nn.Module):
    """Non-local block z = W_z y + x (Eq. 6) for ``dim``-dimensional feature maps.

    Every argument after ``in_channels`` is keyword-only (``NonLocal2d(512, 2)`` is an error:
    write ``inter_channels=2`` or ``reduction=2``).

    Args:
        dim: Number of grid dimensions: 1 (sequence), 2 (image) or 3 (video).
        in_channels: Channels C of the input ``x``.
        inter_channels: Bottleneck width of ``theta``, ``phi`` and ``g``; default ``C // 2``.
        reduction: Alternative to ``inter_channels``: width ``max(C // reduction, 1)``.
        instantiation: ``"embedded_gaussian"`` (default), ``"gaussian"``, ``"dot_product"``,
            ``"concatenation"`` (Sec. 3.2, Eqs. 2-5) or ``"euclidean"`` (the Gaussian with
            Euclidean distance that Sec. 3.2 names as also applicable; on ``x`` itself).
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
        phi_init: ``"he"`` (default): ``phi`` gets its own He initialisation; ``"theta"``: ``phi``
            starts as a copy of ``theta`` (trained separately afterwards), so the initial score
            ``theta(x_i)^T phi(x_j) = (W x_i)^T (W x_j)`` is a similarity of the embedded features,
            as the plain Gaussian of Eq. 2 is of the features themselves, instead of an arbitrary
            bilinear form. Needs an instantiation with ``theta`` and ``phi`` (Eqs. 3-5).
        impl: ``"auto"`` (fastest exact path for the size), ``"fast"`` or ``"reference"``.
        pos: Position information, added to the inputs of ``theta`` and ``phi`` only (``g`` and
            the residual never see it, so a new block is still the identity): ``"none"``
            (default: the paper's block, Eq. 1 is a sum over a *set* of positions),
            ``"sincos"`` (a fixed sinusoidal encoding of the grid coordinates,
            :func:`~nlnet.functional.pos_embed.sinusoidal_grid_encoding`) or ``"learned"`` (that
            encoding through a learned ``C x C`` map ``pos_proj``, initialised to the identity)
            or ``"relative"`` (softmax forms: a learned bias ``rel_bias`` on the logits for each
            clipped offset between the query's key cell and the key, initialised to 0; evaluated
            on the explicit path).
        init: How the new block is made the identity: ``"bn_zero"`` (default, Sec. 4.1: the
            norm's scale at 0) or ``"w_z"`` (the practitioner's guide: ``W_z`` at 0, the norm's
            scale at 1). Not with ``gate``, which is its own initialisation.
        gamma_init: The start of the norm's scale (``init="bn_zero"``) or of the scalar gate
            (``gate="scalar"``): 0 (default, the paper's) makes a new block exactly the
            identity; a small value (e.g. 0.1) lets gradients reach ``theta``, ``phi`` and ``g``
            from the first step (docs/nonlocal.md, "When the block stays closed").

    Shape:
        Input ``(B, C, *grid)``; output the same. With ``return_attention=True`` also the weights
        ``(B, N, N')``.

    Non-finite inputs: a NaN or infinity anywhere in a sample makes that sample's whole output
    NaN, on every path (the explicit matrix would spread it through zero weights anyway).
    """

    #: Ends the error of an input of other channels: where ``in_channels`` came from (set by
    #: :func:`nlnet.models.surgery.insert_non_local` when it inferred them).
    channels_hint: str = ""

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
        phi_init: Literal["he", "theta"] = "he",
        pos: Literal["none", "sincos", "learned"] = "none",
        init: Literal["bn_zero", "w_z"] = "bn_zero",
        gamma_init: float = 0.0,
    ) -> None:
        super().__init__()
        if args:
            raise positional_error(type(self).__name__, args)
        if dim not in (1, 2, 3):
            raise ValueError(f"dim must be 1, 2 or 3, got {dim}")
        inter_channels = resolve_inter_channels(in_channels, inter_channels, reduction)
        check_norm_args(norm, in_channels, norm_eps, norm_momentum, norm_groups)
        if gate not in GATES:
            raise ValueError(f"gate must be one of {GATES}, got {gate!r}")
        check_choices(
            dim, in_channels, instantiation=instantiation, scale=scale,
            pool_position=pool_position, bias=bias, mode=mode, impl=impl, phi_init=phi_init,
            pos=pos, init=init, gate=gate, gamma_init=gamma_init,
        )  # fmt: skip
        if gamma_init and norm is None and gate is None:
            raise ValueError(
                f"gamma_init={gamma_init} needs a norm scale or gate='scalar'; with norm=None "
                "the block starts with W_z at zero"
            )
        kernel = resolve_sub_sample(sub_sample, dim)
        check_temporal_groups_option(temporal_groups, dim, kernel)

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
        if phi_init == "theta" and not self.form.embedded:
            raise ValueError(
                f"phi_init='theta' needs theta and phi embeddings; instantiation="
                f"{instantiation!r} has none"
            )
        self.phi_init = phi_init
        self.pos = pos
        self.init = init
        self.gamma_init = float(gamma_init)

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
        # pos="learned": the sinusoidal encoding through a learned map (initialised to identity)
        if pos == "learned":
            self.pos_proj = nn.Parameter(torch.empty(in_channels, in_channels))
        else:
            self.register_parameter("pos_proj", None)
        if pos == "relative":  # one bias per clipped offset (Shaw et al. 2018), zero at the start
            self.rel_bias = nn.Parameter(torch.zeros((2 * RELATIVE_RADIUS + 1,) * dim))
        else:
            self.register_parameter("rel_bias", None)
        self.reset_parameters()

    # ------------------------------------------------------------------ set-up
    def reset_parameters(self) -> None:
        """He initialisation of the embeddings (``phi`` a copy of ``theta`` with
        ``phi_init="theta"``); the norm's scale (or ``W_z`` itself with ``init="w_z"`` or
        without a norm) set to zero."""
        for m in (self.theta, self.phi, self.g, self.W_z):
            if m is not None:
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        if self.phi_init == "theta":  # a similarity at the start (see ``phi_init``)
            with torch.no_grad():
                self.phi.weight.copy_(self.theta.weight)
                if self.phi.bias is not None:
                    self.phi.bias.copy_(self.theta.bias)
        if self.w_f is not None:
            nn.init.normal_(self.w_f, std=math.sqrt(1.0 / self.w_f.numel()))
        if self.pos_proj is not None:  # starts as the fixed sinusoidal encoding
            with torch.no_grad():
                self.pos_proj.copy_(torch.eye(self.in_channels))
        if isinstance(self.norm, GatedNorm):
            # SAGAN's gamma = 0: the identity (layers/gate.py); gamma_init: a small start
            nn.init.constant_(self.norm.gamma, self.gamma_init)
        elif isinstance(self.norm, nn.Identity) or self.init == "w_z":
            nn.init.zeros_(self.W_z.weight)  # the guide's W_z = 0 (the norm keeps scale 1)
            if self.W_z.bias is not None:
                nn.init.zeros_(self.W_z.bias)
        else:
            # gamma = 0: the block starts as the identity (Sec. 4.1); gamma_init: a small start
            nn.init.constant_(self.norm.weight, self.gamma_init)
            nn.init.zeros_(self.norm.bias)

    def extra_repr(self) -> str:
        extra = f", temporal_groups={self.temporal_groups}" if self.temporal_groups else ""
        extra += f", pos={self.pos!r}" if self.pos != "none" else ""
        extra += f", init={self.init!r}" if self.init != "bn_zero" else ""
        extra += f", gamma_init={self.gamma_init}" if self.gamma_init else ""
        return (
            f"in_channels={self.in_channels}, inter_channels={self.inter_channels}, "
            f"instantiation={self.instantiation!r}, sub_sample={self.kernel}, "
            f"pool_position={self.pool_position!r}, mode={self.mode!r}, scale={self.scale}" + extra
        )

    @property
    def subsampled(self) -> bool:
        """Whether keys/values come from a pooled grid."""
        return any(k > 1 for k in self.kernel)

    @property
    def geometry(self) -> BlockGeometry:
        """The block's structure as its paths (:mod:`nlnet.functional.block_paths`) read it."""
        return BlockGeometry(
            self.dim, self.in_channels, self.inter_channels, self.instantiation, self.kernel,
            self.pool_position, self.mode, self.temporal_groups, self.scale, self.impl,
        )  # fmt: skip

    @property
    def weights(self) -> BlockWeights:
        """The projection weights that the paths read (no ``theta``/``phi`` on ``x`` itself)."""
        t, p = self.theta, self.phi
        w = (None,) * 4 if t is None else (t.weight, t.bias, p.weight, p.bias)
        return BlockWeights(self.g.weight, self.g.bias, *w, self.w_f)

    def position_input(self, x: Tensor) -> Tensor | None:
        """The input of ``theta`` and ``phi``: ``x`` plus the position encoding of its grid
        (``None`` with ``pos="none"``: ``x`` itself)."""
        if self.pos in ("none", "relative"):
            return None
        p = sinusoidal_grid_encoding(x, self.in_channels)  # (C, *grid), x's dtype and device
        if self.pos_proj is not None:  # a 1x1 map over the channels (also on an empty grid)
            p = F.linear(p.movedim(0, -1), self.pos_proj.to(p.dtype)).movedim(-1, 0)
        return x + p

    def relative_bias(self, x: Tensor) -> Tensor | None:
        """``(N, N')`` bias on the logits with ``pos="relative"`` (``None`` otherwise)."""
        if self.rel_bias is None:
            return None
        index = clipped_offset_index(x, self.kernel, RELATIVE_RADIUS)
        return self.rel_bias.flatten()[index]

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
        check_block_input(x, self.g.weight, self.dim, self.in_channels, self.kernel,
                          type(self).__name__, eager, self.channels_hint)  # fmt: skip
        if self.temporal_groups is not None:
            check_temporal_groups(x, self.temporal_groups)
        if eager and 0 in x.shape[2:]:
            return self._empty_grid(x, want_attention)
        attn = None
        guard = non_finite_sample_guard(x)  # one rule on every path: a NaN/inf makes it NaN
        explicit = want_attention or self.rel_bias is not None  # the bias needs the matrix
        plan = self.plan(x) if not explicit else NonLocalPlan("reference", "")
        fold = self._folded_output() if eager and plan.path != "reference" else None  # eval BN
        w, geo, xq = self.weights, self.geometry, self.position_input(x)
        if plan.path == "reference":  # the textbook steps (the only path with the weights)
            y, attn = reference_path(x, w, geo, want_attention, xq, self.relative_bias(x))
        elif plan.path == "reassociated":  # (a torch.fx trace keeps the textbook order)
            w_z, b_z = fold if fold is not None else (self.W_z.weight, self.W_z.bias)
            wz = reassociated_path(x, w, geo, w_z, b_z, plan.reassociate, xq)  # (B, C, N), fresh
            wz = wz.add_(guard.to(wz.dtype)).unflatten(2, x.shape[2:])  # in place: one C x N map
            return (wz if fold is not None else self.norm(wz)) + x
        else:
            y = fast_path(x, w, geo, plan.path, plan.op_impl, xq)
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

    def _folded_output(self) -> tuple[Tensor, Tensor] | None:
        """``(weight, bias)`` of ``BN(W_z y)`` as one 1x1 projection for an evaluating BatchNorm
        (:func:`~nlnet.functional.block_paths.fold_batchnorm`); ``None`` in training or without
        running statistics."""
        bn = self.norm
        if not isinstance(bn, nn.modules.batchnorm._BatchNorm) or bn.training:
            return None
        if bn.running_mean is None or bn.running_var is None:
            return None
        return fold_batchnorm(
            self.W_z.weight, self.W_z.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight,
            bn.bias,
        )  # fmt: skip

    def _empty_grid(self, x: Tensor, want_attention: bool) -> Tensor | tuple[Tensor, Tensor]:
        """The block on a grid with an axis of size 0: ``z = norm(W_z y) + x`` is the empty
        tensor of the shape of ``x``, as PyTorch's own layers return for empty inputs; every
        parameter gets a zero gradient and BatchNorm treats the empty map as it treats an empty
        batch (running statistics kept). See
        :func:`~nlnet.functional.block_paths.empty_grid_path`."""
        wz, attn = empty_grid_path(
            x, self.weights, self.geometry, self.W_z.weight, self.W_z.bias, want_attention,
            self.position_input(x),
        )  # fmt: skip
        if isinstance(self.norm, nn.GroupNorm):  # F.group_norm rejects empty grids
            shape = (1, -1) + (1,) * self.dim
            wz = wz * self.norm.weight.view(shape) + self.norm.bias.view(shape)
        else:
            wz = self.norm(wz)
        z = wz + x
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
