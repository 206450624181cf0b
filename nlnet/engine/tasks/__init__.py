"""Tasks: the task-specific parts of training, behind one small protocol.

The training loop (:mod:`nlnet.engine.loop`) knows nothing about videos, masks or boxes: it asks
the task of the config (``task: video_classification`` | ``segmentation`` | ``detection``) for datasets, batches,
the loss and the evaluation.  A task implements :class:`Task` and is registered with
:func:`register_task`; see docs/ARCHITECTURE.md.  Modules: ``video`` (clip classification,
Sections 4-5.2), ``segmentation`` (semantic segmentation, mIoU), ``detection`` (COCO boxes,
masks and keypoints with pycocotools, Section 6).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from nlnet.engine.errors import DataError

__all__ = [
    "Task",
    "compute_loss",
    "get_task",
    "register_task",
]


@runtime_checkable
class Task(Protocol):
    """What the loop needs from a task (video classification is the first implementation).

    ``build_dataset(cfg, split, mode)``: the dataset of a split (``mode`` ``train``/``test``);
    raise :class:`~nlnet.engine.errors.DataError` when it cannot be used (names the cause).
    ``num_classes(dataset)``: the classes of a dataset, or ``None`` if it does not say.
    ``collate(items)``: a batch from dataset items (bad items dropped).
    ``skipped(batch)``: how many items of the batch were dropped as bad.
    ``loss(model, batch, device)``: ``(mean loss, items)``; ``(None, 0)`` for an empty batch.
    ``evaluate(model, dataset, cfg, device, amp, progress, desc)``: a metrics dict.
    ``metadata(cfg, dataset)``: ``class_names`` and ``preprocessing`` stored in checkpoints.
    ``summary(metrics)``: one line for the console.
    """

    name: str

    def build_dataset(self, cfg: Any, split: str, mode: str) -> Dataset: ...
    def num_classes(self, dataset: Any) -> int | None: ...
    def collate(self, items: list[Any]) -> Any: ...
    def skipped(self, batch: Any) -> int: ...
    def loss(
        self, model: nn.Module, batch: Any, device: torch.device
    ) -> tuple[torch.Tensor | None, int]: ...
    def evaluate(
        self, model: nn.Module, dataset: Dataset, cfg: Any, device: torch.device, **kw: Any
    ) -> dict[str, Any]: ...
    def metadata(self, cfg: Any, dataset: Any) -> dict[str, Any]: ...
    def summary(self, metrics: dict[str, Any]) -> str: ...


_TASKS: dict[str, str | Callable[..., Task]] = {
    "video_classification": "nlnet.engine.tasks.video:VideoClassificationTask",
    "segmentation": "nlnet.engine.tasks.segmentation:SegmentationTask.from_config",
    "detection": "nlnet.engine.tasks.detection:DetectionTask.from_config",
    "image": "nlnet.engine.tasks.image:ImageClassificationTask",
}


def register_task(name: str, factory: str | Callable[..., Task]) -> None:
    """Register a task factory (a class or ``"module:attribute"``) under ``name``."""
    _TASKS[name] = factory


def get_task(cfg: Any, collate_fn: Callable | None = None) -> Task:
    """The task named by ``cfg.task`` (``collate_fn`` replaces its batch collation)."""
    if cfg.task not in _TASKS:
        from nlnet.engine.config import ConfigError

        raise ConfigError(f"task: expected one of {', '.join(sorted(_TASKS))}, got {cfg.task!r}")
    factory = _TASKS[cfg.task]
    if isinstance(factory, str):
        module, attr = factory.split(":")
        factory = importlib.import_module(module)
        for part in attr.split("."):  # "module:Class.from_config"
            factory = getattr(factory, part)
    task = factory(cfg)
    if collate_fn is not None:
        task.collate = collate_fn
    return task


def compute_loss(logits: torch.Tensor, target: torch.Tensor, loss: str) -> torch.Tensor:
    """Cross-entropy over classes (``ce``), or per-category sigmoid + BCE (``bce``, Section 5.2)."""
    logits = logits.float()
    if loss == "ce":
        if target.dim() != 1:
            raise DataError(
                "train.loss=ce expects integer class targets (B,), got a target of shape "
                f"{tuple(target.shape)}; use train.loss=bce for multi-label data"
            )
        return F.cross_entropy(logits, target.long())
    if loss == "bce":
        if target.shape != logits.shape:
            raise DataError(
                f"train.loss=bce expects multi-hot targets of shape {tuple(logits.shape)}, got "
                f"{tuple(target.shape)}"
            )
        return F.binary_cross_entropy_with_logits(logits, target.float())
    raise ValueError(f"loss: expected 'ce' or 'bce', got {loss!r}")
