"""Metrics: top-k, AP/mAP (against scikit-learn), clip/video aggregation, meters."""

from __future__ import annotations

import math

import pytest
import torch

from nlnet.engine.metrics import (
    VideoScoreAggregator,
    average_precision,
    mean_average_precision,
    topk_accuracy,
    topk_correct,
)


def test_topk():
    scores = torch.tensor([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]])
    targets = torch.tensor([1, 1, 0])
    assert topk_correct(scores, targets, (1, 2, 5)) == {1: 1, 2: 2, 5: 3}
    acc = topk_accuracy(scores, targets, (1, 2))
    assert acc["top1"] == pytest.approx(100 / 3) and acc["top2"] == pytest.approx(200 / 3)
    with pytest.raises(ValueError, match="targets"):
        topk_correct(scores, torch.tensor([1, 2]))


def test_average_precision_matches_sklearn():
    import sklearn.metrics as sk  # scikit-learn is a dependency (the demo digits)

    g = torch.Generator().manual_seed(0)
    scores = torch.rand(40, 6, generator=g).round(decimals=1)  # with ties
    targets = (torch.rand(40, 6, generator=g) > 0.6).float()
    targets[:, 5] = 0  # a class without positives is left out of the mean
    for c in range(5):
        ref = sk.average_precision_score(targets[:, c].numpy(), scores[:, c].numpy())
        assert average_precision(scores[:, c], targets[:, c]) == pytest.approx(ref)
    assert math.isnan(average_precision(scores[:, 5], targets[:, 5]))
    ref_map = (
        sum(
            sk.average_precision_score(targets[:, c].numpy(), scores[:, c].numpy())
            for c in range(5)
        )
        / 5
    )
    assert mean_average_precision(scores, targets) == pytest.approx(100 * ref_map)


def test_video_level_averages_clip_scores():
    agg = VideoScoreAggregator()
    # video 0 (label 0): clip 1 wrong, clip 2 confidently right -> video right
    agg.update(torch.tensor([[0.4, 0.6], [0.9, 0.1]]), torch.tensor([0, 0]), torch.tensor([0, 0]))
    # video 1 (label 1): one clip, right
    agg.update(torch.tensor([[0.2, 0.8]]), torch.tensor([1]), torch.tensor([1]))
    m = agg.compute()
    assert m["clip_count"] == 3 and m["video_count"] == 2
    assert m["clip_top1"] == pytest.approx(200 / 3) and m["video_top1"] == 100.0
    scores, targets, videos = VideoScoreAggregator.video_scores(*agg.gather())
    torch.testing.assert_close(scores[0], torch.tensor([0.65, 0.35]))
    assert targets.tolist() == [0, 1] and videos.tolist() == [0, 1]


def test_multilabel_aggregation_gives_map():
    agg = VideoScoreAggregator(multi_label=True)
    t = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    agg.update(torch.tensor([[0.9, 0.2], [0.3, 0.7]]), t, torch.tensor([0, 1]))
    m = agg.compute()
    assert m["video_mAP"] == 100.0 and m["clip_mAP"] == 100.0


def test_per_class_and_mean_class_accuracy_and_no_top5_for_few_classes():
    """mmaction2's mean class accuracy weighs a rare class like a common one; top-5 is left out
    when the model has 5 classes or fewer (it would be 100 whatever the model)."""
    import math

    from nlnet.engine.metrics import VideoScoreAggregator, mean_class_accuracy, per_class_accuracy

    scores = torch.eye(3)[[0, 0, 0, 0, 1, 2]]  # predictions 0 0 0 0 1 2
    targets = torch.tensor([0, 0, 0, 0, 2, 2])  # class 2: one of two right; class 1 absent
    acc = per_class_accuracy(scores, targets)
    assert acc[0] == 100.0 and math.isnan(acc[1]) and acc[2] == 50.0
    assert mean_class_accuracy(scores, targets) == 75.0  # top-1 over the samples: 5 / 6
    agg = VideoScoreAggregator()
    agg.update(scores, targets, torch.arange(6))
    out = agg.compute()
    assert "video_top5" not in out and "clip_top5" not in out
    assert abs(out["video_top1"] - 500 / 6) < 1e-4 and out["video_mean_class_acc"] == 75.0
    many = VideoScoreAggregator()
    many.update(torch.eye(8)[:4], torch.arange(4), torch.arange(4))
    assert many.compute()["video_top5"] == 100.0
