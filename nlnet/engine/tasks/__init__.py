"""Tasks: the task-specific parts of training, behind one small protocol.

The training loop (:mod:`nlnet.engine.loop`) knows nothing about videos, masks or boxes: it asks
the task of the config (``task:``, one of the names of ``ModelCfg.task``,
:data:`nlnet.models.model_cfg.TASKS`) for datasets, batches, the loss and the evaluation.  A
task implements :class:`Task` and is registered with :func:`register_task`; see
docs/ARCHITECTURE.md.  One package per task: ``video`` (clip classification, Sections 4-5.2;
its test views, augmentation and multigrid), ``image`` (image classification),
``segmentation`` (semantic segmentation of images and volumes, mIoU / Dice; sliding windows,
BraTS regions), ``detection`` (COCO boxes, masks and keypoints with pycocotools, Section 6),
``super_resolution``.  Their datasets are built in :mod:`nlnet.data` (``data/<task>/``).

A task is built from the config sections it needs, the way detectron2's ``@configurable``
classes are: its ``from_config(cfg)`` classmethod is the only place that reads the whole
config, and passes typed sections (the task's ``data_config`` dataclass, ``EvalConfig``,
``AugmentConfig``...) and values to ``__init__`` as keyword arguments.  The methods never see
the config, so a task can also be built directly from sections, without any ``Config``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn
from torch.utils.data import Dataset

__all__ = [
    "Task",
    "check_logits",
    "get_task",
    "register_task",
    "task_class",
    "task_names",
]


@runtime_checkable
class Task(Protocol):
    """What the loop needs from a task (video classification is the first implementation).

    ``from_config(cfg)`` (classmethod): the task of an engine config; the only method that
    reads the whole config (``__init__`` takes typed sections as keyword arguments).
    ``build_dataset(split, mode)``: the dataset of a split (``mode`` ``train``/``test``);
    raise :class:`~nlnet.engine.errors.DataError` when it cannot be used (names the cause).
    ``num_classes(dataset)``: the classes of a dataset, or ``None`` if it does not say.
    ``collate(items)``: a batch from dataset items (bad items dropped).
    ``skipped(batch)``: how many items of the batch were dropped as bad.
    ``loss(model, batch, device)``: ``(mean loss, items)``; ``(None, 0)`` for an empty batch.
    ``evaluate(model, dataset, device, *, amp, progress, desc)``: a metrics dict.
    ``metadata(dataset)``: ``class_names`` and ``preprocessing`` stored in checkpoints.
    ``summary(metrics)``: one line for the console.
    ``data_config`` (class attribute): the frozen dataclass of the config's ``data`` section.
    Optional: ``setup(num_classes)`` (called once the class count is final: given by
    ``model.num_classes`` or inferred from the training data), ``pop_terms()`` (loss terms
    logged beside the loss), ``set_step_shape(shape)`` (the shape of the next steps' items,
    set by a :class:`~nlnet.engine.hooks.StepPlan` hook: the video task's multigrid ``(T, S)``).

    What a task owns, declared on its class (all optional; read with the config, never by the
    loop): ``sections`` (its own config sections by name, frozen dataclasses; a core section's
    name, such as ``eval``, extends that section with a subclass), ``check_config(cfg)``
    (checks of those sections), ``hooks(cfg)`` (its own training hooks), ``data_paths`` (the
    ``data`` keys that name files; default ``("root",)``), ``data_from_model`` (``data`` keys
    the model's ``ModelCfg`` gives when the config sets none), ``words`` (a training item and
    its source file in the loop's messages, e.g. ``("clip", "video")``), ``classifies`` (one
    class per item: training data of one class is refused).
    """

    name: str
    data_config: type

    @classmethod
    def from_config(cls, cfg: Any) -> Task: ...
    def build_dataset(self, split: str, mode: str) -> Dataset: ...
    def num_classes(self, dataset: Any) -> int | None: ...
    def collate(self, items: list[Any]) -> Any: ...
    def skipped(self, batch: Any) -> int: ...
    def loss(
        self, model: nn.Module, batch: Any, device: torch.device
    ) -> tuple[torch.Tensor | None, int]: ...
    def evaluate(
        self, model: nn.Module, dataset: Dataset, device: torch.device, **kw: Any
    ) -> dict[str, Any]: ...
    def metadata(self, dataset: Any) -> dict[str, Any]: ...
    def summary(self, metrics: dict[str, Any]) -> str: ...


_TASKS: dict[str, str | Callable[..., Task]] = {
    "video_classification": "nlnet.engine.tasks.video:VideoClassificationTask",
    "segmentation": "nlnet.engine.tasks.segmentation:SegmentationTask",
    "detection": "nlnet.engine.tasks.detection:DetectionTask",
    "super_resolution": "nlnet.engine.tasks.super_resolution:SuperResolutionTask",
    "image_classification": "nlnet.engine.tasks.image:ImageClassificationTask",
}


def register_task(name: str, factory: str | Callable[..., Task]) -> None:
    """Register a task under ``name``: a task class (built with its ``from_config(cfg)``), a
    function ``factory(cfg) -> Task``, or ``"module:attribute"`` naming either."""
    _TASKS[name] = factory


def task_names() -> list[str]:
    """The registered task names, sorted (the values ``task:`` accepts)."""
    return sorted(_TASKS)


def _factory(name: str) -> Callable[..., Task]:
    if name not in _TASKS:
        raise KeyError(f"task: expected one of {', '.join(sorted(_TASKS))}, got {name!r}")
    factory = _TASKS[name]
    if isinstance(factory, str):
        module, attr = factory.split(":")
        factory = importlib.import_module(module)
        for part in attr.split("."):  # "module:Class" or "module:Class.from_config"
            factory = getattr(factory, part)
    return factory


def task_class(name: str) -> type | None:
    """The class of the task registered as ``name`` (``KeyError`` naming the known tasks);
    ``None`` for a task built by a plain factory function (it declares no sections).

    Its ``data_config`` attribute, when present, is the frozen dataclass of the config's
    ``data`` section (read and checked when the config loads).
    """
    factory = _factory(name)
    owner = getattr(factory, "__self__", factory)  # "Class.from_config": the class
    return owner if isinstance(owner, type) else None


def get_task(cfg: Any, collate_fn: Callable | None = None) -> Task:
    """The task named by ``cfg.task``, built by its class's ``from_config(cfg)`` (or by a
    registered factory function); ``collate_fn`` replaces its batch collation."""
    try:
        factory = _factory(cfg.task)
    except KeyError as exc:
        from nlnet.engine.errors import ConfigError

        raise ConfigError(str(exc.args[0])) from None
    if isinstance(factory, type) and hasattr(factory, "from_config"):
        factory = factory.from_config
    task = factory(cfg)
    if collate_fn is not None:
        task.collate = collate_fn
    return task


def check_logits(logits: Any, items: int, num_classes: int | None) -> torch.Tensor:
    """``logits`` if they are the ``(items, num_classes)`` scores a classification task takes
    from the model (``num_classes`` ``None``: any width).

    Raises:
        ConfigError: the model returned something else (a dict, a tuple, another shape or
            width: a network of one's own built for another output), in one line.
    """
    from nlnet.engine.errors import ConfigError

    if not isinstance(logits, torch.Tensor):
        raise ConfigError(
            f"model: its forward returned a {type(logits).__name__}; a classifier returns one "
            f"(B, num_classes) tensor of scores (wrap a network that returns more so that it "
            "returns its logits)"
        )
    if logits.dim() != 2 or logits.shape[0] != items:
        raise ConfigError(
            f"model: expected ({items}, num_classes) scores for a batch of {items}, got a tensor "
            f"of shape {tuple(logits.shape)}"
        )
    if num_classes is not None and logits.shape[1] != num_classes:
        raise ConfigError(
            f"model: it returns {logits.shape[1]} scores per item but the data has "
            f"{num_classes} classes; give its classifier {num_classes} outputs"
        )
    return logits
