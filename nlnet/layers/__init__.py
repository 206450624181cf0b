"""Neural-network modules: the non-local block and the self-attention layers."""

from nlnet.layers.attention import MultiheadSelfAttention
from nlnet.layers.block_spec import BlockOptions
from nlnet.layers.nonlocal_block import NonLocal1d, NonLocal2d, NonLocal3d, NonLocalNd
from nlnet.layers.pos_embed import LearnedPositionEmbedding, SinusoidalPositionEmbedding
from nlnet.layers.window_attention import (
    SwinBlock,
    WindowAttention,
    WindowAttention2d,
    WindowAttention3d,
    swin_blocks,
)

__all__ = [
    "BlockOptions",
    "LearnedPositionEmbedding",
    "MultiheadSelfAttention",
    "NonLocal1d",
    "NonLocal2d",
    "NonLocal3d",
    "NonLocalNd",
    "SinusoidalPositionEmbedding",
    "SwinBlock",
    "WindowAttention",
    "WindowAttention2d",
    "WindowAttention3d",
    "swin_blocks",
]
