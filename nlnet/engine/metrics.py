"""Classification metrics and meters.

* single-label (Kinetics, "Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971) Tables 2-3): top-1 / top-5 accuracy;
* multi-label (Charades, Section 5.2 and Table 4): mean average precision, the per-class AP
  averaged over the classes that have at least one positive;
* clip level (every clip scored alone) and video level (Section 4.1, "Inference": the softmax --
  or, for multi-label, sigmoid -- scores of the clips of a video are averaged).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import torch

from nlnet.engine import distributed as du

__all__ = [
    "topk_accuracy",
    "topk_correct",
    "average_precision",
    "mean_average_precision",
    "classification_metrics",
    "mean_class_accuracy",
    "per_class_accuracy",
    "classification_details",
    "VideoScoreAggregator",
    "ThroughputMeter",
]


def _check_scores(scores: torch.Tensor, name: str = "scores") -> None:
    if not isinstance(scores, torch.Tensor) or scores.dim() != 2:
        got = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
        raise ValueError(f"{name}: expected a (N, num_classes) tensor, got {got}")


def topk_correct(
    scores: torch.Tensor, targets: torch.Tensor, ks: Sequence[int] = (1, 5)
) -> dict[int, int]:
    """Number of samples whose label is among the ``k`` highest scores, for each ``k``.

    Args:
        scores: (N, C) logits or probabilities.
        targets: (N,) integer labels.
        ks: the ``k`` values; a ``k`` larger than ``C`` counts every sample as correct.
    """
    _check_scores(scores)
    if targets.dim() != 1 or targets.shape[0] != scores.shape[0]:
        raise ValueError(
            f"targets: expected ({scores.shape[0]},) integer labels, got {tuple(targets.shape)}"
        )
    if scores.shape[0] == 0:
        return {int(k): 0 for k in ks}
    kmax = min(max(ks), scores.shape[1])
    top = scores.topk(kmax, dim=1).indices  # (N, kmax)
    hit = top == targets.view(-1, 1).to(top.device)  # (N, kmax)
    return {int(k): int(hit[:, : min(k, kmax)].any(dim=1).sum()) for k in ks}


def topk_accuracy(
    scores: torch.Tensor, targets: torch.Tensor, ks: Sequence[int] = (1, 5)
) -> dict[str, float]:
    """Top-k accuracy in percent: ``{"top1": ..., "top5": ...}``."""
    n = scores.shape[0] if isinstance(scores, torch.Tensor) else 0
    correct = topk_correct(scores, targets, ks)
    return {f"top{k}": 100.0 * c / n if n else math.nan for k, c in correct.items()}


def average_precision(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Average precision of one class, ``sum_n (R_n - R_{n-1}) P_n`` over the ranked list
    (scikit-learn's ``average_precision_score``; tied scores are one threshold).

    Returns NaN when there is no positive.
    """
    from sklearn.metrics import average_precision_score

    y = (labels.detach().flatten().cpu() > 0.5).numpy()
    if not y.any():
        return math.nan
    return float(average_precision_score(y, scores.detach().double().flatten().cpu().numpy()))


def mean_average_precision(scores: torch.Tensor, targets: torch.Tensor) -> float:
    """mAP in percent over the classes with at least one positive (Charades, Table 4).

    Args:
        scores: (N, C) scores (sigmoid probabilities or logits: only the ranking matters).
        targets: (N, C) multi-hot labels.
    """
    _check_scores(scores)
    if targets.shape != scores.shape:
        raise ValueError(
            f"targets: expected multi-hot labels of shape {tuple(scores.shape)}, "
            f"got {tuple(targets.shape)}"
        )
    aps = [average_precision(scores[:, c], targets[:, c]) for c in range(scores.shape[1])]
    aps = [a for a in aps if not math.isnan(a)]
    return 100.0 * sum(aps) / len(aps) if aps else math.nan


def classification_metrics(
    scores: torch.Tensor, targets: torch.Tensor, multi_label: bool, ks: Sequence[int] = (1, 5)
) -> dict[str, float]:
    """top-1/top-5 for single-label targets, mAP for multi-label; plus the sample count."""
    out: dict[str, float] = {"count": float(scores.shape[0])}
    if multi_label:
        out["mAP"] = mean_average_precision(scores, targets)
    else:
        out.update(topk_accuracy(scores, targets.long(), ks))
    return out


def per_class_accuracy(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Top-1 accuracy (percent) of each class over the samples of that class, ``(C,)``; NaN
    for a class without samples."""
    pred = scores.argmax(1)
    t = targets.long()
    num = scores.shape[1]
    seen = torch.bincount(t, minlength=num).double()
    hit = torch.bincount(t[pred == t], minlength=num).double()
    return torch.where(seen > 0, 100.0 * hit / seen.clamp_min(1), torch.nan)


def mean_class_accuracy(scores: torch.Tensor, targets: torch.Tensor) -> float:
    """The mean over the classes present of their top-1 accuracy (percent): mmaction2's
    ``mean_class_accuracy``, which weighs a rare class like a common one."""
    acc = per_class_accuracy(scores, targets)
    return float(acc[~acc.isnan()].mean()) if (~acc.isnan()).any() else float("nan")


def classification_details(scores: torch.Tensor, targets: torch.Tensor) -> dict[str, Any]:
    """``per_class_top1`` (percent; ``None`` for a class without samples) and ``confusion``
    (rows: true class, columns: predicted; scikit-learn's ``confusion_matrix``) of single-label
    ``scores`` ``(N, C)`` and ``targets`` ``(N,)``."""
    from sklearn.metrics import confusion_matrix

    acc = per_class_accuracy(scores, targets)
    labels = list(range(scores.shape[1]))
    matrix = confusion_matrix(targets.long().numpy(), scores.argmax(1).numpy(), labels=labels)
    return {"per_class_top1": [None if math.isnan(a) else float(a) for a in acc.tolist()],
            "confusion": matrix.tolist()}  # fmt: skip


class VideoScoreAggregator:
    """Collects clip scores and averages them per video (multi-clip testing, Section 4.1).

    Feed it the softmax (or sigmoid) scores of each clip with its target and video index;
    :meth:`compute` returns clip-level and video-level metrics, gathered over all processes.

    Args:
        multi_label: targets are multi-hot vectors (mAP) instead of class indices (top-k).
        ks: the ``k`` of top-k accuracy.
    """

    def __init__(self, multi_label: bool = False, ks: Sequence[int] = (1, 5)) -> None:
        self.multi_label = multi_label
        self.ks = tuple(ks)
        self._scores: list[torch.Tensor] = []
        self._targets: list[torch.Tensor] = []
        self._indices: list[torch.Tensor] = []

    def update(self, scores: torch.Tensor, targets: torch.Tensor, indices: torch.Tensor) -> None:
        """Add a batch: ``scores`` (B, C) probabilities, ``targets`` (B,) or (B, C), ``indices`` (B,)."""
        _check_scores(scores)
        indices = torch.as_tensor(indices).view(-1)
        if indices.shape[0] != scores.shape[0]:
            raise ValueError(
                f"indices: expected {scores.shape[0]} video indices, got {indices.shape[0]}"
            )
        self._scores.append(scores.detach().float().cpu())
        self._targets.append(torch.as_tensor(targets).detach().cpu())
        self._indices.append(indices.long().cpu())

    def _local(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if not self._scores:
            return torch.zeros(0, 0), torch.zeros(0), torch.zeros(0, dtype=torch.long)
        return torch.cat(self._scores), torch.cat(self._targets), torch.cat(self._indices)

    def gather(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """All clips of all processes: scores (N, C), targets, video indices (N,)."""
        parts = [p for p in du.all_gather_object(self._local()) if p[0].numel()]
        if not parts:
            return self._local()
        return (
            torch.cat([p[0] for p in parts]),
            torch.cat([p[1] for p in parts]),
            torch.cat([p[2] for p in parts]),
        )

    @staticmethod
    def video_scores(
        scores: torch.Tensor, targets: torch.Tensor, indices: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Average the clip scores of each video: returns (V, C) scores, targets, video ids."""
        videos, inverse = torch.unique(indices, sorted=True, return_inverse=True)
        sums = torch.zeros(len(videos), scores.shape[1], dtype=torch.float64)
        sums.index_add_(0, inverse, scores.double())
        counts = torch.bincount(inverse, minlength=len(videos)).double().unsqueeze(1)
        first = torch.full((len(videos),), -1, dtype=torch.long)
        # the target of a video is the target of (any of) its clips
        first.scatter_reduce_(
            0, inverse, torch.arange(len(indices)), reduce="amax", include_self=True
        )
        return (sums / counts).float(), targets[first], videos

    def compute(self) -> dict[str, float]:
        """``clip_top1``, ``clip_top5``, ``video_top1``, ... (or ``clip_mAP``, ``video_mAP``)."""
        scores, targets, indices = self.gather()
        out: dict[str, float] = {}
        if scores.numel() == 0:
            return {"clip_count": 0.0, "video_count": 0.0}
        # top-k only for k below the class count (top-5 of 5 classes or fewer is always 100)
        ks = tuple(k for k in self.ks if k == 1 or k < scores.shape[1])
        for prefix, (s, t) in (
            ("clip", (scores, targets)),
            ("video", self.video_scores(scores, targets, indices)[:2]),
        ):
            for key, value in classification_metrics(s, t, self.multi_label, ks).items():
                out[f"{prefix}_{key}"] = value
            if not self.multi_label:
                out[f"{prefix}_mean_class_acc"] = mean_class_accuracy(s, t)
        return out

    def details(self) -> dict[str, Any]:
        """Video-level per-class top-1 (percent; ``None`` for a class without videos) and the
        confusion matrix (rows: true class, columns: predicted), single-label only."""
        scores, targets, indices = self.gather()
        if scores.numel() == 0 or self.multi_label:
            return {}
        s, t, _ = self.video_scores(scores, targets, indices)
        return classification_details(s, t)

    def reset(self) -> None:
        self._scores.clear()
        self._targets.clear()
        self._indices.clear()


class ThroughputMeter:
    """Clips per second over a sliding window of recent steps."""

    def __init__(self, window: int = 20) -> None:
        self.events: deque[tuple[float, int]] = deque(maxlen=window + 1)
        self.total = 0

    def update(self, n: int, now: float | None = None) -> None:
        self.total += int(n)
        self.events.append((time.perf_counter() if now is None else now, self.total))

    @property
    def rate(self) -> float:
        if len(self.events) < 2:
            return math.nan
        (t0, n0), (t1, n1) = self.events[0], self.events[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else math.nan
