"""The generic non-local operation (Wang et al., CVPR 2018, Eq. 1) and its instantiations.

    y_i = 1 / C(x) * sum_j f(x_i, x_j) g(x_j)                                   (Eq. 1)

Everything here works on *token* tensors: queries ``theta`` of shape ``(..., N, d)``, keys ``phi`` of
shape ``(..., N', d)`` and values ``g`` of shape ``(..., N', d_v)``, where ``...`` is ``(batch,)`` or
``(batch, heads)`` and ``N'`` may be smaller than ``N`` when the keys/values come from a subsampled
grid (the paper's subsampling trick, Sec. 3.3). The embeddings themselves (the 1x1 convolutions
``W_theta``, ``W_phi``, ``W_g``) live in :mod:`nlnet.layers.nonlocal_block`.

Instantiations (Sec. 3.2, Wang et al., CVPR 2018, arXiv 1711.07971):

=====================  =====================================  ===============
``instantiation``      pairwise function f                    normaliser C
=====================  =====================================  ===============
``gaussian``           exp(x_i^T x_j)                 (Eq. 2)  sum_j f
``embedded_gaussian``  exp(theta_i^T phi_j)           (Eq. 3)  sum_j f
``dot_product``        theta_i^T phi_j                (Eq. 4)  N'
``concatenation``      ReLU(w_f^T [theta_i, phi_j])   (Eq. 5)  N'
``euclidean``          exp(-||x_i - x_j||^2)     (Sec. 3.2)  sum_j f
=====================  =====================================  ===============

``euclidean`` is the Gaussian with Euclidean distance that Sec. 3.2 names as "also applicable"
beside Eq. 2 (the distance of non-local means and bilateral filters); like ``gaussian`` it acts on
the features themselves. Its reference path expands ``||x_i||^2 + ||x_j||^2 - 2 x_i^T x_j``; the
``||x_i||^2`` term is constant over ``j`` and cancels in the softmax over ``j``, so the fast path
runs the fused kernel on ``q_i = [2 x_i, 1]``, ``k_j = [x_j, -||x_j||^2]``:
``q_i^T k_j = 2 x_i^T x_j - ||x_j||^2``. The logit scale multiplies the distance.

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

from nlnet.functional.attention import attention_weights, check_mask, masked_softmax
from nlnet.functional.instantiations import FORMS, INSTANTIATIONS, form  # noqa: F401  (re-export)

Instantiation = Literal[
    "gaussian", "embedded_gaussian", "dot_product", "concatenation", "euclidean"
]
Impl = Literal["auto", "fast", "reference"]

SOFTMAX_FORMS: tuple[str, ...] = tuple(n for n, f in FORMS.items() if f.softmax)

#: Below this many pairwise entries (N * N' per batch element and head) the softmax forms train
#: faster with the explicit matrix on the CPU: its backward needs 4 products of size N N' d against
#: the flash backward's 5 (it recomputes q k^T). Measured in training, one thread, batch 2,
#: 512->256 channels, interleaved: explicit/flash time 0.93 at 56x56 with pooled keys
#: (3136 x 784 entries; 74 MiB against 61 MiB, both below a straightforward block's 93 MiB);
#: without pooling (3136 x 3136) the flash path holds 80 instead of 256 MiB at about the same
#: speed (explicit/flash 1.03 in an earlier run), so ``auto`` takes it from here on.
CPU_SDPA_TRAIN_MIN_ENTRIES: int = 2048 * 2048
#: Without a backward pass the fast path of the softmax forms is the explicit matmuls over blocks
#: of queries (:func:`_chunked_softmax`): as fast as the full matrix, with bounded memory, so
#: inference takes it from this many entries on.
CPU_INFER_CHUNK_MIN_ENTRIES: int = 1024 * 1024
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
    form(instantiation)


def check_scale(scale: bool | float) -> None:
    """Raise a ``ValueError`` unless ``scale`` is a bool or a finite positive number."""
    if isinstance(scale, bool):
        return
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a bool or a finite positive float, got {scale!r}")


def logit_scale(scale: bool | float, d: int) -> float:
    """The factor applied to the softmax logits: ``1/sqrt(d)`` for ``True``, 1 for ``False``."""
    check_scale(scale)
    if d < 1:
        raise ValueError(f"the query/key width d must be >= 1, got {d}")
    if isinstance(scale, bool):
        return 1.0 / math.sqrt(d) if scale else 1.0
    return float(scale)


def _onnx_exporting() -> bool:
    """Whether an ONNX export is tracing: ONNX has no ``searchsorted``, so the concatenation
    form's ``"auto"`` takes its explicit path there (eager, compile and torch.export keep the
    fast one)."""
    return torch.compiler.is_exporting() and torch.onnx.is_in_onnx_export()


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
        ``"fast"`` or ``"reference"`` (always ``"reference"`` for ``concatenation`` under ONNX
        export, which has no ``searchsorted``; same values).
    """
    entries = n * n_keys
    fast_path = form(instantiation).fast_path
    if fast_path == "sdpa":
        if not training:
            limit = CPU_INFER_CHUNK_MIN_ENTRIES
        else:
            limit = CPU_SDPA_TRAIN_MIN_ENTRIES if d == d_v else CPU_SDPA_TRAIN_MIN_ENTRIES_PADDED
        # CPU: below the crossover the explicit matrix is faster in training and in inference
        # (flash forward 0.83-0.93x of the explicit one at 28x28 and 56x56, measured).
        if device.type == "cpu" and entries < limit:
            return "reference"
        return "fast"
    if fast_path == "associativity":
        # theta (phi^T g): (N' + N) d d_v  vs  (theta phi^T) g: N N' (d + d_v) multiply-adds.
        return "fast" if (n_keys + n) * d * d_v < entries * (d + d_v) else "reference"
    if entries < CONCAT_FAST_MIN_ENTRIES or _onnx_exporting():  # ONNX: no searchsorted
        return "reference"
    # In training the sort path keeps a few (N, d_v) tensors for backward; with few keys the
    # explicit (N, N') matrix is smaller (1.38x the explicit block's memory at 14x14 otherwise).
    return "reference" if training and n_keys < 2 * d_v else "fast"


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
    if not theta.dtype == phi.dtype == g.dtype:
        raise TypeError(
            f"theta, phi and g must share one dtype, got {theta.dtype}, {phi.dtype}, {g.dtype}"
        )
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
    if theta.shape[-1] < 1:
        raise ValueError(f"theta and phi must have a width d >= 1, got d = {theta.shape[-1]}")
    check_w_f(w_f, inst, theta.shape[-1], theta.dtype)


def check_w_f(w_f: Tensor | None, inst: str, d: int, dtype: torch.dtype) -> None:
    """Validate the concatenation weight ``w_f`` (Eq. 5): a tensor of shape ``(2d,)``.

    Other instantiations ignore ``w_f`` (so one call can loop over all of them).
    """
    if form(inst).scores != "concat":
        return
    if w_f is None:
        raise ValueError("w_f (a weight vector of length 2*d) is required for concatenation")
    if not isinstance(w_f, Tensor):
        raise TypeError(f"w_f must be a torch.Tensor of shape ({2 * d},), got {type(w_f).__name__}")
    if w_f.shape != (2 * d,):
        raise ValueError(f"w_f must have shape (2*d,) = ({2 * d},), got {tuple(w_f.shape)}")
    if w_f.dtype != dtype:
        raise TypeError(f"w_f must have the dtype of theta ({dtype}), got {w_f.dtype}")


def autocast_w_f(w_f: Tensor | None, theta: Tensor) -> Tensor | None:
    """``w_f`` in the dtype of ``theta`` when autocast is on for ``theta``'s device, else as is.

    Under ``torch.autocast`` the 1x1 convolutions give bf16/fp16 embeddings while the parameter
    ``w_f`` of Eq. 5 stays fp32; PyTorch's own layers cast their weights to the autocast dtype,
    so the concatenation weight follows the embeddings the same way. Outside autocast a dtype
    mismatch stays an error (:func:`check_w_f`).
    """
    if (
        isinstance(w_f, Tensor)
        and isinstance(theta, Tensor)
        and w_f.dtype != theta.dtype
        and w_f.is_floating_point()
        and torch.is_autocast_enabled(theta.device.type)
    ):
        return w_f.to(theta.dtype)
    return w_f


def non_finite_guard(*tokens: Tensor) -> Tensor:
    """``0`` per leading index where every token is finite, ``NaN`` where any is not.

    Adding it to an output ``(..., N, d_v)`` (after ``unsqueeze(-1).unsqueeze(-1)``) gives the one
    rule that all paths share: a NaN or infinity anywhere in the tokens of a sample (and head)
    makes that sample's whole output NaN. Without it the paths would disagree, because the explicit
    matrix multiplies NaN by zero weights where the fast paths never touch the pair. It is
    ``0 * sum(tokens)`` with the sum accumulated in at least fp32 (one cheap reduction, no control
    flow on values, empty-safe, zero gradient); a finite sum can only overflow for values beyond
    ~1e34 in fp32, where the operation's own products overflow first.

    Args:
        tokens: Tensors ``(..., positions, channels)`` with the same leading dims ``...``.

    Returns:
        A tensor of shape ``(...)`` in the dtype of the first token tensor.
    """
    dt = torch.promote_types(tokens[0].dtype, torch.float32)
    total = sum(t.sum(dim=(-2, -1), dtype=dt) for t in tokens)
    return (total * 0).to(tokens[0].dtype)


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
    check_mask(mask, theta.shape[-2], phi.shape[-2], batch_shape=theta.shape[:-2])
    scores = form(instantiation).scores
    if scores == "distance":
        return _distance_weights(theta, phi, logit_scale(scale, theta.shape[-1]), mask)
    if scores == "softmax":
        # Low-precision inputs: logits and softmax in fp32 so that large logits cannot overflow.
        dt = torch.promote_types(theta.dtype, torch.float32)
        s = logit_scale(scale, theta.shape[-1])
        if mask is None:  # the fused softmax kernel: this is the hot path at small sizes
            q, k = theta.to(dt), phi.to(dt).transpose(-2, -1)
            if phi.shape[-2] > theta.shape[-1]:  # scale the smaller of theta (N x d) and logits
                logits = torch.matmul(q * s, k)
            else:
                logits = torch.matmul(q, k) * s
            return logits.softmax(dim=-1).to(theta.dtype)
        return attention_weights(theta.to(dt), phi.to(dt), mask, scale=s).to(theta.dtype)
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be boolean for {instantiation!r} (additive masks apply to the softmax "
            f"forms only), got {mask.dtype}"
        )
    if scores == "dot":
        f = torch.matmul(theta, phi.transpose(-2, -1))  # (..., N, N')
    else:  # concatenation: ReLU(w_theta^T theta_i + w_phi^T phi_j), Eq. 5
        d = theta.shape[-1]
        a = torch.matmul(theta, w_f[:d])  # (..., N)
        b = torch.matmul(phi, w_f[d:])  # (..., N')
        f = F.relu(a.unsqueeze(-1) + b.unsqueeze(-2))
    if mask is None:
        return f / max(phi.shape[-2], 1)  # no keys (N' = 0): an empty matrix, y = 0
    f = f.masked_fill(~mask, 0.0)
    count = mask.sum(dim=-1, keepdim=True).clamp_min(1).to(f.dtype)
    return f / count


def _distance_weights(theta: Tensor, phi: Tensor, s: float, mask: Tensor | None) -> Tensor:
    """``softmax_j(-s ||theta_i - phi_j||^2)`` (masked), the distance expanded as
    ``||theta_i||^2 + ||phi_j||^2 - 2 theta_i^T phi_j`` (logits in at least fp32)."""
    dt = torch.promote_types(theta.dtype, torch.float32)
    q, k = theta.to(dt), phi.to(dt)
    sq_dist = (
        q.pow(2).sum(-1, keepdim=True)
        + k.pow(2).sum(-1).unsqueeze(-2)
        - 2 * torch.matmul(q, k.transpose(-2, -1))
    )  # (..., N, N')
    logits = sq_dist * -s
    if mask is None:
        return logits.softmax(dim=-1).to(theta.dtype)
    if mask.dtype == torch.bool:
        logits = logits.masked_fill(~mask, float("-inf"))
    else:
        logits = logits + mask.to(dt)
    return masked_softmax(logits).to(theta.dtype)


def distance_augmented(theta: Tensor, phi: Tensor) -> tuple[Tensor, Tensor]:
    """``q = [2 theta, 1]`` and ``k = [phi, -||phi||^2]``: ``q_i^T k_j = -||theta_i - phi_j||^2
    + ||theta_i||^2``, the Euclidean logits up to a per-query constant (which the softmax over
    ``j`` cancels), so the fused attention kernels compute the ``euclidean`` form."""
    ones = theta.new_ones(theta.shape[:-1] + (1,))
    sq = phi.pow(2).sum(-1, keepdim=True, dtype=torch.promote_types(phi.dtype, torch.float32))
    return torch.cat([2 * theta, ones], dim=-1), torch.cat([phi, -sq.to(phi.dtype)], dim=-1)


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
    n_keys = max(b.shape[-1], 1)  # N' = 0: no keys, y = 0 as on the reference path
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


def concatenation_non_local(a: Tensor, b: Tensor, g: Tensor, *, impl: Impl = "auto") -> Tensor:
    """Eq. 5 from the scores ``a = theta w_theta`` ``(..., N)`` and ``b = phi w_phi`` ``(..., N')``.

    ``impl="reference"`` builds ``ReLU(a_i + b_j) / N'`` explicitly, ``"fast"`` uses
    :func:`concatenation_from_scores`, ``"auto"`` picks by size with :func:`choose_impl` (at run
    time, so a traced or exported graph keeps the choice per input size).

    Returns:
        ``y`` of shape ``(..., N, d_v)``.
    """
    if impl == "auto":
        training = torch.is_grad_enabled() and any(t.requires_grad for t in (a, b, g))
        n, n_keys = a.shape[-1], b.shape[-1]
        impl = choose_impl(
            "concatenation", n, n_keys, 1, g.shape[-1], device=a.device, training=training
        )
    if impl == "fast":
        return concatenation_from_scores(a, b, g)
    weights = F.relu(a.unsqueeze(-1) + b.unsqueeze(-2)) / max(b.shape[-1], 1)  # (..., N, N')
    return torch.matmul(weights.to(g.dtype), g)


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
    nan_guard: bool = True,
) -> Tensor | tuple[Tensor, Tensor]:
    """The non-local operation y = (1/C) sum_j f(x_i, x_j) g(x_j) (Eq. 1) on token tensors.

    Args:
        theta: Queries ``(..., N, d)``: ``theta(x)`` or, for ``gaussian``, ``x`` itself.
        phi: Keys ``(..., N', d)``: ``phi(x_hat)`` or ``x_hat`` for ``gaussian``.
        g: Values ``(..., N', d_v)``: ``g(x_hat)``.
        instantiation: ``"gaussian"``, ``"embedded_gaussian"``, ``"dot_product"``,
            ``"concatenation"`` (Eqs. 2-5) or ``"euclidean"`` (Sec. 3.2).
        scale: Softmax forms only: ``True`` for ``1/sqrt(d)`` (released code, default),
            ``False`` for the paper's equations, or a positive float.
        w_f: Concatenation only: the weight vector ``(2d,)`` of Eq. 5.
        mask: Optional mask broadcastable to ``(..., N, N')``: boolean (True where a query may use
            a key) or additive float (softmax forms). Evaluated on the reference path; a query
            whose keys are all masked gets a zero output.
        return_attention: Also return the weights ``f / C`` of shape ``(..., N, N')`` (reference
            path).
        impl: ``"auto"``, ``"fast"`` or ``"reference"`` (see the module docstring).
        nan_guard: Apply the one rule for non-finite inputs on every path (see
            :func:`non_finite_guard`); a caller that applies it itself (the block does, per
            sample) passes ``False`` to save the reductions.

    Returns:
        ``y`` of shape ``(..., N, d_v)``, and the weights if ``return_attention``.

    Raises:
        ValueError: On an unknown instantiation or impl, or inconsistent shapes.
        TypeError: On non-tensor or non-floating-point inputs.
    """
    check_instantiation(instantiation)
    w_f = autocast_w_f(w_f, theta)
    _check_tokens(theta, phi, g, w_f, instantiation)
    if impl not in ("auto", "fast", "reference"):
        raise ValueError(f"impl must be 'auto', 'fast' or 'reference', got {impl!r}")
    check_scale(scale)
    check_mask(mask, theta.shape[-2], phi.shape[-2], batch_shape=theta.shape[:-2])
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

    guard = non_finite_guard(theta, phi, g).unsqueeze(-1).unsqueeze(-1) if nan_guard else 0.0
    if impl == "reference":
        weights = pairwise_weights(theta, phi, instantiation, scale=scale, w_f=w_f, mask=mask)
        if weights.requires_grad and phi.shape[-2] > g.shape[-1]:
            # y = W g token-major: the weights' gradient then comes out contiguous; from the
            # channel-first form below it is a transposed N x N' view that the softmax backward
            # copies (measured 23 ms of a 430 ms training step at 56x56), against a copy of the
            # smaller N x d_v output when a block wants it channel-first
            y = torch.matmul(weights, g) + guard
        else:  # y^T = g^T W^T: y (..., N, d_v) stored channel-first, as a block's W_z wants it
            y = torch.matmul(g.transpose(-2, -1), weights.transpose(-2, -1)).transpose(-2, -1)
            y = y + guard
        return (y, weights) if return_attention else y
    return _fast(theta, phi, g, instantiation, scale, w_f) + guard


#: The CPU inference path of the softmax forms holds at most this many pairwise entries at once.
CPU_CHUNK_ENTRIES: int = 1 << 20


def _chunked_softmax(q: Tensor, k: Tensor, v: Tensor, s: float) -> Tensor:
    """``softmax(s q k^T) v`` over blocks of queries: the explicit path's matmuls with at most
    :data:`CPU_CHUNK_ENTRIES` logits alive. Used without autograd on the CPU, where it runs at
    the explicit path's speed (the CPU flash forward measured 0.77-0.93x of it)."""
    rows = max(1, CPU_CHUNK_ENTRIES // max(k.shape[-2], 1))
    dt = torch.promote_types(q.dtype, torch.float32)
    kt = k.to(dt).transpose(-2, -1)
    outs = []
    for start in range(0, q.shape[-2], rows):
        logits = torch.matmul(q[..., start : start + rows, :].to(dt) * s, kt)
        outs.append(torch.matmul(logits.softmax(dim=-1).to(v.dtype), v))
    return torch.cat(outs, dim=-2) if len(outs) != 1 else outs[0]


def _fast(theta: Tensor, phi: Tensor, g: Tensor, inst: str, scale, w_f) -> Tensor:
    """The fast paths of :func:`non_local` (module docstring), never the N x N' matrix."""
    fast_path = FORMS[inst].fast_path
    if fast_path == "sdpa":
        s = logit_scale(scale, theta.shape[-1])
        if FORMS[inst].scores == "distance":  # Euclidean logits as one product (docstring)
            theta, phi = distance_augmented(theta, phi)
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (theta, phi, g))
        if theta.device.type == "cpu" and not grad and theta.shape[-2] > 0:
            return _chunked_softmax(theta, phi, g, s)
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
    if fast_path == "associativity":
        # theta (phi^T g) / N': never forms the N x N' matrix (Eq. 4, C = N'; N' = 0 gives 0).
        context = torch.matmul(phi.transpose(-2, -1), g) / max(phi.shape[-2], 1)  # (..., d, d_v)
        return torch.matmul(theta, context)
    d = theta.shape[-1]
    return concatenation_from_scores(theta @ w_f[:d], phi @ w_f[d:], g)
