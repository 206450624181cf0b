"""Semantic segmentation as a training task: per-pixel cross-entropy, mIoU from a confusion matrix.

Metrics (the usual Cityscapes/VOC definitions): with the confusion matrix ``M[t, p]`` = number of
pixels of true class ``t`` predicted as ``p`` (pixels labelled ``ignore_index`` excluded),

* ``IoU_c = M[c, c] / (sum_p M[c, p] + sum_t M[t, c] - M[c, c])`` (intersection over union);
* ``mIoU`` = mean of ``IoU_c`` over the classes whose union is not empty;
* ``pixel_acc = trace(M) / sum(M)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from nlnet.data.segmentation import SegmentationFolder, collate_segmentation

__all__ = [
    "SegmentationTask",
    "confusion_matrix",
    "iou_from_confusion",
    "segmentation_metrics",
]


def confusion_matrix(
    pred: torch.Tensor, target: torch.Tensor, num_classes: int, ignore_index: int = 255
) -> torch.Tensor:
    """Confusion matrix ``(K, K)`` int64, rows = true class, columns = predicted class.

    Args:
        pred: predicted class ids, any shape.
        target: true class ids, same shape; ``ignore_index`` pixels are skipped.
        num_classes: K.
        ignore_index: label of unlabelled pixels.

    Raises:
        ValueError: shapes differ, or a label outside ``[0, K)`` (other than ``ignore_index``).
    """
    if pred.shape != target.shape:
        raise ValueError(
            f"pred: shape {tuple(pred.shape)} differs from target {tuple(target.shape)}"
        )
    keep = target != ignore_index
    t, p = target[keep].long(), pred[keep].long()
    if t.numel() and (
        t.min() < 0 or t.max() >= num_classes or p.min() < 0 or p.max() >= num_classes
    ):
        raise ValueError(f"labels: expected class ids in [0, {num_classes}) or {ignore_index}")
    return torch.bincount(t * num_classes + p, minlength=num_classes**2).view(
        num_classes, num_classes
    )


def iou_from_confusion(conf: torch.Tensor) -> torch.Tensor:
    """Per-class IoU ``(K,)`` float64; NaN for a class that is neither present nor predicted."""
    conf = conf.double()
    inter = conf.diag()
    union = conf.sum(0) + conf.sum(1) - inter
    return torch.where(union > 0, inter / union.clamp_min(1), torch.full_like(inter, float("nan")))


def segmentation_metrics(
    conf: torch.Tensor, class_names: Sequence[str] | None = None
) -> dict[str, float]:
    """``mIoU``, ``pixel_acc`` and ``iou_<name>`` per class (percentages) from a confusion matrix."""
    iou = iou_from_confusion(conf)
    names = list(class_names) if class_names is not None else [str(i) for i in range(len(iou))]
    if len(names) != len(iou):
        raise ValueError(f"class_names: expected {len(iou)} names, got {len(names)}")
    valid = ~torch.isnan(iou)
    out = {
        "mIoU": 100.0 * float(iou[valid].mean()) if valid.any() else float("nan"),
        "pixel_acc": 100.0 * float(conf.diag().sum()) / max(int(conf.sum()), 1),
    }
    out.update({f"iou_{n}": 100.0 * float(v) for n, v in zip(names, iou)})
    return out


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    data = cfg.get("data", cfg) if isinstance(cfg, Mapping) else getattr(cfg, "data", cfg)
    if isinstance(data, Mapping):
        return data.get(key, default)
    return getattr(data, key, default)


class SegmentationTask:
    """Semantic segmentation for the engine: image + mask folders, cross-entropy, mIoU.

    Args:
        num_classes: classes per pixel (0..K-1).
        class_names: names for the per-class IoU keys (default ``"0".."K-1"``).
        ignore_index: label of unlabelled pixels (skipped by the loss and the metrics).
        class_weights: optional per-class weights of the cross-entropy.
    """

    name = "segmentation"

    def __init__(
        self,
        num_classes: int,
        class_names: Sequence[str] | None = None,
        *,
        ignore_index: int = 255,
        class_weights: Sequence[float] | None = None,
    ) -> None:
        if num_classes < 2:
            raise ValueError(f"num_classes: expected >= 2, got {num_classes}")
        self.num_classes = int(num_classes)
        self.class_names = (
            list(class_names) if class_names else [str(i) for i in range(num_classes)]
        )
        self.ignore_index = ignore_index
        self.class_weights = None if class_weights is None else torch.tensor(class_weights)

    def build_datasets(self, cfg: Any) -> tuple[Dataset, Dataset]:
        """Train and validation :class:`SegmentationFolder` from ``cfg.data`` (``root``,
        ``train_split`` (default ``"train"``), ``val_split`` (default ``"val"``))."""
        root = _get(cfg, "root")
        if root is None:
            raise ValueError("data.root: expected the dataset folder (root/<split>/{images,masks})")
        kw = {"num_classes": self.num_classes, "ignore_index": self.ignore_index}
        train = SegmentationFolder(root, _get(cfg, "train_split", "train"), **kw)
        val = SegmentationFolder(root, _get(cfg, "val_split", "val"), **kw)
        return train, val

    @staticmethod
    def collate(batch: Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return collate_segmentation(batch)

    def loss(self, model: nn.Module, batch: Sequence[torch.Tensor]) -> tuple[torch.Tensor, int]:
        """Mean per-pixel cross-entropy of a batch ``(images, masks, index)`` and its size."""
        images, masks = batch[0], batch[1]
        device = next(model.parameters()).device
        logits = model(images.to(device))  # (B, K, H, W)
        w = None if self.class_weights is None else self.class_weights.to(device, logits.dtype)
        loss = F.cross_entropy(logits, masks.to(device), weight=w, ignore_index=self.ignore_index)
        return loss, int(images.shape[0])

    @torch.no_grad()
    def confusion(self, model: nn.Module, loader: DataLoader) -> torch.Tensor:
        """The confusion matrix of ``model`` over ``loader`` (eval mode restored afterwards)."""
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        conf = torch.zeros(self.num_classes, self.num_classes, dtype=torch.int64)
        try:
            for batch in loader:
                pred = model(batch[0].to(device)).argmax(1).cpu()
                conf += confusion_matrix(pred, batch[1], self.num_classes, self.ignore_index)
        finally:
            model.train(was_training)
        return conf

    def evaluate(self, model: nn.Module, loader: DataLoader) -> dict[str, float]:
        """``mIoU``, ``pixel_acc`` and per-class ``iou_<name>`` (percent) over ``loader``."""
        return segmentation_metrics(self.confusion(model, loader), self.class_names)
