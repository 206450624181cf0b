"""Video classification (Section 4: Kinetics; Section 5.2: multi-label Charades) as a task."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from nlnet.data.loader import skipped_count
from nlnet.data.video.config import VideoDataConfig
from nlnet.engine.errors import DataError
from nlnet.engine.tasks import check_logits
from nlnet.engine.tasks.video.config import (
    AugmentConfig,
    MultigridConfig,
    VideoEvalConfig,
    check_video_sections,
)

__all__ = ["VideoClassificationTask", "compute_loss", "resample_clip"]


def resample_clip(clip: torch.Tensor, frames: int, size: int) -> torch.Tensor:
    """``(B, C, T, H, W)`` -> ``(B, C, frames, size, size * W / H)``: frames spread over the same
    span (a longer stride, as multigrid's long cycle), each resized with antialiasing."""
    b, c, t, h, w = clip.shape
    if frames != t:
        clip = clip[:, :, torch.linspace(0, t - 1, frames).round().long().to(clip.device)]
    out_w = max(1, round(size * w / h))
    if (size, out_w) != (h, w):
        flat = clip.transpose(1, 2).reshape(b * frames, c, h, w)
        flat = F.interpolate(flat, size=(size, out_w), mode="bilinear", antialias=True)
        clip = flat.reshape(b, frames, c, size, out_w).transpose(1, 2)
    return clip


def _is_distribution(target: torch.Tensor, logits: torch.Tensor) -> bool:
    """Class probabilities ``(B, K)`` (rows summing to 1), not multi-hot labels."""
    if target.shape != logits.shape or not target.is_floating_point():
        return False
    return bool(torch.allclose(target.sum(1), torch.ones_like(target[:, 0]), atol=1e-4))


def compute_loss(
    logits: torch.Tensor, target: torch.Tensor, loss: str, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Cross-entropy over classes (``ce``; class indices, or class probabilities after MixUp /
    CutMix; optional label smoothing), or per-category sigmoid + BCE (``bce``, Section 5.2)."""
    logits = logits.float()
    if loss == "ce":
        if _is_distribution(target, logits):  # MixUp / CutMix targets
            return F.cross_entropy(logits, target.float(), label_smoothing=label_smoothing)
        if target.dim() != 1:
            raise DataError(
                "train.loss=ce expects integer class targets (B,), got a target of shape "
                f"{tuple(target.shape)}; use train.loss=bce for multi-label data"
            )
        return F.cross_entropy(logits, target.long(), label_smoothing=label_smoothing)
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
    ``target``, ``index``, ``skipped``); evaluation is multi-clip testing (Section 4.1,
    :mod:`nlnet.engine.tasks.video.evaluation`).  Training batches go through the ``augment``
    section's MixUp / CutMix / RandAugment (:class:`~nlnet.engine.tasks.video.augment.ClipAugment`)
    and the loss takes ``augment.label_smoothing``.

    Built by :meth:`from_config` from the config's sections, or directly from them:

    Args:
        data: the ``data`` section (:class:`~nlnet.data.video.config.VideoDataConfig`, or a mapping
            of its keys).
        evaluation: the ``eval`` section: ``clips`` x ``crops`` test views (Section 4.1),
            ``batch_size`` and ``workers`` of the test loader.
        augment: the ``augment`` section (MixUp / CutMix / RandAugment, label smoothing).
        loss: ``train.loss``: ``ce`` (softmax cross-entropy) or ``bce`` (multi-label, Sec. 5.2).
        num_classes: the model's classes (``None``: given to :meth:`setup` once inferred from
            the training data).
        class_names: the names stored in checkpoints (default: the dataset's classes).
    """

    name = "video_classification"
    data_config = VideoDataConfig
    #: the task's own config sections (``eval`` extended with the test views)
    sections = MappingProxyType(
        {"eval": VideoEvalConfig, "augment": AugmentConfig, "multigrid": MultigridConfig}
    )
    #: the ``data`` keys that name files (made absolute in a run's saved config)
    data_paths = ("root", "classes", "cache", "annotations")
    #: the ``data`` keys taken from the model's ``ModelCfg`` when the config sets none of them
    data_from_model = ("mean", "std")
    classifies = True  # one class per item: a single class is refused
    words = ("clip", "video")  # a training item, its source (the loop's messages)
    check_config = staticmethod(check_video_sections)

    def __init__(
        self,
        *,
        data: VideoDataConfig | Mapping[str, Any],
        evaluation: VideoEvalConfig | None = None,
        augment: AugmentConfig | None = None,
        loss: str = "ce",
        num_classes: int | None = None,
        class_names: Sequence[str] | None = None,
    ) -> None:
        from nlnet.data.video.builder import collate_skip_bad

        self.data = VideoDataConfig.from_mapping(data)
        self.evaluation = evaluation if evaluation is not None else VideoEvalConfig()
        self.augment_config = augment if augment is not None else AugmentConfig()
        self.loss_name = loss
        self.class_names = tuple(class_names) if class_names else None
        self.collate = collate_skip_bad
        self.label_smoothing = float(self.augment_config.label_smoothing)
        self.augment = None
        self.classes: int | None = None
        self.step_shape: tuple[int, int] | None = None  # (T, S) of a multigrid step
        self.seen_classes: set[int] = set()  # the classes of the usable training clips so far
        if num_classes is not None:
            self.setup(num_classes)

    @classmethod
    def from_config(cls, cfg: Any) -> VideoClassificationTask:
        """The task of an engine config: ``data``, ``eval``, ``augment``, ``train.loss``,
        ``model.num_classes`` and ``class_names``."""
        return cls(
            data=cfg.data,
            evaluation=cfg.eval,
            augment=cfg.augment,
            loss=cfg.train.loss,
            num_classes=cfg.model.num_classes,
            class_names=cfg.class_names,
        )

    @classmethod
    def hooks(cls, cfg: Any) -> list[Any]:
        """The task's own hooks: multigrid training when the ``multigrid`` section asks, and
        for single-label data the first epoch's class check (:class:`ClassCoverageHook`)."""
        from nlnet.engine.tasks.video.coverage import ClassCoverageHook
        from nlnet.engine.tasks.video.multigrid import MultigridHook

        m = cfg.multigrid
        hooks: list[Any] = [MultigridHook(cfg)] if m.long_cycle or m.short_cycle else []
        return hooks + ([ClassCoverageHook()] if cfg.train.loss == "ce" else [])

    def set_step_shape(self, shape: tuple[int, int] | None) -> None:
        """The ``(T, S)`` every training clip is resampled to from the next step on (the
        multigrid hook's schedule); ``None``: the data's own shape."""
        self.step_shape = None if shape is None else (int(shape[0]), int(shape[1]))

    def setup(self, num_classes: int) -> None:
        """The training augmentation, once the class count is known (MixUp / CutMix targets
        are ``(B, num_classes)`` probabilities)."""
        from nlnet.engine.tasks.video.augment import ClipAugment

        self.classes = int(num_classes)
        data = self.data
        augment = ClipAugment(self.augment_config, self.classes, data.mean, data.std)
        self.augment = augment if augment.active else None

    def build_dataset(self, split: str, mode: str) -> Dataset:
        """``build_dataset(data, split, mode)`` with the ``eval`` section's clips and crops; a
        split without one usable video is a :class:`DataError` naming the cause."""
        from nlnet.data.video.builder import build_dataset

        ev = self.evaluation
        try:
            dataset = build_dataset(self.data, split, mode=mode, clips=ev.clips, crops=ev.crops)
        except (ValueError, FileNotFoundError) as exc:
            raise DataError(f"data (split {split!r}): {exc}") from None
        reason = dataset.unusable_reason()
        if reason is not None:
            raise DataError(f"no usable video in split {split!r}: {reason}")
        return dataset

    def num_classes(self, dataset: Any) -> int | None:
        n = getattr(dataset, "num_classes", None)
        return n if isinstance(n, int) else None

    skipped = staticmethod(skipped_count)  # the collate function's count of bad items

    def loss(
        self, model: nn.Module, batch: Any, device: torch.device
    ) -> tuple[torch.Tensor | None, int]:
        from nlnet.engine.tasks.video.evaluation import unpack_batch

        clip, target, _index, _bad = unpack_batch(batch)
        if clip is None or clip.shape[0] == 0:
            return None, 0
        target = torch.as_tensor(target)
        if model.training and target.dim() == 1:  # single-label: the classes trained on
            self.seen_classes.update(target.unique().tolist())
        clip = clip.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)
        if self.augment is not None and model.training:
            clip, target = self.augment(clip, target)
        if self.step_shape is not None and model.training:
            clip = resample_clip(clip, *self.step_shape)
        logits = check_logits(model(clip), clip.shape[0], self.classes)  # (B, num_classes)
        loss = compute_loss(logits, target, self.loss_name, self.label_smoothing)
        return loss, int(clip.shape[0])

    def evaluate(
        self,
        model: nn.Module,
        dataset: Dataset,
        device: torch.device,
        *,
        amp: str = "none",
        progress: bool = False,
        desc: str = "eval",
        details: bool = False,
    ) -> dict[str, Any]:
        """Multi-clip testing: clip- and video-level top-k (or mAP for ``train.loss=bce``);
        ``details``: also ``per_class_top1`` and ``confusion`` (videos)."""
        from nlnet.engine.tasks.video.evaluation import build_eval_loader, run_evaluation

        ev = self.evaluation
        from nlnet.data.video.batches import collate_eval, collate_skip_bad

        # the default batches: clips of several sizes (full-frame testing) run shape by shape
        collate = collate_eval if self.collate is collate_skip_bad else self.collate
        loader = build_eval_loader(dataset, ev.batch_size, ev.workers, collate,
                                   device.type == "cuda")  # fmt: skip
        metrics = run_evaluation(
            model,
            loader,
            device,
            multi_label=self.loss_name == "bce",
            amp=amp,
            progress=progress,
            desc=desc,
            details=details,
        )
        # a bad video drops all its views: count videos, not views
        views = int(getattr(dataset, "views_per_video", 1) or 1)
        metrics["skipped"] = float(round(metrics.get("skipped", 0.0) / views))
        return metrics

    def metadata(self, dataset: Any) -> dict[str, Any]:
        """Class names (``class_names``, else the dataset's; dropped unless one per class)
        and the test-time preprocessing (:meth:`~nlnet.data.video.config.VideoDataConfig.preprocessing`)."""
        names = self.class_names or getattr(dataset, "classes", None)
        if names is not None and len(names) != self.classes:
            names = None
        prep = self.data.preprocessing()
        return {"class_names": [str(n) for n in names] if names else None, "preprocessing": prep}

    def summary(self, metrics: dict[str, Any]) -> str:
        keys = [k for k in metrics if k.startswith(("clip_", "video_")) and "count" not in k]
        text = ", ".join(f"{k} {metrics[k]:.2f}" for k in keys if metrics[k] is not None)
        return text + f" (skipped {metrics.get('skipped', 0):.0f})"
