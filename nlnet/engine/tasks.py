"""Tasks: the task-specific parts of training, behind one small protocol.

The training loop (:mod:`nlnet.engine.loop`) knows nothing about videos or labels: it asks the
task of the config (``task: video_classification``) for datasets, batches, the loss and the
evaluation.  A new task (detection, segmentation, ...) implements :class:`Task` and registers
it with :func:`register_task`; see docs/ARCHITECTURE.md.
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
    "VideoClassificationTask",
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
    "video_classification": "nlnet.engine.tasks:VideoClassificationTask",
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
        factory = getattr(importlib.import_module(module), attr)
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


class VideoClassificationTask:
    """Clips -> class scores (Section 4: Kinetics; Section 5.2: multi-label Charades).

    Batches are the dicts of :func:`nlnet.data.collate_skip_bad` (``clip`` (B, C, T, H, W),
    ``target``, ``index``, ``skipped``); evaluation is multi-clip testing (Section 4.1).
    """

    name = "video_classification"

    def __init__(self, cfg: Any) -> None:
        from nlnet.data.datasets import collate_skip_bad

        self.loss_name = cfg.train.loss
        self.collate = collate_skip_bad

    def build_dataset(self, cfg: Any, split: str, mode: str) -> Dataset:
        """``build_dataset(cfg.data, split, mode)`` with ``eval.clips``/``eval.crops``; a split
        without one usable video is a :class:`DataError` naming the cause."""
        from nlnet.data.datasets import build_dataset

        data = {**cfg.data, "test_clips": cfg.eval.clips, "test_crops": cfg.eval.crops}
        try:
            dataset = build_dataset(data, split, mode=mode)
        except (ValueError, FileNotFoundError) as exc:
            raise DataError(f"data (split {split!r}): {exc}") from None
        reason = dataset.unusable_reason()
        if reason is not None:
            raise DataError(f"no usable video in split {split!r}: {reason}")
        return dataset

    def num_classes(self, dataset: Any) -> int | None:
        n = getattr(dataset, "num_classes", None)
        return n if isinstance(n, int) else None

    def skipped(self, batch: Any) -> int:
        return int(batch.get("skipped", 0) or 0) if isinstance(batch, dict) else 0

    def loss(
        self, model: nn.Module, batch: Any, device: torch.device
    ) -> tuple[torch.Tensor | None, int]:
        from nlnet.engine.evaluator import unpack_batch

        clip, target, _index, _bad = unpack_batch(batch)
        if clip is None or clip.shape[0] == 0:
            return None, 0
        logits = model(clip.to(device, non_blocking=True))  # (B, num_classes)
        target = target.to(device, non_blocking=True)
        return compute_loss(logits, target, self.loss_name), int(clip.shape[0])

    def evaluate(
        self,
        model: nn.Module,
        dataset: Dataset,
        cfg: Any,
        device: torch.device,
        *,
        amp: str = "none",
        progress: bool = False,
        desc: str = "eval",
    ) -> dict[str, Any]:
        """Multi-clip testing: clip- and video-level top-k (or mAP for ``train.loss=bce``)."""
        from nlnet.engine.evaluator import build_eval_loader, run_evaluation

        loader = build_eval_loader(
            dataset, cfg.eval.batch_size, cfg.eval.workers, self.collate, device.type == "cuda"
        )
        return run_evaluation(
            model,
            loader,
            device,
            multi_label=self.loss_name == "bce",
            amp=amp,
            progress=progress,
            desc=desc,
        )

    def metadata(self, cfg: Any, dataset: Any) -> dict[str, Any]:
        """Class names (config, else the dataset's) and the test-time preprocessing."""
        from nlnet.data.datasets import DATASET_DEFAULTS

        names = cfg.class_names or getattr(dataset, "classes", None)
        if names is not None and len(names) != cfg.model.num_classes:
            names = None
        d = {**DATASET_DEFAULTS, **cfg.data}
        prep = {
            "mean": [float(v) for v in d["mean"]],
            "std": [float(v) for v in d["std"]],
            "num_frames": int(d["num_frames"]),
            "stride": int(d["stride"]),
            "size": d["test_scale"],
            "crop": d["test_crop"],
        }
        return {"class_names": [str(n) for n in names] if names else None, "preprocessing": prep}

    def summary(self, metrics: dict[str, Any]) -> str:
        keys = [k for k in metrics if k.startswith(("clip_", "video_")) and "count" not in k]
        text = ", ".join(f"{k} {metrics[k]:.2f}" for k in keys if metrics[k] is not None)
        return text + f" (skipped {metrics.get('skipped', 0):.0f})"
