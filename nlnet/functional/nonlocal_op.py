"""The generic non-local operation (Wang et al., CVPR 2018, Eq. 1) and its four instantiations.

    y_i = 1 / C(x) * sum_j f(x_i, x_j) g(x_j)                                   (Eq. 1)

Everything here works on *token* tensors: queries ``theta`` of shape ``(..., N, d)``, keys ``phi`` of
shape ``(..., N', d)`` and values ``g`` of shape ``(..., N', d_v)``, where ``...`` is ``(batch,)`` or
``(batch, heads)`` and ``N'`` may be smaller than ``N`` when the keys/values come from a subsampled
grid (the paper's subsampling trick, Sec. 3.3). The embeddings themselves (the 1x1 convolutions
``W_theta``, ``W_phi``, ``W_g``) live in :mod:`nlnet.layers.nonlocal_block`.

Instantiations (Sec. 3.2, "Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971)):

=====================  =====================================  ===============
``instantiation``      pairwise function f                    normaliser C
=====================  =====================================  ===============
``gaussian``           exp(x_i^T x_j)                 (Eq. 2)  sum_j f
``embedded_gaussian``  exp(theta_i^T phi_j)           (Eq. 3)  sum_j f
``dot_product``        theta_i^T phi_j                (Eq. 4)  N'
``concatenation``      ReLU(w_f^T [theta_i, phi_j])   (Eq. 5)  N'
=====================  =====================================  ===============

For the two softmax forms the operation is ``softmax(s * theta phi^T) g``; ``gaussian`` differs from
``embedded_gaussian`` only in what the caller passes (the raw features instead of embeddings).

**Logit scale.** ``scale=True`` (the default) multiplies the logits by ``1/sqrt(d)``, as the released
Caffe2 code did in every configuration (``NONLOCAL.USE_SCALE``), which is what produced the paper's
numbers; it also keeps the softmax out of saturation for wide embeddings (d = 512 at res4) and in
bf16. ``scale=False`` gives Eqs. 2-3 as printed. A float sets the factor explicitly.

**Two paths.** ``impl="reference"`` builds the explicit ``N x N'`` matrix of ``f / C`` (the readable
form of Eq. 1, also the only path that can return the attention map). ``impl="fast"`` never builds it:

* softmax forms: :func:`torch.nn.functional.scaled_dot_product_attention` (flash/memory-efficient
  kernels, O(N) memory);
* ``dot_product``: associativity, ``theta (phi^T g) / N'`` in O((N + N') d d_v);
* ``concatenation``: ``w_f^T [theta_i, phi_j] = a_i + b_j`` with ``a = theta w_theta`` and
  ``b = phi w_phi``, so ``ReLU(a_i + b_j) > 0`` exactly for the keys with ``b_j > -a_i``. Sorting ``b``
  once turns that set into a prefix, and with prefix sums ``G_k = sum g`` and ``BG_k = sum b g`` over the
  sorted keys, ``y_i = (a_i G_k + BG_k) / N'`` with ``k = #{j : b_j > -a_i}`` (a binary search):
  O(N' log N' + N log N' + (N + N') d_v).

``impl="auto"`` picks per call the path that is cheaper for the size (see :func:`choose_impl`).
All paths are differentiable and agree to float64 round-off (``tests/functional``).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from nlnet.functional.attention import attention_weights, check_mask

Instantiation = Literal["gaussian", "embedded_gaussian", "dot_product", "concatenation"]
Impl = Literal["auto", "fast", "reference"]

INSTANTIATIONS: tuple[str, ...] = ("gaussian", "embedded_gaussian", "dot_product", "concatenation")
SOFTMAX_FORMS: tuple[str, ...] = ("gaussian", "embedded_gaussian")

#: Below this many pairwise entries (N * N' per batch element and head) the softmax forms train
#: faster with the explicit matrix on the CPU: PyTorch's CPU flash backward costs ~2.6x its forward
#: (measured in ``benchmarks/nonlocal_block.py``; the crossover is near N = N' = 6000).
CPU_SDPA_TRAIN_MIN_ENTRIES: int = 4096 * 4096
#: The same crossover when the value width differs from the query width (``gaussian`` in a block:
#: d = C, d_v = C/2): the flash kernel needs the values zero-padded to width d, which doubles the
#: cost of its P V products; measured 0.73x at N = 6272 and 0.77x at N = 12544 against the
#: explicit path, so the fast path is used only where the explicit matrix gets too big to hold.
CPU_SDPA_TRAIN_MIN_ENTRIES_PADDED: int = 16384 * 16384
#: The sort-based concatenation path pays a fixed sorting/gather overhead; below this many
#: entries the explicit matrix is cheaper.
CONCAT_FAST_MIN_ENTRIES: int = 64 * 64


def check_instantiation(instantiation: str) -> None:
    """Raise a ``ValueError`` naming the valid instantiations if ``instantiation`` is unknown."""
    if instantiation not in INSTANTIATIONS:
        raise ValueError(f"instantiation must be one of {INSTANTIATIONS}, got {instantiation!r}")


def logit_scale(scale: bool | float, d: int) -> float:
    """The factor applied to the softmax logits: ``1/sqrt(d)`` for ``True``, 1 for ``False``."""
    if isinstance(scale, bool):
        return 1.0 / math.sqrt(d) if scale else 1.0
    if not (isinstance(scale, (int, float)) and scale > 0):
        raise ValueError(f"scale must be a bool or a positive float, got {scale!r}")
    return float(scale)


def choose_impl(
    instantiation: str,
    n: int,
    n_keys: int,
    d: int,
    d_v: int,
    *,
    device: torch.device,
    training: bool,
) -> Literal["fast", "reference"]:
    """Pick the cheaper path for one call of :func:`non_local` (``impl="auto"``).

    Args:
        instantiation: One of :data:`INSTANTIATIONS`.
        n: Number of query positions N.
        n_keys: Number of key/value positions N'.
        d: Query/key width.
        d_v: Value width.
        device: Where the tensors live.
        training: Whether a backward pass will follow (autograd is recording).

    Returns:
        ``"fast"`` or ``"reference"``.
    """
    entries = n * n_keys
    if instantiation in SOFTMAX_FORMS:
        limit = CPU_SDPA_TRAIN_MIN_ENTRIES if d == d_v else CPU_SDPA_TRAIN_MIN_ENTRIES_PADDED
        if device.type == "cpu" and training and entries < limit:
            return "reference"
        return "fast"
    if instantiation == "dot_product":
        # theta (phi^T g): (N' + N) d d_v  vs  (theta phi^T) g: N N' (d + d_v) multiply-adds.
        return "fast" if (n_keys + n) * d * d_v < entries * (d + d_v) else "reference"
    return "fast" if entries >= CONCAT_FAST_MIN_ENTRIES else "reference"


def _check_tokens(theta: Tensor, phi: Tensor, g: Tensor, w_f: Tensor | None, inst: str) -> None:
    for name, t in (("theta", theta), ("phi", phi), ("g", g)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(
                f"{name} must have shape (..., positions, channels), got {tuple(t.shape)}"
            )
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
    if theta.shape[:-2] != phi.shape[:-2] or phi.shape[:-2] != g.shape[:-2]:
        raise ValueError(
            "theta, phi and g must share their leading (batch[, heads]) dimensions, got "
            f"{tuple(theta.shape)}, {tuple(phi.shape)}, {tuple(g.shape)}"
        )
    if phi.shape[-2] != g.shape[-2]:
        raise ValueError(
            f"phi and g must have the same number of key positions N', got {phi.shape[-2]} "
            f"and {g.shape[-2]}"
        )
    if theta.shape[-1] != phi.shape[-1]:
        raise ValueError(
            f"theta and phi must have the same width d, got {theta.shape[-1]} and {phi.shape[-1]}"
        )
    if inst == "concatenation":
        d = theta.shape[-1]
        if w_f is None:
            raise ValueError("w_f (a weight vector of length 2*d) is required for concatenation")
        if w_f.shape != (2 * d,):
            raise ValueError(f"w_f must have shape (2*d,) = ({2 * d},), got {tuple(w_f.shape)}")


def pairwise_weights(
    theta: Tensor,
    phi: Tensor,
    instantiation: Instantiation = "embedded_gaussian",
    *,
    scale: bool | float = True,
    w_f: Tensor | None = None,
    mask: Tensor | None = None,
) -> Tensor:
    """The explicit normalised pairwise matrix ``f(x_i, x_j) / C(x)`` of shape ``(..., N, N')``.

    Args:
        theta: Queries ``(..., N, d)`` (the raw features for ``gaussian``).
        phi: Keys ``(..., N', d)``.
        instantiation: One of :data:`INSTANTIATIONS`.
        scale: Logit scale of the softmax forms (see the module docstring).
        w_f: Concatenation only: the weight vector ``(2d,)`` of Eq. 5, ``[w_theta; w_phi]``.
        mask: Optional mask broadcastable to ``(..., N, N')`` in nlnet's convention (see
            :mod:`nlnet.functional.attention`): boolean, True where query ``i`` may use key ``j``;
            or, for the softmax forms, an additive float mask. Masked pairs get weight exactly 0;
            the normaliser of ``dot_product`` and ``concatenation`` becomes the number of allowed
            keys of each row. A row with every key masked gets all-zero weights (no NaN).

    Returns:
        The weights ``(..., N, N')``; for the softmax forms every row that has an allowed key
        sums to 1.
    """
    check_instantiation(instantiation)
    check_mask(mask, theta.shape[-2], phi.shape[-2])
    if instantiation in SOFTMAX_FORMS:
        # Low-precision inputs: logits and softmax in fp32 so that large logits cannot overflow.
        dt = torch.promote_types(theta.dtype, torch.float32)
        s = logit_scale(scale, theta.shape[-1])
        if mask is None:  # the fused softmax kernel: this is the hot path at small sizes
            logits = torch.matmul(theta.to(dt), phi.to(dt).transpose(-2, -1)) * s
            return logits.softmax(dim=-1).to(theta.dtype)
        return attention_weights(theta.to(dt), phi.to(dt), mask, scale=s).to(theta.dtype)
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be boolean for {instantiation!r} (additive masks apply to the softmax "
            f"forms only), got {mask.dtype}"
        )
    if instantiation == "dot_product":
        f = torch.matmul(theta, phi.transpose(-2, -1))  # (..., N, N')
    else:  # concatenation: ReLU(w_theta^T theta_i + w_phi^T phi_j), Eq. 5
        d = theta.shape[-1]
        a = torch.matmul(theta, w_f[:d])  # (..., N)
        b = torch.matmul(phi, w_f[d:])  # (..., N')
        f = F.relu(a.unsqueeze(-1) + b.unsqueeze(-2))
    if mask is None:
        return f / phi.shape[-2]
    f = f.masked_fill(~mask, 0.0)
    count = mask.sum(dim=-1, keepdim=True).clamp_min(1).to(f.dtype)
    return f / count


def concatenation_from_scores(a: Tensor, b: Tensor, g: Tensor) -> Tensor:
    """``y_i = (1/N') sum_j ReLU(a_i + b_j) g_j`` without the N x N' matrix (Eq. 5, C = N').

    With ``a = theta w_theta`` and ``b = phi w_phi`` this is the concatenation instantiation:
    ``w_f^T [theta_i, phi_j] = a_i + b_j``. Sorting ``b`` (descending) makes the keys with
    ``b_j > -a_i`` a prefix of length ``k_i`` (a binary search), and prefix sums
    ``G_k = sum g``, ``BG_k = sum b g`` give ``y_i = (a_i G_{k_i} + BG_{k_i}) / N'``.
    Cost O(N' log N' + N log N' + (N + N') d_v); exact, differentiable in ``a``, ``b`` and ``g``.

    Args:
        a: Query scores ``(..., N)``.
        b: Key scores ``(..., N')``.
        g: Values ``(..., N', d_v)``.

    Returns:
        ``y`` of shape ``(..., N, d_v)`` in the dtype of ``g``.
    """
    n_keys = b.shape[-1]
    out_dtype = g.dtype
    # Prefix sums in low precision lose everything: accumulate in at least fp32.
    dt = torch.promote_types(out_dtype, torch.float32)
    a, b, g = a.to(dt), b.to(dt), g.to(dt)
    b_sorted, order = torch.sort(b, dim=-1, descending=True)  # (..., N')
    g_sorted = torch.gather(g, -2, order.unsqueeze(-1).expand_as(g))  # (..., N', d_v)
    zero = g.new_zeros(g.shape[:-2] + (1, g.shape[-1]))
    # G[k] = sum of the first k sorted g; BG[k] = sum of the first k sorted b*g; k = 0..N'.
    G = torch.cat([zero, g_sorted.cumsum(dim=-2)], dim=-2)  # (..., N'+1, d_v)
    BG = torch.cat([zero, (b_sorted.unsqueeze(-1) * g_sorted).cumsum(dim=-2)], dim=-2)
    # k_i = #{j : b_j > -a_i}; searchsorted wants ascending order, so search -b (ascending)
    # for a_i: the count of -b_j < a_i is the left insertion index.
    with torch.no_grad():
        k = torch.searchsorted((-b_sorted).contiguous(), a.contiguous(), right=False)  # (..., N)
    idx = k.unsqueeze(-1).expand(k.shape + (g.shape[-1],))
    y = (a.unsqueeze(-1) * torch.gather(G, -2, idx) + torch.gather(BG, -2, idx)) / n_keys
    return y.to(out_dtype)


def non_local(
    theta: Tensor,
    phi: Tensor,
    g: Tensor,
    instantiation: Instantiation = "embedded_gaussian",
    *,
    scale: bool | float = True,
    w_f: Tensor | None = None,
    mask: Tensor | None = None,
    return_attention: bool = False,
    impl: Impl = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
    """The non-local operation y = (1/C) sum_j f(x_i, x_j) g(x_j) (Eq. 1) on token tensors.

    Args:
        theta: Queries ``(..., N, d)``: ``theta(x)`` or, for ``gaussian``, ``x`` itself.
        phi: Keys ``(..., N', d)``: ``phi(x_hat)`` or ``x_hat`` for ``gaussian``.
        g: Values ``(..., N', d_v)``: ``g(x_hat)``.
        instantiation: ``"gaussian"``, ``"embedded_gaussian"``, ``"dot_product"`` or
            ``"concatenation"`` (Eqs. 2-5).
        scale: Softmax forms only: ``True`` for ``1/sqrt(d)`` (released code, default),
            ``False`` for the paper's equations, or a positive float.
        w_f: Concatenation only: the weight vector ``(2d,)`` of Eq. 5.
        mask: Optional mask broadcastable to ``(..., N, N')``: boolean (True where a query may use
            a key) or additive float (softmax forms). Evaluated on the reference path; a query
            whose keys are all masked gets a zero output.
        return_attention: Also return the weights ``f / C`` of shape ``(..., N, N')`` (reference
            path).
        impl: ``"auto"``, ``"fast"`` or ``"reference"`` (see the module docstring).

    Returns:
        ``y`` of shape ``(..., N, d_v)``, and the weights if ``return_attention``.

    Raises:
        ValueError: On an unknown instantiation or impl, or inconsistent shapes.
        TypeError: On non-tensor or non-floating-point inputs.
    """
    check_instantiation(instantiation)
    _check_tokens(theta, phi, g, w_f, instantiation)
    if impl not in ("auto", "fast", "reference"):
        raise ValueError(f"impl must be 'auto', 'fast' or 'reference', got {impl!r}")
    check_mask(mask, theta.shape[-2], phi.shape[-2])
    if mask is not None and impl == "fast":
        raise ValueError("impl='fast' does not take a mask; use impl='reference' or 'auto'")
    if return_attention or mask is not None:
        impl = "reference"
    elif impl == "auto":
        training = torch.is_grad_enabled() and any(
            t.requires_grad for t in (theta, phi, g, w_f) if t is not None
        )
        impl = choose_impl(
            instantiation,
            theta.shape[-2],
            phi.shape[-2],
            theta.shape[-1],
            g.shape[-1],
            device=theta.device,
            training=training,
        )

    if impl == "reference":
        weights = pairwise_weights(theta, phi, instantiation, scale=scale, w_f=w_f, mask=mask)
        y = torch.matmul(weights, g)  # (..., N, d_v)
        return (y, weights) if return_attention else y

    if instantiation in SOFTMAX_FORMS:
        s = logit_scale(scale, theta.shape[-1])
        # The CPU kernels silently fall back to the O(N N') math path for inputs whose last
        # dimension is not contiguous; make sure they are.
        q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (theta, phi, g))
        # ...and when the value width differs from the query width (``gaussian``: d = C,
        # d_v = C/2). Zero padding of the narrower side changes neither q k^T nor the output.
        d, d_v = q.shape[-1], v.shape[-1]
        if d_v < d:
            v = F.pad(v, (0, d - d_v))
        elif d < d_v:
            q, k = F.pad(q, (0, d_v - d)), F.pad(k, (0, d_v - d))
        y = F.scaled_dot_product_attention(q, k, v, scale=s)
        return y[..., :d_v] if d_v < d else y
    if instantiation == "dot_product":
        # theta (phi^T g) / N': never forms the N x N' matrix (Eq. 4, C = N').
        context = torch.matmul(phi.transpose(-2, -1), g) / phi.shape[-2]  # (..., d, d_v)
        return torch.matmul(theta, context)
    d = theta.shape[-1]
    return concatenation_from_scores(theta @ w_f[:d], phi @ w_f[d:], g)
