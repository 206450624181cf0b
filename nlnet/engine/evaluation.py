"""Evaluation, task-agnostic: detectron2's ``DatasetEvaluator`` shape and ``evaluate(cfg, ckpt)``.

A task evaluates with an evaluator object that is ``reset()`` once, ``process(batch, outputs)``
per batch and asked to ``evaluate()`` at the end (gathering over the processes itself), driven by
:func:`inference_on_dataset`; the loop and ``nlnet eval`` only see the metrics dict.  The video
task's multi-clip testing (Section 4.1) is :class:`nlnet.engine.tasks.video.evaluation.ClipScoreEvaluator`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn
from torch.utils.data import Dataset

from nlnet.engine import distributed as du
from nlnet.engine.checkpoint.file_io import load_checkpoint
from nlnet.engine.checkpoint.model_loading import (
    build_model_from_checkpoint,
    check_compatible,
    load_model_weights,
)
from nlnet.engine.errors import DataError
from nlnet.engine.modeling import trained_model_name
from nlnet.engine.runlog import use_progress_bar
from nlnet.engine.tasks import get_task
from nlnet.models.checks import model_in_channels

__all__ = ["DatasetEvaluator", "inference_on_dataset", "autocast_context", "evaluate"]


@runtime_checkable
class DatasetEvaluator(Protocol):
    """Accumulates a metric over batches (detectron2's ``DatasetEvaluator``).

    ``reset()``: forget previous batches.  ``process(batch, outputs)``: add one batch (the
    collated batch and the model's outputs on it; ``outputs`` is ``None`` for a batch whose
    items were all bad).  ``evaluate()``: the metrics dict, identical on every process.
    """

    def reset(self) -> None: ...
    def process(self, batch: Any, outputs: Any) -> None: ...
    def evaluate(self) -> dict[str, Any]: ...


def autocast_context(device: torch.device, amp: str):
    """``torch.autocast`` for ``bf16``/``fp16`` on CUDA, else a disabled (no-op) context."""
    if amp == "bf16" and device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    if amp == "fp16" and device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.float16)
    return torch.autocast(device_type=device.type, enabled=False)


@torch.no_grad()
def inference_on_dataset(
    model: nn.Module,
    batches: Iterable[Any],
    evaluator: DatasetEvaluator,
    forward: Callable[[nn.Module, Any], Any],
    *,
    device: torch.device | str = "cpu",
    amp: str = "none",
    progress: bool = False,
    desc: str = "eval",
) -> dict[str, Any]:
    """Run ``forward(model, batch)`` over ``batches`` in eval mode and feed the evaluator.

    Args:
        model: the network (eval mode here, its mode restored afterwards).
        batches: a loader over this process's shard.
        evaluator: a :class:`DatasetEvaluator` (reset here).
        forward: ``(model, batch) -> outputs`` (``None`` for an empty batch).
        device: where the model lives (for autocast).
        amp: ``none`` | ``bf16`` | ``fp16``.
        progress: a tqdm bar on rank 0.
        desc: the bar's label.

    Returns:
        ``evaluator.evaluate()`` plus ``time_s``.
    """
    device = torch.device(device)
    was_training = model.training
    model.eval()
    start = time.perf_counter()
    evaluator.reset()
    if progress and du.is_main_process():
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc=desc, leave=False, dynamic_ncols=True)
    try:
        for batch in batches:
            with autocast_context(device, amp):
                outputs = forward(model, batch)
            evaluator.process(batch, outputs)
    finally:
        model.train(was_training)
    metrics = evaluator.evaluate()
    metrics["time_s"] = time.perf_counter() - start
    return metrics


def evaluate(
    cfg: Any,
    checkpoint: str | os.PathLike | Mapping[str, Any],
    *,
    model: nn.Module | None = None,
    dataset: Dataset | None = None,
    split: str | None = None,
    collate_fn: Callable | None = None,
    details: bool = False,
) -> dict[str, Any]:
    """The task's evaluation of a checkpoint (``nlnet eval``), e.g. the video task's multi-clip
    testing (Section 4.1); ``details`` (video and image classification): also ``per_class_top1`` and the
    ``confusion`` matrix.

    Args:
        cfg: configuration; ``cfg.eval`` gives the batch size and the split (and, for videos,
            clips and crops), ``cfg.data`` the dataset.  The checkpoint's model name and class count must match
            ``cfg.model`` (a clear error otherwise).
        checkpoint: a ``.pt`` written by :func:`nlnet.engine.loop.train` (or a loaded one).
        model: load the weights into this network instead of :func:`build_model_from_checkpoint`.
        dataset: use this dataset instead of the task's ``split``.
        split: dataset split (default ``cfg.eval.split``).
        collate_fn: batch collation (default: the task's).

    Returns:
        The task's metrics plus ``checkpoint`` and ``split``.
    """
    info = du.init_distributed(cfg.train.device)
    try:
        ckpt = load_checkpoint(checkpoint, map_location="cpu")
        if cfg.model.num_classes is not None:  # a network given: its class decides the name
            name = cfg.model.name if model is None else trained_model_name(cfg, model)
            check_compatible(ckpt, name, cfg.model.num_classes)
        if model is None:
            model = build_model_from_checkpoint(ckpt)
        else:
            load_model_weights(model, ckpt)
        model.to(info.device)
        task = get_task(cfg, collate_fn)
        split = split or cfg.eval.split
        if dataset is None:
            dataset = task.build_dataset(split, "test")
        n = task.num_classes(dataset)
        if n is not None and n != int(ckpt.get("num_classes") or n):
            raise DataError(
                f"the {split} data has {n} classes but the checkpoint's model has "
                f"{ckpt['num_classes']}"
            )
        classifies = getattr(task, "classifies", False)  # one class per item
        named = getattr(task, "class_names", None)  # the config's display names: not folders
        if classifies and getattr(dataset, "from_folders", False) and not named:
            check_class_folders(ckpt.get("class_names"), dataset.classes, split)
        check_data_channels(model, task, dataset, split)
        amp = cfg.train.amp if info.device.type == "cuda" else "none"
        extra = {"details": True} if details and classifies else {}
        metrics = task.evaluate(model, dataset, info.device, amp=amp,
                                progress=use_progress_bar(cfg.train.progress) and info.is_main,
                                desc=f"eval {split}", **extra)  # fmt: skip
        metrics["split"] = split
        metrics["checkpoint"] = str(checkpoint) if not isinstance(checkpoint, Mapping) else None
        return metrics
    finally:
        du.cleanup(info)


def check_data_channels(model: nn.Module, task: Any, dataset: Any, split: str) -> None:
    """Refuse a dataset whose items have another channel count (``task.in_channels(dataset)``,
    where the task can tell: segmentation images and volumes) than the model's first
    convolution takes.

    Raises:
        DataError: both are known and differ.
    """
    probe = getattr(task, "in_channels", None)
    have = probe(dataset) if probe is not None else None
    takes = model_in_channels(model)
    if have is not None and takes is not None and int(have) != takes:
        raise DataError(
            f"data.root: the {split} cases have {have} channel(s) but the checkpoint's model "
            f"takes {takes}; evaluate it on cases with the channels it was trained on"
        )


def _plain(name: str) -> str:
    return " ".join(str(name).replace("_", " ").lower().split())


def check_class_folders(trained: Any, found: Any, split: str) -> None:
    """Refuse data whose classes are not the checkpoint's, in its order: a target is its
    folder's place among the sorted class folders, so other folders (or the same ones in
    another order) would be scored against the wrong outputs. Names compare without case and
    with ``_`` as a space (Kinetics' ``air_drumming`` folder is class ``air drumming``).

    Raises:
        DataError: both are known, of the same count, and differ (the first difference named).
    """
    if not trained or not found or len(trained) != len(found):
        return
    for i, (t, f) in enumerate(zip(trained, found)):
        if _plain(t) != _plain(f):
            raise DataError(
                f"data.root: class {i} of the {split} data is folder {str(f)!r} but the "
                f"checkpoint's class {i} is {str(t)!r}; name the class folders as the "
                "checkpoint's classes (targets are numbered by sorted folder name)"
            )
