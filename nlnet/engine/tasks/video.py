"""Video classification (Section 4: Kinetics; Section 5.2: multi-label Charades) as a task."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from nlnet.data.config import Preprocessing, VideoDataConfig
from nlnet.engine.errors import DataError
from nlnet.engine.tasks import compute_loss

__all__ = ["VideoClassificationTask"]


class VideoClassificationTask:
    """Clips -> class scores (Section 4: Kinetics; Section 5.2: multi-label Charades).

    Batches are the dicts of :func:`nlnet.data.collate_skip_bad` (``clip`` (B, C, T, H, W),
    ``target``, ``index``, ``skipped``); evaluation is multi-clip testing (Section 4.1).
    """

    name = "video_classification"
    data_config = VideoDataConfig

    def __init__(self, cfg: Any) -> None:
        from nlnet.data.datasets import collate_skip_bad

        self.loss_name = cfg.train.loss
        self.collate = collate_skip_bad

    def build_dataset(self, cfg: Any, split: str, mode: str) -> Dataset:
        """``build_dataset(cfg.data, split, mode)`` with ``eval.clips``/``eval.crops``; a split
        without one usable video is a :class:`DataError` naming the cause."""
        from nlnet.data.datasets import build_dataset

        try:
            dataset = build_dataset(
                cfg.data, split, mode=mode, clips=cfg.eval.clips, crops=cfg.eval.crops
            )
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
        """Class names (config, else the dataset's) and the test-time preprocessing
        (:class:`~nlnet.data.config.Preprocessing` of the data config)."""
        names = cfg.class_names or getattr(dataset, "classes", None)
        if names is not None and len(names) != cfg.model.num_classes:
            names = None
        prep = Preprocessing.from_data(VideoDataConfig.from_mapping(cfg.data)).to_dict()
        return {"class_names": [str(n) for n in names] if names else None, "preprocessing": prep}

    def summary(self, metrics: dict[str, Any]) -> str:
        keys = [k for k in metrics if k.startswith(("clip_", "video_")) and "count" not in k]
        text = ", ".join(f"{k} {metrics[k]:.2f}" for k in keys if metrics[k] is not None)
        return text + f" (skipped {metrics.get('skipped', 0):.0f})"
