"""Multi-clip testing ("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971),
Section 4.1, "Inference") as a :class:`~nlnet.engine.evaluation.DatasetEvaluator`.

Each video is sampled as ``K`` clips spread evenly over its length (``K = 10`` in the paper), each
clip optionally as several spatial crops; every view is classified on its own and the softmax
scores of all views of a video are averaged (sigmoid scores for the multi-label Charades task,
Section 5.2).  Spatially the inference is fully convolutional: the network ends in global average
pooling, so a test view can be the whole frame resized to a shorter side of 256.

The dataset yields one item per view, ``(clip, target, video_index)``; the evaluator only groups
the views by ``video_index``, so it works for any number of clips and crops.  With several
processes each rank scores a disjoint shard (:class:`~nlnet.engine.distributed.ShardedEvalSampler`)
and the scores are gathered before the metrics are computed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from nlnet.data.loader import usable_workers
from nlnet.data.video.batches import collate_eval  # the data package defines the batch format
from nlnet.engine import distributed as du
from nlnet.engine.evaluation import inference_on_dataset
from nlnet.engine.metrics import VideoScoreAggregator

__all__ = [
    "ClipScoreEvaluator",
    "run_evaluation",
    "build_eval_loader",
    "scores_from_logits",
    "unpack_batch",
]


def scores_from_logits(logits: torch.Tensor, multi_label: bool) -> torch.Tensor:
    """Per-category sigmoid (multi-label, Section 5.2) or softmax (single-label) scores."""
    logits = logits.float()
    return torch.sigmoid(logits) if multi_label else torch.softmax(logits, dim=1)


def unpack_batch(batch: Mapping[str, Any] | None) -> tuple[torch.Tensor | None, Any, Any, int]:
    """``(clip, target, index, skipped)`` from a collated batch, the dict of
    :func:`nlnet.data.video.batches.collate_skip_bad`."""
    if batch is None:
        return None, None, None, 0
    return (
        batch.get("clip"),
        batch.get("target"),
        batch.get("index"),
        int(batch.get("skipped", 0) or 0),
    )


class ClipScoreEvaluator:
    """Clip- and video-level top-k (single-label) or mAP (multi-label) over the views of a test
    set: ``reset`` / ``process(batch, logits)`` / ``evaluate``.

    ``evaluate()`` returns ``clip_top1``, ``clip_top5``, ``video_top1``, ``video_top5``
    (percent) or ``clip_mAP``, ``video_mAP``; ``clip_count``, ``video_count`` and ``skipped``
    (bad videos), identical on every rank.
    """

    def __init__(self, multi_label: bool = False, details: bool = False) -> None:
        self.multi_label, self.details = multi_label, details
        self.reset()

    def reset(self) -> None:
        self.agg = VideoScoreAggregator(multi_label=self.multi_label)
        self.skipped = 0

    def process(self, batch: Any, outputs: torch.Tensor | None) -> None:
        _clip, target, index, n_bad = unpack_batch(batch)
        self.skipped += n_bad
        if outputs is not None:
            self.agg.update(scores_from_logits(outputs, self.multi_label), target, index)

    def evaluate(self) -> dict[str, Any]:
        metrics = self.agg.compute()
        total = du.all_reduce_sum(torch.tensor([float(self.skipped)], dtype=torch.float64))
        metrics["skipped"] = float(total.item())
        if self.details:  # per-class top-1 and the confusion matrix (nlnet eval)
            metrics.update(self.agg.details())
        return metrics


def forward_clips(model: nn.Module, batch: Any) -> torch.Tensor | None:
    """The logits ``(B, num_classes)`` of a batch's clips (``None`` when it has none)."""
    clip = unpack_batch(batch)[0]
    if clip is None or len(clip) == 0:
        return None
    device = next(model.parameters()).device
    if isinstance(clip, torch.Tensor):
        return model(clip.to(device, non_blocking=True))
    # a ragged batch (full-frame views of videos of several sizes): one forward per shape
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, c in enumerate(clip):
        groups.setdefault(tuple(c.shape), []).append(i)
    out: list[torch.Tensor | None] = [None] * len(clip)
    for idx in groups.values():
        logits = model(torch.stack([clip[i] for i in idx]).to(device, non_blocking=True))
        for i, row in zip(idx, logits):
            out[i] = row
    return torch.stack(out)  # type: ignore[arg-type]


def build_eval_loader(
    dataset: Dataset,
    batch_size: int = 1,
    workers: int = 0,
    collate_fn: Callable | None = None,
    pin_memory: bool = False,
) -> DataLoader:
    """A loader over this rank's shard of the test views (no padding, no shuffling)."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=du.ShardedEvalSampler(len(dataset)),
        num_workers=usable_workers(workers),
        collate_fn=collate_fn or collate_eval,
        pin_memory=pin_memory,
        drop_last=False,
        # a private generator: building the loader must not consume the global RNG
        generator=torch.Generator().manual_seed(0),
    )


def run_evaluation(
    model: nn.Module,
    loader: DataLoader,
    device: torch.device | str,
    *,
    multi_label: bool = False,
    amp: str = "none",
    progress: bool = False,
    desc: str = "eval",
    details: bool = False,
) -> dict[str, Any]:
    """Multi-clip testing of ``model`` over ``loader`` (see :class:`ClipScoreEvaluator`;
    ``details``: also per-class top-1 and the confusion matrix).

    Args:
        model: the network (eval mode during the pass, its mode restored).
        loader: batches of ``nlnet.data.collate_skip_bad`` (dicts).
        device: where the model lives.
        multi_label: sigmoid scores and mAP instead of softmax and top-k.
        amp: ``none`` | ``bf16`` | ``fp16``.
        progress: a tqdm bar on rank 0.
        desc: bar label.
    """
    return inference_on_dataset(
        model, loader, ClipScoreEvaluator(multi_label, details), forward_clips,
        device=device, amp=amp, progress=progress, desc=desc,
    )  # fmt: skip
