"""Multi-head self-attention with per-head maps, state-dict compatible with ``nn.MultiheadAttention``.

The "Self-Attention" article, "Multi-head attention":
``MultiHead(X) = Concat(head_1, ..., head_h) W_O``, ``head_i = Attention(X W_Q^(i), X W_K^(i),
X W_V^(i))`` with ``d_k = d_v = d / h``; the four projections hold ``4 d^2`` weights whatever ``h``.

Parameters are named as in ``nn.MultiheadAttention`` (``in_proj_weight`` = ``[W_Q; W_K; W_V]`` as
``(3d, d)`` PyTorch ``x @ W.T`` weights, ``in_proj_bias``, ``out_proj.weight``, ``out_proj.bias``)
so state dicts load in both directions. Masks follow nlnet's convention (bool True = may attend).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nlnet.functional.attention import check_mask, scaled_dot_product_attention
from nlnet.functional.pos_embed import sinusoidal_grid_encoding

#: Position information of the layer (``"none"``: order-blind, the article's
#: "permutation equivariance").
POSITIONS: tuple[str, ...] = ("none", "sincos", "learned")

__all__ = ["POSITIONS", "MultiheadSelfAttention", "split_heads", "merge_heads"]


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """``(B, n, h * d_h) -> (B, h, n, d_h)``."""
    b, n, d = x.shape
    return x.reshape(b, n, num_heads, d // num_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """``(B, h, n, d_h) -> (B, n, h * d_h)`` (the Concat of the seed's MultiHead)."""
    b, h, n, dh = x.shape
    return x.transpose(1, 2).reshape(b, n, h * dh)


class MultiheadSelfAttention(nn.Module):
    """Multi-head (self-)attention returning per-head attention maps on request.

    Args:
        embed_dim: token width ``d``.
        num_heads: heads ``h``; must divide ``embed_dim`` (``d_k = d_v = d / h``).
        bias: biases on the input and output projections (``nn.MultiheadAttention`` default).
        dropout: dropout on the attention weights during training.
        impl: attention implementation, see
            :func:`~nlnet.functional.attention.scaled_dot_product_attention`.
        pos: position of the tokens in their sequence, added to the inputs of the query and key
            projections only (the values never see it): ``"none"`` (default: permutation
            equivariant), ``"sincos"`` (the fixed sinusoidal encoding of the token index,
            Vaswani et al. 2017, Sec. 3.5) or ``"learned"`` (that encoding through a learned
            ``d x d`` map ``pos_proj``, initialised to the identity). With ``context``, the keys'
            positions are their indices in ``context``.

    Shapes:
        ``x``: ``(B, n, d)`` or unbatched ``(n, d)``; ``context`` (keys/values, cross-attention):
        ``(B, m, d)``; output like ``x``; weights ``(B, h, n, m)`` (per head, not averaged).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        bias: bool = True,
        dropout: float = 0.0,
        impl: str = "auto",
        pos: str = "none",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(embed_dim, int) or embed_dim < 1:
            raise ValueError(f"embed_dim must be a positive int, got {embed_dim!r}")
        if pos not in POSITIONS:
            raise ValueError(f"pos must be one of {POSITIONS}, got {pos!r}")
        if pos != "none" and embed_dim < 2:
            raise ValueError(f"pos={pos!r} needs embed_dim >= 2, got {embed_dim}")
        if not isinstance(num_heads, int) or num_heads < 1 or embed_dim % num_heads:
            raise ValueError(
                f"num_heads must be a positive int dividing embed_dim={embed_dim}, got {num_heads!r}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        fk = {"device": device, "dtype": dtype}
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.impl = impl
        self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim, **fk))
        if bias:
            self.in_proj_bias = nn.Parameter(torch.empty(3 * embed_dim, **fk))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **fk)
        self.pos = pos
        if pos == "learned":
            self.pos_proj = nn.Parameter(torch.eye(embed_dim, **fk))
        else:
            self.register_parameter("pos_proj", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Same initialisation as ``nn.MultiheadAttention``."""
        nn.init.xavier_uniform_(self.in_proj_weight)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)

    # --- conversion -----------------------------------------------------------------------------
    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention, **kwargs) -> MultiheadSelfAttention:
        """Build from an ``nn.MultiheadAttention`` (same device/dtype, weights copied)."""
        if not mha._qkv_same_embed_dim or mha.bias_k is not None:
            raise ValueError("mha must use a packed in_proj_weight and no add_bias_kv")
        p = mha.in_proj_weight
        module = cls(
            mha.embed_dim,
            mha.num_heads,
            bias=mha.in_proj_bias is not None,
            dropout=mha.dropout,
            device=p.device,
            dtype=p.dtype,
            **kwargs,
        )
        module.load_state_dict(mha.state_dict())
        return module

    @classmethod
    def from_projections(
        cls, w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor, num_heads: int, **kwargs
    ) -> MultiheadSelfAttention:
        """Build a bias-free module from the seed's matrices (``Q = X W_Q``, ``Y = Concat W_O``).

        Args:
            w_q, w_k, w_v: ``(d, d)`` in the ``X @ W`` convention; head ``i`` uses columns
                ``i * d/h : (i + 1) * d/h``.
            w_o: ``(d, d)`` output projection, ``X @ W_O`` convention.
            num_heads: heads ``h``.
        """
        d = w_q.shape[0]
        for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o)):
            if tuple(w.shape) != (d, d):
                raise ValueError(f"{name} must be square ({d}, {d}), got {tuple(w.shape)}")
        module = cls(d, num_heads, bias=False, device=w_q.device, dtype=w_q.dtype, **kwargs)
        with torch.no_grad():  # PyTorch layers compute x @ W.T: store the transposes
            module.in_proj_weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T], dim=0))
            module.out_proj.weight.copy_(w_o.T)
        return module

    def to_torch(self) -> nn.MultiheadAttention:
        """An equivalent ``nn.MultiheadAttention(batch_first=True)`` with these weights."""
        if self.pos != "none":
            raise ValueError(f"pos={self.pos!r}: nn.MultiheadAttention has no position input")
        p = self.in_proj_weight
        mha = nn.MultiheadAttention(
            self.embed_dim,
            self.num_heads,
            dropout=self.dropout,
            bias=self.in_proj_bias is not None,
            batch_first=True,
            device=p.device,
            dtype=p.dtype,
        )
        mha.load_state_dict(self.state_dict())
        return mha

    # --- forward --------------------------------------------------------------------------------
    def _project(self, x: Tensor, part: slice) -> Tensor:
        w = self.in_proj_weight[part]
        b = None if self.in_proj_bias is None else self.in_proj_bias[part]
        return F.linear(x, w, b)

    def with_position(self, t: Tensor) -> Tensor:
        """``t`` ``(B, n, d)`` plus the encoding of its token indices (``t`` itself without)."""
        if self.pos == "none":
            return t
        p = sinusoidal_grid_encoding(t.transpose(1, 2), self.embed_dim).t()  # (n, d)
        if self.pos_proj is not None:
            p = F.linear(p, self.pos_proj.to(p.dtype))
        return t + p

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        key_mask: Tensor | None = None,
        return_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from the tokens ``x`` to themselves (or to ``context``).

        Args:
            x: ``(B, n, d)`` or ``(n, d)``.
            context: optional ``(B, m, d)`` keys/values source (cross-attention).
            mask: bool (True = may attend) or additive float mask broadcastable to
                ``(B, h, n, m)``: ``(n, m)``, ``(B, n, m)`` or ``(B, h, n, m)``.
            key_mask: bool ``(B, m)``, True for real keys (False = padding). This is the
                *opposite* of ``nn.MultiheadAttention``'s ``key_padding_mask``.
            return_weights: also return per-head weights ``(B, h, n, m)``.

        Returns:
            Output like ``x``, or ``(output, weights)``.
        """
        unbatched = x.dim() == 2
        if x.dim() not in (2, 3) or x.shape[-1] != self.embed_dim:
            raise ValueError(
                f"x must be (B, n, {self.embed_dim}) or (n, {self.embed_dim}), got {tuple(x.shape)}"
            )
        if unbatched:
            x = x[None]
            context = None if context is None else context[None]
        src = x if context is None else context
        if src.dim() != 3 or src.shape[0] != x.shape[0] or src.shape[-1] != self.embed_dim:
            raise ValueError(
                f"context must be (B, m, {self.embed_dim}) with B={x.shape[0]}, "
                f"got {tuple(src.shape)}"
            )
        b, n, d = x.shape
        m = src.shape[1]
        check_mask(mask, n, m, "mask")
        if mask is not None and mask.dim() == 3:
            mask = mask[:, None]  # (B, 1, n, m): same for every head
        if key_mask is not None:
            if key_mask.dtype != torch.bool or tuple(key_mask.shape) != (b, m):
                raise ValueError(
                    f"key_mask must be bool of shape (B, m) = ({b}, {m}) with True = real key, "
                    f"got {key_mask.dtype} {tuple(key_mask.shape)}"
                )
            km = key_mask[:, None, None, :]  # (B, 1, 1, m)
            if mask is None:
                mask = km
            elif mask.dtype == torch.bool:
                mask = mask & km
            else:
                mask = mask.masked_fill(~km, float("-inf"))

        xq, src_k = self.with_position(x), self.with_position(src)  # (position: Q, K only)
        q = split_heads(self._project(xq, slice(0, d)), self.num_heads)  # (B, h, n, d_h)
        k = split_heads(self._project(src_k, slice(d, 2 * d)), self.num_heads)  # (B, h, m, d_h)
        v = split_heads(self._project(src, slice(2 * d, 3 * d)), self.num_heads)  # (B, h, m, d_h)
        res = scaled_dot_product_attention(
            q,
            k,
            v,
            mask,
            scale=1.0 / math.sqrt(self.head_dim),
            dropout_p=self.dropout if self.training else 0.0,
            return_weights=return_weights,
            impl=self.impl,
        )
        out, weights = res if return_weights else (res, None)
        out = self.out_proj(merge_heads(out))  # (B, n, d)
        if unbatched:
            out = out[0]
            weights = None if weights is None else weights[0]
        return (out, weights) if return_weights else out

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
            f"bias={self.in_proj_bias is not None}, dropout={self.dropout}, impl={self.impl!r}"
            + (f", pos={self.pos!r}" if self.pos != "none" else "")
        )
