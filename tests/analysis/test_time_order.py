"""Which registered video models see the order of frames (issue 26, item 3): computed, shown
by ``nlnet models`` and in docs/models.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from nlnet.analysis.time_order import (
    frame_order_markdown,
    frame_order_table,
    order_gap,
    sees_frame_order,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "models.md"


class _MeanOverTime(nn.Module):
    """Per-frame linear map and a temporal average: order-blind by construction."""

    def __init__(self, kt: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv3d(3, 5, (kt, 1, 1), padding=(kt // 2, 0, 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x)).mean(dim=(2, 3, 4))


def test_order_gap_is_round_off_for_a_per_frame_model_and_large_for_a_temporal_kernel():
    torch.manual_seed(0)
    clip = torch.randn(2, 3, 6, 4, 4, dtype=torch.float64)
    assert order_gap(_MeanOverTime(1).double().eval(), clip) < 1e-12
    assert order_gap(_MeanOverTime(3).double().eval(), clip) > 1e-3


def test_the_tiny_c2d_is_blind_and_the_tiny_i3d_sees_order():
    assert not sees_frame_order("c2d_tiny_nl1")
    assert sees_frame_order("i3d_tiny_nl1")
    with pytest.raises(ValueError, match="not a video model"):
        sees_frame_order("resnet50_nl_coco")


def test_a_branch_that_starts_as_the_identity_still_counts():
    # The order control's temporal block and a block with position information start as the
    # identity (BN scale 0): at initialisation the model is exactly as blind as C2D, but the
    # architecture sees order; the computation perturbs the parameters so that it says so.
    assert sees_frame_order("c2d_tiny_tconv1")
    assert not sees_frame_order("c2d_tiny_res1")
    from nlnet.analysis.time_order import perturb_parameters
    from nlnet.models import create_model

    clip = torch.randn(1, 3, 4, 32, 32, dtype=torch.float64)
    for pos, sees in (("none", False), ("sincos", True)):
        torch.manual_seed(0)
        model = create_model("c2d_tiny_nl1", width=2, pos=pos).double().eval()
        assert order_gap(model, clip) < 1e-9  # identity at insertion: blind as built
        perturb_parameters(model)
        assert (order_gap(model, clip) > 1e-6) is sees


def test_the_computation_agrees_with_a_direct_reversal_in_float32():
    """Independent of order_gap: the tiny C2D's logits of a clip and of the clip reversed agree
    to float32 round-off, the tiny I3D's do not."""
    from nlnet.models.registry import create_model

    clip = torch.randn(2, 3, 8, 32, 32)
    for name, blind in (("c2d_tiny_nl1", True), ("i3d_tiny_nl1", False)):
        torch.manual_seed(1)
        model = create_model(name, num_classes=4).eval()
        with torch.no_grad():
            gap = (model(clip) - model(clip.flip(2))).abs().max() / model(clip).abs().max()
        assert (gap < 1e-4) == blind, (name, gap)


def _doc_table() -> str:
    text = DOC.read_text()
    m = re.search(r"<!-- frame-order-table:start -->\n(.*?)\n<!-- frame-order-table:end -->",
                  text, re.S)  # fmt: skip
    assert m, "docs/models.md: no frame-order table markers"
    return m.group(1).strip()


def test_the_docs_table_is_the_computed_table_of_every_registered_video_model():
    table = frame_order_table()
    assert {"c2d_tiny_nl1", "i3d_tiny_nl1", "c2d_r50_nl5", "i3d311_r50_nl5"} <= set(table)
    assert "resnet50_nl_coco" not in table  # image models are not listed
    assert _doc_table() == frame_order_markdown(table), (
        "docs/models.md's frame-order table is stale: paste `python -m nlnet.analysis.time_order`"
    )


def test_nlnet_models_shows_the_time_column(capsys):
    from nlnet.cli import main

    assert main(["models", "--filter", "tiny"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()}
    assert rows["name"][2] == "time"
    assert rows["c2d_tiny_nl1"][2] == "blind" and rows["i3d_tiny_nl1"][2] == "order"
    assert main(["models", "--filter", "resnet50_nl_coco"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[2] == "-"  # not a video model
