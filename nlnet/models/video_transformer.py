"""A tiny video transformer with joint space-time attention, for the digits video demo.

Arnab et al., "ViViT: A Video Vision Transformer" (ICCV 2021), Sec. 3.2-3.3, "Model 1:
spatio-temporal attention": the clip is cut into tubelets (``t x p x p`` voxels, a strided 3D
convolution), a class token and a learned position embedding are added, and every encoder block
attends from each token to *all* tokens of all frames. That global attention over space and
time is the non-local operation of Wang et al. 2018 (Eq. 1, embedded Gaussian ``f`` per head)
used as the whole network instead of one block in a ConvNet (Sec. 3.2 of the non-local paper
discusses this relation to self-attention).

Built from :class:`~nlnet.models.vit.EncoderBlock` (:class:`~nlnet.layers.MultiheadSelfAttention`)
and :class:`~nlnet.layers.LearnedPositionEmbedding`; attention maps and rollout come through the
same recorder as the non-local blocks (:func:`nlnet.analysis.hooks.record_attention`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch import Tensor, nn

from nlnet.layers.pos_embed import LearnedPositionEmbedding
from nlnet.models.checks import check_input
from nlnet.models.registry import register_model
from nlnet.models.vit import EncoderBlock

__all__ = ["VideoTransformer", "vivit_tiny"]

torch.fx.wrap("check_input")


class VideoTransformer(nn.Module):
    """Joint space-time video transformer (ViViT model 1).

    Args:
        num_frames: clip length ``T`` (the position embedding is learned for it).
        image_size: frame side.
        tubelet: ``(t, p, p)`` voxels per token (``t`` frames, ``p x p`` pixels).
        num_layers, num_heads, hidden_dim, mlp_dim: encoder size.
        num_classes: logits.
        dropout: dropout on the tokens, after attention and in the MLPs.
        in_channels: input channels.

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
    ) -> None:
        super().__init__()
        t, p, p2 = tubelet
        if num_frames % t or image_size % p or p != p2:
            raise ValueError(
                f"tubelet: {tubelet} must tile the clip ({num_frames} frames of {image_size}^2)"
            )
        self.in_channels, self.num_classes = in_channels, num_classes
        self.grid = (num_frames // t, image_size // p, image_size // p)  # (T', H', W')
        self.input_size = (num_frames, image_size, image_size)
        self.patch_embed = nn.Conv3d(in_channels, hidden_dim, tubelet, stride=tubelet)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
        self.pos_embed = LearnedPositionEmbedding(
            (self.grid[0], self.grid[1] * self.grid[2]), hidden_dim, num_prefix_tokens=1
        )
        self.pos_drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(
            *[
                EncoderBlock(hidden_dim, num_heads, mlp_dim, dropout=dropout)
                for _ in range(num_layers)
            ]
        )
        self.norm = nn.LayerNorm(hidden_dim, eps=1e-6)
        self.head = nn.Linear(hidden_dim, num_classes)
        if not self.head.weight.is_meta:
            nn.init.normal_(self.cls_token, std=0.02)
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.trunc_normal_(m.weight, std=0.02)
                    nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        check_input(x, 5, self.in_channels)
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, T'H'W', D), row-major (t, y, x)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed.pos_embed  # (B, 1 + N, D)
        x = self.norm(self.blocks(self.pos_drop(x)))
        return self.head(x[:, 0])


@register_model(
    default_cfg={
        "num_classes": 10,
        "input_size": (3, 4, 32, 32),
        "task": "video_classification",
        "family": "video_transformer",
        "test_overrides": {"width": 2},
        "test_input_size": (3, 4, 32, 32),
    }
)
def vivit_tiny(width: int = 8, **kwargs: Any) -> nn.Module:
    """Tiny joint space-time video transformer (ViViT model 1) for the digits demo.

    ``width`` scales it like the tiny C2D's ``width``: tokens of ``8 * width`` channels
    (64 at the demo's width 8), MLPs of ``16 * width``, 4 heads, 4 blocks, 4x4 patches.
    """
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"width: expected a positive int, got {width!r}")
    cfg = {"hidden_dim": 8 * width, "mlp_dim": 16 * width, "num_heads": 4, "num_layers": 4}
    return VideoTransformer(**{**cfg, **kwargs})
