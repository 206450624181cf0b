"""The segmentation data section's training-augmentation, layout, sliding-window and region
options: their checks and what they build (datasets, the evaluation forward, the evaluator).

Kept beside :mod:`nlnet.engine.tasks.segmentation`, which declares the keys
(``SegmentationDataConfig``) and calls these helpers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import torch
from torch import nn

from nlnet.engine.region_metrics import Evaluators, RegionEvaluator, mapped_regions
from nlnet.engine.sliding_window import sliding_window_inference

__all__ = ["check_dense_keys", "image_folder", "window_forward", "evaluator_with_regions"]

LAYOUTS = ("folder", "cityscapes")


def _set(data: Any, key: str, value: Any) -> None:
    object.__setattr__(data, key, value)


def check_dense_keys(d: Any) -> None:
    """Check and normalise ``layout``, ``scale_range``, ``crop``, ``flip``, ``sliding_window``,
    ``window_overlap``, ``regions`` and ``hd95`` of a ``SegmentationDataConfig`` (a
    ``ValueError`` naming the key: a config error)."""
    if d.layout not in LAYOUTS:
        raise ValueError(f"data.layout: expected one of {', '.join(LAYOUTS)}, got {d.layout!r}")
    if d.kind == "volume":
        for key, unset in (("scale_range", ()), ("crop", ()), ("layout", "folder")):
            if getattr(d, key) != unset:
                raise ValueError(f"data.{key}: only for data.kind image")
    if d.scale_range and (len(d.scale_range) != 2 or not 0 < d.scale_range[0] <= d.scale_range[1]):
        raise ValueError(
            f"data.scale_range: expected [lo, hi] with 0 < lo <= hi, got {list(d.scale_range)!r}"
        )
    if d.crop:
        if len(d.crop) not in (1, 2) or min(d.crop) < 1:
            raise ValueError(f"data.crop: expected [h, w] positive sizes, got {list(d.crop)!r}")
        _set(d, "crop", (d.crop[0], d.crop[-1]))
    if not 0 <= d.window_overlap < 1:
        raise ValueError(
            f"data.window_overlap: expected a fraction in [0, 1), got {d.window_overlap!r}"
        )
    if d.sliding_window and not (d.crop if d.kind == "image" else d.patch):
        size = "data.crop" if d.kind == "image" else "data.patch"
        raise ValueError(f"data.sliding_window: needs {size} (the window size)")
    regions = {}
    for name, labels in dict(d.regions).items():
        try:
            ids = tuple(int(v) for v in (labels if isinstance(labels, (list, tuple)) else [labels]))
        except (TypeError, ValueError):
            ids = ()
        if not str(name).isidentifier() or not ids:
            raise ValueError(
                f"data.regions: expected {{name: [labels]}}, e.g. {{wt: [1, 2, 4], tc: [1, 4], "
                f"et: [4]}}, got {d.regions!r}"
            )
        regions[str(name)] = ids
    _set(d, "regions", regions)
    if d.hd95 and not regions:
        raise ValueError("data.hd95: needs data.regions (the regions to measure)")


def image_folder(d: Any, root: str, split: str, train: bool, **kwargs: Any) -> Any:
    """The 2D dataset of ``split`` in ``d.layout`` with the training augmentation of ``d``
    (:class:`~nlnet.data.segmentation.transforms.SegmentationAugment`) when ``train`` and any of
    ``scale_range``/``crop``/``flip`` is set."""
    from nlnet.data.segmentation.transforms import SegmentationAugment

    if d.layout == "cityscapes":
        from nlnet.data.segmentation.cityscapes import CityscapesFolder as folder
    else:
        from nlnet.data.segmentation.images import SegmentationFolder as folder
    flip = d.flip or 0.0
    if train and (d.scale_range or d.crop or flip):
        kwargs["transform"] = SegmentationAugment(
            d.scale_range, d.crop, flip, kwargs.get("ignore_index", 255)
        )
    return folder(root, split, **kwargs)


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
