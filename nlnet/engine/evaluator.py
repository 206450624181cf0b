"""Multi-clip testing ("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971), Section 4.1, "Inference").

Each video is sampled as ``K`` clips spread evenly over its length (``K = 10`` in the paper), each
clip optionally as several spatial crops; every view is classified on its own and the softmax
scores of all views of a video are averaged (sigmoid scores for the multi-label Charades task,
Section 5.2).  Spatially the inference is fully convolutional: the network ends in global average
pooling, so a test view can be the whole frame resized to a shorter side of 256.

The dataset yields one item per view, ``(clip, target, video_index)``; this module only groups the
views by ``video_index``, so it works for any number of clips and crops.  With several processes
each rank scores a disjoint shard (:class:`~nlnet.engine.distributed.ShardedEvalSampler`) and the
scores are gathered before the metrics are computed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from nlnet.data.datasets import collate_skip_bad  # the data package defines the batch format
from nlnet.engine import distributed as du
from nlnet.engine.metrics import VideoScoreAggregator

__all__ = ["run_evaluation", "build_eval_loader", "scores_from_logits", "autocast_context"]


def scores_from_logits(logits: torch.Tensor, multi_label: bool) -> torch.Tensor:
    """Per-category sigmoid (multi-label, Section 5.2) or softmax (single-label) scores."""
    logits = logits.float()
    return torch.sigmoid(logits) if multi_label else torch.softmax(logits, dim=1)


def autocast_context(device: torch.device, amp: str):
    """``torch.autocast`` for ``bf16``/``fp16`` on CUDA, else a disabled (no-op) context."""
    if amp == "bf16" and device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    if amp == "fp16" and device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.float16)
    return torch.autocast(device_type=device.type, enabled=False)


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
        num_workers=workers,
        collate_fn=collate_fn or collate_skip_bad,
        pin_memory=pin_memory,
        drop_last=False,
        # a private generator: building the loader must not consume the global RNG
        generator=torch.Generator().manual_seed(0),
    )


@torch.no_grad()
def run_evaluation(
    model: nn.Module,
    loader: DataLoader,
    device: torch.device | str,
    *,
    multi_label: bool = False,
    amp: str = "none",
    progress: bool = False,
    desc: str = "eval",
) -> dict[str, Any]:
    """Score every view in ``loader`` and return clip- and video-level metrics.

    Args:
        model: the network (put in eval mode here; the caller restores train mode).
        loader: batches as produced by ``nlnet.data.collate_skip_bad`` (a dict with ``clip``
            (B, C, T, H, W), ``target``, ``index`` and ``skipped``) or ``(clip, target, index)``.
        device: where the model lives.
        multi_label: sigmoid scores and mAP instead of softmax and top-k.
        amp: ``none`` | ``bf16`` | ``fp16``.
        progress: show a tqdm bar on rank 0.
        desc: bar label.

    Returns:
        ``clip_top1``, ``clip_top5``, ``video_top1``, ``video_top5`` (percent) or ``clip_mAP``,
        ``video_mAP``; ``clip_count``, ``video_count``, ``skipped`` (bad videos) and ``time_s``,
        identical on every rank.
    """
    device = torch.device(device)
    was_training = model.training
    model.eval()
    agg = VideoScoreAggregator(multi_label=multi_label)
    skipped = 0
    start = time.perf_counter()
    iterator = loader
    if progress and du.is_main_process():
        from tqdm.auto import tqdm

        iterator = tqdm(loader, desc=desc, leave=False, dynamic_ncols=True)
    for batch in iterator:
        clip, target, index, n_bad = unpack_batch(batch)
        skipped += n_bad
        if clip is None or clip.shape[0] == 0:
            continue
        with autocast_context(device, amp):
            logits = model(clip.to(device, non_blocking=True))  # (B, num_classes)
        agg.update(scores_from_logits(logits, multi_label), target, index)
    metrics = agg.compute()
    total_skipped = du.all_reduce_sum(torch.tensor([float(skipped)], dtype=torch.float64))
    metrics["skipped"] = float(total_skipped.item())
    metrics["time_s"] = time.perf_counter() - start
    model.train(was_training)
    return metrics


def unpack_batch(batch: Any) -> tuple[torch.Tensor | None, Any, Any, int]:
    """``(clip, target, index, skipped)`` from a collated batch (dict or tuple)."""
    if batch is None:
        return None, None, None, 0
    if isinstance(batch, dict):
        return (
            batch.get("clip"),
            batch.get("target"),
            batch.get("index"),
            int(batch.get("skipped", 0) or 0),
        )
    clip, target, index = batch[:3]
    return clip, target, index, 0
