"""What the engine builds from the segmentation data section's sliding-window and region
options: the evaluation forward and the evaluator.

Kept beside :mod:`nlnet.engine.tasks.segmentation`, which calls these helpers; the keys and their
checks are :class:`~nlnet.data.segmentation.config.SegmentationDataConfig`'s, the datasets they
configure are built by :mod:`nlnet.data.segmentation.builder`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import torch
from torch import nn

from nlnet.engine.tasks.segmentation.region_metrics import (
    Evaluators,
    RegionEvaluator,
    mapped_regions,
)
from nlnet.engine.tasks.segmentation.sliding_window import sliding_window_inference

__all__ = ["window_forward", "evaluator_with_regions"]


def window_forward(
    base: Callable[[nn.Module, Any], torch.Tensor | None], window: Sequence[int], overlap: float
) -> Callable[[nn.Module, Any], torch.Tensor | None]:
    """``base`` (a ``forward(model, batch)``) applied on sliding windows of ``window``: a batch
    whose images or volumes fit in one window goes through ``base`` whole."""
    return partial(_window_forward, base, tuple(window), overlap)


def _window_forward(
    base: Callable[[nn.Module, Any], torch.Tensor | None],
    window: tuple[int, ...],
    overlap: float,
    model: nn.Module,
    batch: Mapping[str, Any],
) -> torch.Tensor | None:
    inputs = batch["image"]
    if inputs.shape[0] == 0:
        return None
    if all(n <= w for n, w in zip(inputs.shape[2:], window)):
        return base(model, batch)
    device = next(model.parameters()).device
    return sliding_window_inference(
        inputs.to(device), window, lambda x: base(model, {**batch, "image": x}), overlap
    )


def evaluator_with_regions(confusion: Any, d: Any, ignore_index: int) -> Any:
    """``confusion`` alone, or with a :class:`RegionEvaluator` of ``d.regions`` (mapped
    through ``d.label_map``) beside it."""
    if not d.regions:
        return confusion
    regions = mapped_regions(d.regions, d.label_map)
    return Evaluators(confusion, RegionEvaluator(regions, ignore_index, d.hd95))
