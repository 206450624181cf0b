"""Dense pictures: overlays, drawn detections, the block's attention from a pixel."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from nlnet.analysis.dense_visualize import (
    PALETTE,
    draw_detections,
    overlay_segmentation,
    pixel_attention,
    save_segmentation_figure,
)
from nlnet.models import create_model


def test_overlay_keeps_background_and_colours_classes():
    image = np.full((4, 5, 3), 100, dtype=np.uint8)
    classes = np.zeros((4, 5), dtype=np.int64)
    classes[1, 2] = 3
    out = overlay_segmentation(image, classes, alpha=1.0)
    assert np.array_equal(out[0, 0], image[0, 0])
    assert np.array_equal(out[1, 2], PALETTE[3])
    with pytest.raises(ValueError, match="classes"):
        overlay_segmentation(image, classes[:2])


def test_draw_detections_draws_boxes_and_masks_above_threshold():
    image = np.zeros((32, 32, 3), dtype=np.uint8)
    masks = torch.zeros(2, 1, 32, 32)
    masks[0, 0, 5:10, 5:10] = 1.0
    output = {
        "boxes": torch.tensor([[4.0, 4.0, 12.0, 12.0], [20.0, 20.0, 30.0, 30.0]]),
        "labels": torch.tensor([1, 2]),
        "scores": torch.tensor([0.9, 0.1]),
        "masks": masks,
    }
    out = draw_detections(image, output, ["a", "b"], score_threshold=0.5)
    assert out.shape == image.shape and out.dtype == np.uint8
    assert out[7, 7].any()  # the mask of the kept detection
    assert not out[25, 25].any() and not out[20, 25].any()  # the low-score box is not drawn


class _Wrapped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = create_model("seg_tiny_nl")
        nn.init.ones_(self.net.head.non_local.norm.weight)

    def forward(self, x):
        return self.net(x)


def test_pixel_attention_is_a_distribution_over_the_image(tmp_path):
    torch.manual_seed(0)
    model = _Wrapped().train()
    image = torch.randn(3, 64, 64)
    weights, up = pixel_attention(model, image, (40, 20))
    assert model.training  # mode restored
    assert weights.shape == (8, 8)  # 16x16 res5 grid (output stride 4) pooled by 2
    assert weights.sum() == pytest.approx(1.0, abs=1e-5)
    assert up.shape == (64, 64)
    assert up[0:8, 0:8].min() == up[0:8, 0:8].max() == pytest.approx(weights[0, 0])
    path = save_segmentation_figure(
        tmp_path / "fig.png",
        np.zeros((64, 64, 3), dtype=np.uint8),
        np.zeros((64, 64), dtype=np.int64),
        {"model": np.ones((64, 64), dtype=np.int64)},
        up,
        (40, 20),
        ["bg", "fg"],
    )
    assert path.stat().st_size > 0
