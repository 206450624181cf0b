"""Tiny video transformers with joint or divided space-time attention, for the digits video demo.

Arnab et al., "ViViT: A Video Vision Transformer" (ICCV 2021), Sec. 3.2-3.3, "Model 1:
spatio-temporal attention": the clip is cut into tubelets (``t x p x p`` voxels, a strided 3D
convolution), a class token and a learned position embedding are added, and every encoder block
attends from each token to *all* tokens of all frames. That global attention over space and
time is the non-local operation of Wang et al. 2018 (Eq. 1, embedded Gaussian ``f`` per head)
used as the whole network instead of one block in a ConvNet (Sec. 3.2 of the non-local paper
discusses this relation to self-attention).

Bertasius et al., "Is Space-Time Attention All You Need for Video Understanding?" (TimeSformer,
ICML 2021), Sec. 3, "Divided Space-Time Attention (T+S)": each block first attends from every
token to the tokens at the *same spatial position* in the other frames (temporal attention,
``T'`` keys), then to the tokens of its *own frame* (spatial attention, ``H'W'`` keys), then runs
the MLP; the class token joins the spatial attention of every frame and averages the results.
These are two non-local operations restricted to one axis each (compare the time-only and
space-only blocks of Table 2d of Wang et al. 2018), at ``T' + H'W'`` keys per query instead of
``T'H'W'``.

Built from :class:`~nlnet.models.vit.EncoderBlock` (:class:`~nlnet.layers.MultiheadSelfAttention`)
and :class:`~nlnet.layers.LearnedPositionEmbedding`; attention maps and rollout come through the
same recorder as the non-local blocks (:func:`nlnet.analysis.attention_record.record_attention`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch import Tensor, nn

from nlnet.layers.attention import MultiheadSelfAttention
from nlnet.layers.pos_embed import LearnedPositionEmbedding
from nlnet.models.checks import check_input
from nlnet.models.features import feature_info_of
from nlnet.models.registry import register_model
from nlnet.models.vit import EncoderBlock, TokenClassifier, attend, embed_tokens

__all__ = [
    "ATTENTIONS",
    "DividedSpaceTimeBlock",
    "VideoTransformer",
    "vivit_tiny",
    "vivit_tiny_divided",
]

#: Space-time attention of :class:`VideoTransformer`.
ATTENTIONS = ("joint", "divided")

torch.fx.wrap("check_input")
torch.fx.wrap("attend")  # the attention layers check their inputs in Python (models/vit.py)


class DividedSpaceTimeBlock(nn.Module):
    """Pre-norm block with divided space-time attention (TimeSformer "T+S").

    ``z' = z + MSA_time(LN(z))`` over the ``T'`` tokens of each spatial position, then an
    :class:`~nlnet.models.vit.EncoderBlock` per frame (``z'' = z' + MSA_space(LN(z'))``,
    ``z''' = z'' + MLP(LN(z''))``) on ``[class token, the frame's H'W' tokens]``; the class
    token's outputs of the ``T'`` frames are averaged. The two attention layers are
    :class:`~nlnet.layers.MultiheadSelfAttention` (``temporal_attn``, then ``spatial.attn``), so
    :func:`nlnet.analysis.attention_record.record_attention` records them in that order, as
    ``(B * H'W', heads, T', T')`` and ``(B * T', heads, 1 + H'W', 1 + H'W')``.

    Args:
        dim: token width ``D``.
        num_heads: heads of both attentions.
        mlp_dim: MLP hidden width.
        grid: the token grid ``(T', H', W')``.
        dropout: dropout after the attentions and in the MLP.
        attention_dropout: dropout on the attention weights.
        eps: LayerNorm epsilon.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_dim: int,
        grid: tuple[int, int, int],
        *,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.frames, self.positions = int(grid[0]), int(grid[1]) * int(grid[2])  # T', S = H'W'
        self.norm_t = nn.LayerNorm(dim, eps=eps)
        self.temporal_attn = MultiheadSelfAttention(dim, num_heads, dropout=attention_dropout)
        self.drop = nn.Dropout(dropout)
        self.spatial = EncoderBlock(
            dim, num_heads, mlp_dim, dropout=dropout, attention_dropout=attention_dropout, eps=eps
        )

    def forward(self, x: Tensor) -> Tensor:
        """``x``: ``(B, 1 + T'S, D)``, class token first, then row-major ``(t, y, x)``."""
        b, d = x.shape[0], x.shape[-1]
        t, s = self.frames, self.positions
        cls, tok = x[:, :1], x[:, 1:]  # (B, 1, D), (B, T'S, D)
        # temporal attention: one sequence of T' tokens per spatial position
        seq = tok.reshape(b, t, s, d).transpose(1, 2).reshape(b * s, t, d)  # (B S, T', D)
        seq = seq + self.drop(attend(self.temporal_attn, self.norm_t(seq)))
        tok = seq.reshape(b, s, t, d).transpose(1, 2).reshape(b * t, s, d)  # (B T', S, D)
        # spatial attention + MLP per frame, the class token copied into every frame
        frames = torch.cat([cls.repeat_interleave(t, dim=0), tok], dim=1)  # (B T', 1 + S, D)
        frames = self.spatial(frames)
        cls = frames[:, :1].reshape(b, t, d).mean(dim=1, keepdim=True)  # (B, 1, D)
        return torch.cat([cls, frames[:, 1:].reshape(b, t * s, d)], dim=1)  # (B, 1 + T'S, D)


class VideoTransformer(TokenClassifier):
    """Video transformer with joint (ViViT model 1) or divided (TimeSformer T+S) attention.

    Args:
        num_frames: clip length ``T`` (the position embedding is learned for it).
        image_size: frame side.
        tubelet: ``(t, p, p)`` voxels per token (``t`` frames, ``p x p`` pixels).
        num_layers, num_heads, hidden_dim, mlp_dim: encoder size.
        num_classes: logits.
        dropout: dropout on the tokens, after attention and in the MLPs.
        in_channels: input channels.
        attention: ``"joint"`` (every token attends to all tokens of the clip,
            :class:`~nlnet.models.vit.EncoderBlock`) or ``"divided"`` (time, then space,
            :class:`DividedSpaceTimeBlock`).

    Input ``(B, in_channels, T, H, W)``; output ``(B, num_classes)``.
    """

    def __init__(
        self,
        num_frames: int = 4,
        image_size: int = 32,
        tubelet: tuple[int, int, int] = (1, 4, 4),
        num_layers: int = 4,
        num_heads: int = 4,
        hidden_dim: int = 64,
        mlp_dim: int = 128,
        num_classes: int = 10,
        *,
        dropout: float = 0.0,
        in_channels: int = 3,
        attention: str = "joint",
    ) -> None:
        super().__init__()
        if attention not in ATTENTIONS:
            raise ValueError(f"attention: expected one of {ATTENTIONS}, got {attention!r}")
        t, p, p2 = tubelet
        if num_frames % t or image_size % p or p != p2:
            raise ValueError(
                f"tubelet: {tubelet} must tile the clip ({num_frames} frames of {image_size}^2)"
            )
        self.in_channels, self.num_classes, self.attention = in_channels, num_classes, attention
        self.grid = (num_frames // t, image_size // p, image_size // p)  # (T', H', W')
        self.input_size = (num_frames, image_size, image_size)
        self.patch_embed = nn.Conv3d(in_channels, hidden_dim, tubelet, stride=tubelet)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
        self.pos_embed = LearnedPositionEmbedding(
            (self.grid[0], self.grid[1] * self.grid[2]), hidden_dim, num_prefix_tokens=1
        )
        self.pos_drop = nn.Dropout(dropout)

        def block() -> nn.Module:
            if attention == "joint":
                return EncoderBlock(hidden_dim, num_heads, mlp_dim, dropout=dropout)
            return DividedSpaceTimeBlock(hidden_dim, num_heads, mlp_dim, self.grid, dropout=dropout)

        self.blocks = nn.Sequential(*[block() for _ in range(num_layers)])
        self.norm = nn.LayerNorm(hidden_dim, eps=1e-6)
        self.head = nn.Linear(hidden_dim, num_classes)
        self.num_features = hidden_dim
        self.feature_info = feature_info_of(
            [f"blocks.{i}" for i in range(num_layers)], [hidden_dim] * num_layers, [p] * num_layers
        )
        if not self.head.weight.is_meta:
            nn.init.normal_(self.cls_token, std=0.02)
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.trunc_normal_(m.weight, std=0.02)
                    nn.init.zeros_(m.bias)

    def _tokens(self, x: Tensor) -> Tensor:
        check_input(x, 5, self.in_channels)  # tokens row-major in (t, y, x)
        return embed_tokens(x, self.patch_embed, self.cls_token, self.pos_embed, self.pos_drop)


_TINY_CFG = {
    "num_classes": 10,
    "input_size": (3, 4, 32, 32),
    "task": "video_classification",
    "family": "video_transformer",
    "dynamic_time": False,
    "first_conv": "patch_embed",
    "classifier": ("head",),
    "test_overrides": {"width": 2},
    "test_input_size": (3, 4, 32, 32),
}


def _tiny(width: int, attention: str, **kwargs: Any) -> VideoTransformer:
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"width: expected a positive int, got {width!r}")
    cfg = {"hidden_dim": 8 * width, "mlp_dim": 16 * width, "num_heads": 4, "num_layers": 4}
    return VideoTransformer(**{**cfg, **kwargs, "attention": attention})


@register_model(default_cfg=_TINY_CFG)
def vivit_tiny(width: int = 8, **kwargs: Any) -> nn.Module:
    """Tiny joint space-time video transformer (ViViT model 1) for the digits demo.

    ``width`` scales it like the tiny C2D's ``width``: tokens of ``8 * width`` channels
    (64 at the demo's width 8), MLPs of ``16 * width``, 4 heads, 4 blocks, 4x4 patches.
    """
    return _tiny(width, "joint", **kwargs)


@register_model(default_cfg=_TINY_CFG)
def vivit_tiny_divided(width: int = 8, **kwargs: Any) -> nn.Module:
    """Tiny divided space-time video transformer (TimeSformer T+S) for the digits demo.

    Sizes as :func:`vivit_tiny`; each of the 4 blocks adds a temporal attention (and its
    LayerNorm) before the spatial one.
    """
    return _tiny(width, "divided", **kwargs)
