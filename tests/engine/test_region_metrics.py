"""BraTS region metrics: per-case Dice of whole tumour / tumour core / enhancing tumour on
hand-made volumes of known overlaps, averaged over cases, the empty-region convention, the pad
of a batch ignored, and HD95 through MONAI where installed."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from nlnet.engine.tasks.segmentation.region_metrics import (
    BRATS_REGIONS,
    Evaluators,
    RegionEvaluator,
    case_region_metrics,
    mapped_regions,
    region_dice,
)

# case A, raw BraTS labels (1 necrosis, 2 oedema, 4 enhancing), one (1, 2, 5) volume
TRUE_A = [[[0, 1, 1, 2, 4], [2, 2, 4, 4, 0]]]
PRED_A = [[[0, 1, 2, 2, 4], [2, 0, 4, 1, 0]]]
# by hand: WT |T| 8, |P| 7, overlap 7 -> 14/15; TC |T| 5 (1,1,4 | 4,4), |P| 4 (1,4 | 4,1),
# overlap 4 -> 8/9; ET |T| 3, |P| 2, overlap 2 -> 4/5
DICE_A = {"dice_wt": 14 / 15, "dice_tc": 8 / 9, "dice_et": 4 / 5}
# case B: oedema only; TC and ET absent from truth and prediction -> Dice 1 (BraTS)
TRUE_B = [[[0, 2, 2, 0, 0], [0, 0, 0, 0, 0]]]
PRED_B = [[[0, 2, 0, 0, 0], [0, 0, 0, 0, 0]]]
DICE_B = {"dice_wt": 2 / 3, "dice_tc": 1.0, "dice_et": 1.0}


def _t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.int64)


def _map(x: torch.Tensor) -> torch.Tensor:  # data.label_map {4: 3}
    return torch.where(x == 4, 3, x)


def test_per_case_dice_of_the_brats_regions():
    got = case_region_metrics(_t(PRED_A), _t(TRUE_A), BRATS_REGIONS)
    assert got == pytest.approx({k: 100 * v for k, v in DICE_A.items()})
    got = case_region_metrics(_t(PRED_B), _t(TRUE_B), BRATS_REGIONS)
    assert got == pytest.approx({k: 100 * v for k, v in DICE_B.items()})


def test_empty_region_conventions():
    empty, one = torch.zeros(4, dtype=torch.bool), torch.tensor([True, False, False, False])
    assert region_dice(empty, empty) == 1.0  # absent from both: perfect
    assert region_dice(one, empty) == 0.0 and region_dice(empty, one) == 0.0


def test_regions_follow_the_label_map():
    assert mapped_regions(BRATS_REGIONS, {4: 3}) == {"wt": (1, 2, 3), "tc": (1, 3), "et": (3,)}
    assert mapped_regions(BRATS_REGIONS) == BRATS_REGIONS


def test_evaluator_averages_cases_and_ignores_the_pad():
    """Two cases of different sizes in one padded batch (pad = 255 in the masks, anything in the
    prediction), classes after ``label_map {4: 3}``: the mean of the per-case Dice, not the
    Dice of the pooled voxels."""
    true = torch.full((2, 1, 2, 7), 255)
    pred = torch.full((2, 1, 2, 7), 3)  # the pad predicted as enhancing: must not count
    true[0, :, :, :5], pred[0, :, :, :5] = _map(_t(TRUE_A)), _map(_t(PRED_A))
    true[1, :, :, :5], pred[1, :, :, :5] = _map(_t(TRUE_B)), _map(_t(PRED_B))
    logits = F.one_hot(pred, 4).permute(0, 4, 1, 2, 3).float()
    ev = RegionEvaluator(mapped_regions(BRATS_REGIONS, {4: 3}))
    ev.process({"mask": true}, logits)
    ev.process({"mask": true[:0]}, None)  # an all-bad batch
    got = ev.evaluate()
    assert got["cases"] == 2
    for key in DICE_A:
        assert got[key] == pytest.approx(100 * (DICE_A[key] + DICE_B[key]) / 2)
    # pooled over both cases, TC would be 8/9 (case B adds nothing): the mean differs
    assert got["dice_tc"] == pytest.approx(100 * (8 / 9 + 1) / 2)
    ev.reset()
    assert ev.evaluate() == {"cases": 0.0}


def test_a_region_absent_from_every_mask_is_not_reported():
    """Data without BraTS's label 4: ``dice_et`` would be 100 for predicting nothing; it is
    left out with one warning, the regions that occur are reported."""
    true = torch.tensor([[[[0, 1, 2, 2]]]])  # labels 1 and 2, no enhancing tumour
    logits = F.one_hot(torch.tensor([[[[0, 1, 2, 0]]]]), 4).permute(0, 4, 1, 2, 3).float()
    ev = RegionEvaluator(mapped_regions(BRATS_REGIONS, {4: 3}))
    ev.process({"mask": true}, logits)
    with pytest.warns(UserWarning, match=r"data.regions: et never occur\(s\)"):
        got = ev.evaluate()
    assert "dice_et" not in got and got["dice_wt"] == pytest.approx(100 * 2 * 2 / (2 + 3))
    assert got["dice_tc"] == pytest.approx(100.0)  # label 1 predicted where it is


def test_evaluators_merge_and_refuse_a_key_twice():
    class Fixed:
        def __init__(self, m):
            self.m = m

        def reset(self):
            pass

        def process(self, batch, outputs):
            pass

        def evaluate(self):
            return dict(self.m)

    assert Evaluators(Fixed({"a": 1}), Fixed({"b": 2})).evaluate() == {"a": 1, "b": 2}
    with pytest.raises(ValueError, match="'a' reported twice"):
        Evaluators(Fixed({"a": 1}), Fixed({"a": 2})).evaluate()


def test_hd95_through_monai():
    pytest.importorskip(
        "monai.metrics", reason="MONAI not installed (pip install 'nlnet[medical]')"
    )
    from nlnet.engine.tasks.segmentation.region_metrics import hausdorff95

    a = torch.zeros(6, 8, 8, dtype=torch.bool)
    b = torch.zeros_like(a)
    a[1, 1, 1], b[1, 4, 5] = True, True  # one voxel each, 3-4-5 apart
    assert hausdorff95(a, b) == pytest.approx(5.0)
    cube = torch.zeros_like(a)
    cube[1:4, 2:6, 2:6] = True
    assert hausdorff95(cube, cube) == 0.0
    assert hausdorff95(torch.zeros_like(a), torch.zeros_like(a)) == 0.0
    # present in one only: the grid's diagonal (BraTS: 373.13 on 155 x 240 x 240)
    assert hausdorff95(cube, torch.zeros_like(a)) == pytest.approx(math.sqrt(36 + 64 + 64))
    got = case_region_metrics(
        _map(_t(PRED_A)), _map(_t(TRUE_A)), mapped_regions(BRATS_REGIONS, {4: 3}), hd95=True
    )
    assert set(got) == {"dice_wt", "dice_tc", "dice_et", "hd95_wt", "hd95_tc", "hd95_et"}
    assert all(v >= 0 for v in got.values())


def test_hd95_without_monai_is_one_clear_error(monkeypatch):
    """Where MONAI is missing, asking for ``data.hd95`` names the extra (a user error, exit 2),
    when the task is built rather than after a whole evaluation."""
    import sys

    from nlnet.engine.errors import MissingPackageError
    from nlnet.engine.tasks.segmentation import SegmentationTask

    monkeypatch.setitem(sys.modules, "monai", None)  # import monai... -> ImportError
    monkeypatch.setitem(sys.modules, "monai.metrics", None)
    data = {"kind": "volume", "regions": dict(BRATS_REGIONS), "hd95": True}
    with pytest.raises(MissingPackageError, match=r"MONAI: pip install 'nlnet\[medical\]'"):
        SegmentationTask(4, data=data)
    SegmentationTask(4, data={**data, "hd95": False})  # Dice alone needs no MONAI
