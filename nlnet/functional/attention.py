"""Scaled dot-product attention with one mask convention for all of nlnet.

Implements ``Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V`` (the "Self-Attention" article,
"Formal Definition", Vaswani et al. 2017 Eq. 1) with the masks of the seed's "Masks" paragraph.

Mask convention (the only one used in nlnet)
--------------------------------------------
* **Boolean masks: ``True`` means "this query may use this key"**, exactly as
  :func:`torch.nn.functional.scaled_dot_product_attention`. ``nn.MultiheadAttention`` uses the
  opposite convention (``True`` = blocked) for both ``attn_mask`` and ``key_padding_mask``;
  convert with :func:`to_mha_mask` / :func:`from_mha_mask`.
* **Float masks are additive**: they are added to the scaled scores before the softmax
  (``0`` keeps a key, ``-inf`` forbids it, any other value biases it). Additive masks mean the same
  thing in nlnet, ``F.scaled_dot_product_attention`` and ``nn.MultiheadAttention``.
* Forbidden scores are set to ``-inf`` *before* the softmax, so their weights are exactly ``0`` and
  every row that keeps at least one key still sums to one (seed, "Masks" and "Common
  Misconceptions").
* **All-masked rows**: a query whose keys are all forbidden gets a zero output row and a zero
  weight row (never NaN). Such rows sum to 0, not 1. This is what padded queries produce when
  :func:`nlnet.functional.masks.padding_mask` is called with ``mask_queries=True``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "scaled_dot_product_attention",
    "attention_scores",
    "attention_weights",
    "masked_softmax",
    "softmax_jacobian_norm",
    "check_mask",
    "to_mha_mask",
    "from_mha_mask",
    "bool_mask_to_additive",
    "additive_mask_to_bool",
]

_IMPLS = ("auto", "fast", "reference")


def check_mask(
    mask: Tensor | None,
    n: int,
    m: int,
    name: str = "mask",
    *,
    batch_shape: Sequence[int] | None = None,
) -> None:
    """Validate an attention mask against ``n`` queries and ``m`` keys.

    Args:
        mask: ``None``, a boolean mask (True = may attend) or a floating additive mask whose
            shape broadcasts to ``(..., n, m)``.
        n: number of queries.
        m: number of keys.
        name: argument name used in the error message.
        batch_shape: the leading dims ``...`` of the queries, e.g. ``(B,)`` or ``(B, h)``; when
            given the mask must broadcast to exactly ``(*batch_shape, n, m)`` (a mask with more
            or larger leading dims would silently change the output's shape).

    Raises:
        TypeError: if the mask is not a tensor or has an integer/complex dtype.
        ValueError: if its last two dimensions do not broadcast to ``(n, m)``.
    """
    if mask is None:
        return
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(mask).__name__}")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(
            f"{name} must be bool (True = may attend) or floating (additive), got {mask.dtype}"
        )
    if mask.dim() < 2:
        raise ValueError(
            f"{name} must have at least 2 dims broadcastable to (..., {n}, {m}), "
            f"got shape {tuple(mask.shape)}"
        )
    if mask.shape[-2] not in (1, n) or mask.shape[-1] not in (1, m):
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to (..., {n}, {m}) "
            f"(queries n={n}, keys m={m})"
        )
    if batch_shape is not None:
        target = (*batch_shape, n, m)
        try:
            ok = torch.broadcast_shapes(mask.shape, target) == target
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"{name} of shape {tuple(mask.shape)} does not broadcast to exactly {target} "
                f"(batch dims {tuple(batch_shape)}, queries n={n}, keys m={m})"
            )


def _check_qkv(query: Tensor, key: Tensor, value: Tensor) -> None:
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape (..., tokens, dim), got {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be floating point, got {t.dtype}")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must share the last dim d_k, got {query.shape[-1]} and {key.shape[-1]}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same number of tokens, got {key.shape[-2]} "
            f"and {value.shape[-2]}"
        )


def _default_scale(d_k: int, scale: float | None) -> float:
    return 1.0 / math.sqrt(d_k) if scale is None else float(scale)


def attention_scores(
    query: Tensor, key: Tensor, mask: Tensor | None = None, *, scale: float | None = None
) -> Tensor:
    """Scaled (and masked) scores ``Q K^T * scale + mask``.

    Args:
        query: ``(..., n, d_k)``.
        key: ``(..., m, d_k)``.
        mask: optional bool (True = may attend; False -> ``-inf``) or additive float mask,
            broadcastable to ``(..., n, m)``.
        scale: multiplier of the dot products; default ``1/sqrt(d_k)`` (seed, "Why divide by
            sqrt(d_k)"). Use ``scale=1.0`` for raw logits.

    Returns:
        Scores of shape ``(..., n, m)``.
    """
    check_mask(mask, query.shape[-2], key.shape[-2])
    s = torch.matmul(query, key.transpose(-2, -1)) * _default_scale(query.shape[-1], scale)
    if mask is None:
        return s
    if mask.dtype == torch.bool:
        return s.masked_fill(~mask, float("-inf"))
    return s + mask.to(s.dtype)


def masked_softmax(scores: Tensor, dim: int = -1) -> Tensor:
    """Softmax that maps rows of all ``-inf`` to all-zero rows instead of NaN.

    Args:
        scores: any tensor; ``-inf`` entries receive weight exactly ``0``.
        dim: dimension to normalise over.

    Returns:
        Weights of the same shape; each row with a finite entry sums to 1, an all ``-inf`` row is 0.
    """
    if scores.shape[dim] == 0:  # no keys at all: empty rows, nothing to normalise
        return scores * 0
    # the max is only a stabiliser (softmax is shift invariant), so it is detached
    row_max = scores.detach().amax(dim=dim, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    e = torch.exp(scores - row_max)
    denom = e.sum(dim=dim, keepdim=True)  # >= 1 unless the whole row is -inf
    denom = torch.where(denom > 0, denom, torch.ones_like(denom))
    return e / denom


def attention_weights(
    query: Tensor, key: Tensor, mask: Tensor | None = None, *, scale: float | None = None
) -> Tensor:
    """Attention map ``A = softmax(Q K^T * scale + mask)`` (seed, "Formal Definition").

    Args:
        query: ``(..., n, d_k)``.
        key: ``(..., m, d_k)``.
        mask: optional bool (True = may attend) or additive float mask, broadcast to ``(..., n, m)``.
        scale: default ``1/sqrt(d_k)``; ``1.0`` gives the unscaled softmax of the seed's
            "effect of sqrt(d_k)" example.

    Returns:
        Weights ``(..., n, m)``: nonnegative, masked entries exactly 0, rows sum to 1 (all-masked
        rows are 0).
    """
    return masked_softmax(attention_scores(query, key, mask, scale=scale))


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    *,
    scale: float | None = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
    impl: str = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
    """Scaled dot-product attention ``softmax(Q K^T / sqrt(d_k) + mask) V``.

    The "Self-Attention" article, "Formal Definition" (Vaswani et al. 2017, Eq. 1) and "Masks".

    Args:
        query: ``(..., n, d_k)``.
        key: ``(..., m, d_k)``.
        value: ``(..., m, d_v)``.
        mask: ``None``; a bool mask with **True = this query may use this key**; or an additive
            float mask; broadcastable to ``(..., n, m)``. A query with no allowed key gets a zero
            output row (and a zero weight row), never NaN.
        scale: multiplier of ``Q K^T``; default ``1/sqrt(d_k)``.
        dropout_p: dropout probability on the weights (pass 0 in evaluation).
        return_weights: also return the weights ``(..., n, m)``; forces the reference path.
        impl: ``"auto"`` (fast path unless weights are requested), ``"fast"`` (always
            ``F.scaled_dot_product_attention``; incompatible with ``return_weights``) or
            ``"reference"`` (explicit softmax; returns the weights it used).

    Returns:
        ``out`` of shape ``(..., n, d_v)``, or ``(out, weights)`` when ``return_weights``.

    Raises:
        ValueError / TypeError: on a bad ``impl``, mismatched shapes, or a mask of the wrong
            shape or dtype (the message names the argument).
    """
    if impl not in _IMPLS:
        raise ValueError(f"impl must be one of {_IMPLS}, got {impl!r}")
    if impl == "fast" and return_weights:
        raise ValueError("impl='fast' cannot return weights; use impl='auto' or 'reference'")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    _check_qkv(query, key, value)
    n, m = query.shape[-2], key.shape[-2]
    try:
        batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except RuntimeError as err:
        raise ValueError(
            f"query, key and value batch dims {tuple(query.shape[:-2])}, "
            f"{tuple(key.shape[:-2])}, {tuple(value.shape[:-2])} do not broadcast"
        ) from err
    check_mask(mask, n, m, batch_shape=batch)
    use_fast = impl == "fast" or (impl == "auto" and not return_weights)

    if use_fast:
        keep_row = None
        attn_mask = mask
        if mask is not None:
            if mask.dtype == torch.bool:
                keep_row = mask.any(dim=-1, keepdim=True)  # (..., n|1, 1)
                attn_mask = mask | ~keep_row  # unmask empty rows, zero them below
            else:
                attn_mask = mask.to(query.dtype)
                keep_row = ~torch.isneginf(attn_mask).all(dim=-1, keepdim=True)
                attn_mask = attn_mask.masked_fill(~keep_row, 0.0)
        out = F.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale
        )
        if keep_row is not None:
            out = out.masked_fill(~keep_row, 0.0)
        return out

    weights = attention_weights(query, key, mask, scale=scale)  # (..., n, m)
    w = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    out = torch.matmul(w, value)  # (..., n, d_v)
    if return_weights:
        return out, weights
    return out


def softmax_jacobian_norm(p: Tensor) -> Tensor:
    """Frobenius norm of the softmax Jacobian ``diag(p) - p p^T`` for each row ``p``.

    Seed, "Why divide by sqrt(d_k)": the entries vanish as ``p`` approaches a one-hot vector, so a
    saturated row passes almost no gradient back.

    Args:
        p: probabilities ``(..., m)``.

    Returns:
        Norms of shape ``(...)``.
    """
    eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)
    jac = p[..., :, None] * (eye - p[..., None, :])  # (..., m, m)
    return jac.pow(2).sum(dim=(-2, -1)).sqrt()


def to_mha_mask(mask: Tensor | None) -> Tensor | None:
    """Convert an nlnet mask to ``nn.MultiheadAttention``'s convention.

    Boolean masks are inverted (nlnet: True = may attend; ``nn.MultiheadAttention``'s
    ``attn_mask`` and ``key_padding_mask``: True = blocked). Additive float masks are returned
    unchanged, as both conventions add them to the scores.
    """
    if mask is None or mask.is_floating_point():
        return mask
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be bool or floating, got {mask.dtype}")
    return ~mask


def from_mha_mask(mask: Tensor | None) -> Tensor | None:
    """Convert a ``nn.MultiheadAttention`` mask (True = blocked) to nlnet's (True = may attend)."""
    return to_mha_mask(mask)


def bool_mask_to_additive(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Bool mask (True = may attend) -> additive float mask (0 where allowed, -inf elsewhere)."""
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be bool, got {mask.dtype}")
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill(~mask, float("-inf"))


def additive_mask_to_bool(mask: Tensor) -> Tensor:
    """Additive float mask -> bool mask (True where the entry is not ``-inf``)."""
    if not mask.is_floating_point():
        raise TypeError(f"mask must be floating, got {mask.dtype}")
    return ~torch.isneginf(mask)
