"""Analysis: parameter and multiply-add counting, attention recording and pictures."""

from nlnet.analysis.attention_record import (
    AttentionRecorder,
    GridMapping,
    find_non_local_blocks,
    record_attention,
)
from nlnet.analysis.cost import CostReport, mask_rcnn_like_cost, model_cost, table2e
from nlnet.analysis.visualize import arrows_figure, draw_arrows, heatmap_figure

__all__ = [
    "AttentionRecorder",
    "CostReport",
    "GridMapping",
    "arrows_figure",
    "draw_arrows",
    "find_non_local_blocks",
    "heatmap_figure",
    "mask_rcnn_like_cost",
    "model_cost",
    "record_attention",
    "table2e",
]
