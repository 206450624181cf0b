"""Semantic segmentation as a training task: per-pixel cross-entropy, mIoU from a confusion matrix.

Metrics (the usual Cityscapes/VOC definitions): with the confusion matrix ``M[t, p]`` = number of
pixels of true class ``t`` predicted as ``p`` (pixels labelled ``ignore_index`` excluded),

* ``IoU_c = M[c, c] / (sum_p M[c, p] + sum_t M[t, c] - M[c, c])`` (intersection over union);
* ``mIoU`` = mean of ``IoU_c`` over the classes whose union is not empty;
* ``pixel_acc = trace(M) / sum(M)``;
* ``Dice_c = 2 M[c, c] / (sum_p M[c, p] + sum_t M[t, c])`` (the F1 score of class ``c``, the
  usual medical segmentation measure, ``2 IoU / (1 + IoU)``); ``mDice`` = mean over the classes
  present or predicted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from nlnet.data.loader import skipped_count, usable_workers
from nlnet.data.preprocessing import Preprocessing
from nlnet.data.segmentation.builder import image_folder
from nlnet.data.segmentation.config import SegmentationDataConfig
from nlnet.data.segmentation.images import collate_segmentation
from nlnet.data.segmentation.volumes import VolumeFolder, collate_volumes
from nlnet.engine.config.sections import data_section
from nlnet.engine.errors import DataError, MissingPackageError
from nlnet.engine.evaluation import inference_on_dataset
from nlnet.engine.tasks.segmentation.labels import check_foreground, classes_in_masks
from nlnet.engine.tasks.segmentation.options import evaluator_with_regions, window_forward
from nlnet.engine.tasks.segmentation.region_metrics import monai_hausdorff

__all__ = [
    "confusion_matrix",
    "ConfusionEvaluator",
    "dice_from_confusion",
    "forward_padded",
    "iou_from_confusion",
    "segmentation_metrics",
    "SegmentationTask",
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


def dice_from_confusion(conf: torch.Tensor) -> torch.Tensor:
    """Per-class Dice ``(K,)`` float64; NaN for a class that is neither present nor predicted."""
    conf = conf.double()
    total = conf.sum(0) + conf.sum(1)
    return torch.where(
        total > 0, 2 * conf.diag() / total.clamp_min(1), torch.full_like(total, float("nan"))
    )


def segmentation_metrics(
    conf: torch.Tensor, class_names: Sequence[str] | None = None
) -> dict[str, float]:
    """``mIoU``, ``mDice``, ``pixel_acc``, ``iou_<name>`` and ``dice_<name>`` per class
    (percentages) from a confusion matrix."""
    iou = iou_from_confusion(conf)
    names = list(class_names) if class_names is not None else [str(i) for i in range(len(iou))]
    if len(names) != len(iou):
        raise ValueError(f"class_names: expected {len(iou)} names, got {len(names)}")
    valid = ~torch.isnan(iou)
    out = {
        "mIoU": 100.0 * float(iou[valid].mean()) if valid.any() else float("nan"),
        "pixel_acc": 100.0 * float(conf.diag().sum()) / max(int(conf.sum()), 1),
    }
    dice = dice_from_confusion(conf)
    out["mDice"] = 100.0 * float(dice[valid].mean()) if valid.any() else float("nan")
    out.update({f"iou_{n}": 100.0 * float(v) for n, v in zip(names, iou)})
    out.update({f"dice_{n}": 100.0 * float(v) for n, v in zip(names, dice)})
    return out


class ConfusionEvaluator:
    """mIoU / pixel accuracy over batches ``{"image", "mask", ...}`` and the logits ``(B, K, H,
    W)``: ``reset`` / ``process`` / ``evaluate`` (detectron2's ``DatasetEvaluator`` shape)."""

    def __init__(
        self, num_classes: int, ignore_index: int = 255, class_names: Sequence[str] | None = None
    ) -> None:
        self.num_classes, self.ignore_index, self.class_names = (
            num_classes,
            ignore_index,
            class_names,
        )
        self.reset()

    def reset(self) -> None:
        self.conf = torch.zeros(self.num_classes, self.num_classes, dtype=torch.int64)

    def process(self, batch: Mapping[str, Any], outputs: torch.Tensor | None) -> None:
        if outputs is not None:
            pred = outputs.argmax(1).cpu()
            self.conf += confusion_matrix(pred, batch["mask"], self.num_classes, self.ignore_index)

    def evaluate(self) -> dict[str, float]:
        return segmentation_metrics(self.conf, self.class_names)


def _forward_images(model: nn.Module, batch: Mapping[str, Any]) -> torch.Tensor | None:
    if batch["image"].shape[0] == 0:
        return None
    return model(batch["image"].to(next(model.parameters()).device))


def _stride(model: nn.Module) -> int:
    """The total stride of a U-Net (``2 ** depth``; through DDP/compile wrappers), else 1."""
    for attr in ("module", "_orig_mod"):
        model = getattr(model, attr, model)
    depth = getattr(model, "depth", None)
    return 2**depth if isinstance(depth, int) else 1


#: Weights of a model's extra training outputs in the loss (a model returning ``{"out": ...,
#: "aux": ...}`` in training mode: torchvision's segmentation references, ``out + 0.5 aux``).
AUX_WEIGHT: dict[str, float] = {"aux": 0.5}


def _pools_keys(model: nn.Module) -> bool:
    """Whether ``model`` has a non-local block that max-pools its keys and values."""
    from nlnet.layers.nonlocal_block import NonLocalNd

    return any(isinstance(b, NonLocalNd) and b.kernel is not None and max(b.kernel) > 1
               for b in model.modules())  # fmt: skip


def pad_to_stride(model: nn.Module, volumes: torch.Tensor) -> torch.Tensor:
    """``volumes`` ``(B, C, *spatial)`` zero-padded at the end of each spatial axis as
    :func:`forward_padded` pads them (a multiple of the stride; twice it at least where a block
    pools its keys)."""
    m = _stride(model)
    least = 2 * m if m > 1 and _pools_keys(model) else 1
    pad = [max(n + (-n) % m, least) - n for n in volumes.shape[2:]]
    if not any(pad):
        return volumes
    return F.pad(volumes, [v for p in reversed(pad) for v in (0, p)])


def forward_padded(model: nn.Module, volumes: torch.Tensor) -> Any:
    """Logits of ``volumes`` ``(B, C, *spatial)`` zero-padded at the end of each spatial axis to
    a multiple of the network's stride, and, in a network with a sub-sampling non-local block,
    to at least twice it (a bottleneck map of 2, what the block's pool there needs; an axis no
    longer than the stride would leave it 1), cropped back to the input size (whole-volume
    testing); each of them for a model with several outputs (``{"out", "aux"}`` in training
    mode). A network without such a block is padded as before: its numbers do not change."""
    size = volumes.shape[2:]
    out = model(pad_to_stride(model, volumes))
    crop = (slice(None), slice(None), *(slice(0, n) for n in size))
    if isinstance(out, Mapping):
        return {name: logits[crop] for name, logits in out.items()}
    return out[crop]


def _forward_volumes(model: nn.Module, batch: Mapping[str, Any]) -> torch.Tensor | None:
    if batch["image"].shape[0] == 0:
        return None
    return forward_padded(model, batch["image"].to(next(model.parameters()).device))


class SegmentationTask:
    """Semantic segmentation for the engine: image + mask folders, cross-entropy, mIoU.

    Selected by ``task: segmentation``; ``data`` holds ``root`` (``root/<split>/{images,masks}``)
    and optionally ``ignore_index``, ``mean``, ``std``, or with ``kind: volume`` 3D volumes
    (``patch``, ``flip``, ``label_map``, ``modalities``: :mod:`nlnet.data.segmentation.volumes`; a 3D U-Net
    trains on random patches and is tested on whole volumes, padded to a multiple of its
    stride); ``model.num_classes`` is the number of pixel classes (left out: the largest label
    of the masks + 1, :func:`classes_in_masks`).  Built by :meth:`from_config` from the
    config's sections, or directly from them:

    Args:
        num_classes: classes per pixel (0..K-1).
        class_names: names for the per-class IoU keys (default ``"0".."K-1"``).
        data: the ``data`` section (:class:`SegmentationDataConfig`, or a mapping of its keys):
            ``root``, the train/val splits, ``ignore_index`` (unlabelled pixels, skipped by the
            loss and the metrics), ``mean``/``std`` (image normalisation, stored in checkpoints
            as the preprocessing).
        class_weights: optional per-class weights of the cross-entropy.
        eval_batch_size: images per batch when :meth:`evaluate` is given a dataset
            (``eval.batch_size``).
        eval_workers: data-loader processes of that evaluation (``eval.workers``).
    """

    name = "segmentation"
    data_config = SegmentationDataConfig
    words = ("image", "image and mask pair")  # a training item, its source (the loop's messages)

    def __init__(
        self,
        num_classes: int,
        class_names: Sequence[str] | None = None,
        *,
        data: SegmentationDataConfig | Mapping[str, Any] | None = None,
        class_weights: Sequence[float] | None = None,
        eval_batch_size: int = 16,
        eval_workers: int = 0,
    ) -> None:
        if num_classes < 2:
            raise ValueError(f"num_classes: expected >= 2, got {num_classes}")
        self.data = data_section(SegmentationDataConfig, data)
        self.classes = int(num_classes)
        self.class_names = (
            list(class_names) if class_names else [str(i) for i in range(num_classes)]
        )
        if not class_names and self.data.layout == "cityscapes" and num_classes == 19:
            from nlnet.data.segmentation.cityscapes import CITYSCAPES_CLASSES

            self.class_names = list(CITYSCAPES_CLASSES)
        self.ignore_index = self.data.ignore_index
        self.class_weights = None if class_weights is None else torch.tensor(class_weights)
        self.mean, self.std = [float(v) for v in self.data.mean], [float(v) for v in self.data.std]
        self.eval_batch_size = int(eval_batch_size)
        self.eval_workers = int(eval_workers)
        if self.data.kind == "volume":
            self.words = ("volume", "case")
        if set(self.data.regions) & set(self.class_names):
            raise ValueError("data.regions: a region has a class's name (rename the region)")
        if self.data.hd95:
            try:
                monai_hausdorff()
            except ModuleNotFoundError as exc:
                raise MissingPackageError(str(exc), name=exc.name) from None

    @classmethod
    def from_config(cls, cfg: Any) -> SegmentationTask:
        """The task of an engine config (``model.num_classes``, ``class_names``, ``data``,
        ``eval.batch_size``)."""
        data = data_section(SegmentationDataConfig, cfg.data)
        num_classes = cfg.model.num_classes
        if num_classes is None:
            num_classes = classes_in_masks(data)
        else:
            check_foreground(data)
        return cls(
            num_classes,
            cfg.class_names,
            data=data,
            eval_batch_size=cfg.eval.batch_size,
            eval_workers=cfg.eval.workers,
        )

    def build_dataset(self, split: str, mode: str = "train") -> Dataset:
        """The :class:`SegmentationFolder` of ``split`` (bad files skipped and counted), or for
        ``data.kind: volume`` the :class:`VolumeFolder` (random ``data.patch`` crops and flips
        in ``train`` mode, whole volumes otherwise)."""
        root = self.data.root
        if root is None:
            raise DataError("data.root: expected the dataset folder (root/<split>/{images,masks})")
        d = self.data
        try:
            if d.kind == "volume":
                train = mode == "train"
                return VolumeFolder(
                    root, split, modalities=d.modalities, label_map=d.label_map,
                    num_classes=self.classes, ignore_index=self.ignore_index,
                    patch=d.patch if train else None,
                    flip=(0.5 if d.flip is None else d.flip) if train else 0.0,
                    skip_bad=True,
                )  # fmt: skip
            return image_folder(
                d, root, split, mode == "train", mean=self.mean, std=self.std,
                num_classes=self.classes, ignore_index=self.ignore_index, skip_bad=True,
            )  # fmt: skip
        except FileNotFoundError as exc:
            raise DataError(f"data (split {split!r}): {exc}") from None
        except ModuleNotFoundError as exc:
            raise MissingPackageError(str(exc), name=exc.name) from None

    def build_datasets(self) -> tuple[Dataset, Dataset]:
        """Train and validation folders (``data.train_split``/``val_split``, default train/val)."""
        return (
            self.build_dataset(self.data.train_split),
            self.build_dataset(self.data.val_split, "test"),
        )

    def num_classes(self, dataset: Any) -> int | None:
        return self.classes

    def in_channels(self, dataset: Any) -> int | None:
        """Channels of the first usable image or volume (``None``: none is usable); the
        random state is restored afterwards."""
        from nlnet.data.seeding import ItemKey, SeededDataset

        seeded = SeededDataset(dataset)
        for i in range(min(len(dataset), 8)):
            item = seeded[ItemKey(i, 0)]
            if item is not None:
                return int(item["image"].shape[0])
        return None

    def collate(self, batch: Sequence[Any]) -> dict[str, Any]:
        """``{"image", "mask", "index"}`` of the usable items and ``"skipped"``, how many were
        dropped (volumes padded to the batch's largest,
        :func:`~nlnet.data.segmentation.volumes.collate_volumes`)."""
        if self.data.kind == "volume":
            return collate_volumes(batch, self.ignore_index)
        return collate_segmentation(batch)

    skipped = staticmethod(skipped_count)  # the collate function's count of bad items

    def loss(
        self, model: nn.Module, batch: Mapping[str, Any], device: torch.device | None = None
    ) -> tuple[torch.Tensor | None, int]:
        """Mean per-pixel cross-entropy of a batch ``{"image", "mask", ...}``."""
        images, masks = batch["image"], batch["mask"]
        if images.shape[0] == 0:
            return None, 0
        device = device or next(model.parameters()).device
        images = images.to(device)
        volume = self.data.kind == "volume"
        out = forward_padded(model, images) if volume else model(images)  # (B, K, *spatial)
        heads = out if isinstance(out, Mapping) else {"out": out}
        masks = masks.to(device)
        w = None if self.class_weights is None else self.class_weights.to(device, torch.float32)
        loss = sum(
            AUX_WEIGHT.get(name, 1.0)
            * F.cross_entropy(logits.float(), masks, weight=w, ignore_index=self.ignore_index)
            for name, logits in heads.items()
        )
        return loss, int(images.shape[0])

    def confusion(self, model: nn.Module, loader: Any, device: Any = None) -> torch.Tensor:
        """The confusion matrix of ``model`` over ``loader`` (its mode restored afterwards)."""
        evaluator = ConfusionEvaluator(self.classes, self.ignore_index, self.class_names)
        inference_on_dataset(model, loader, evaluator, self._forward)
        return evaluator.conf

    def evaluate(self, model: nn.Module, data: Any, device: Any = None, **_: Any) -> dict[str, Any]:
        """``mIoU``, ``pixel_acc`` and per-class ``iou_<name>`` (percent) over a dataset (in
        batches of ``eval_batch_size``) or a loader."""
        loader = data
        if isinstance(data, Dataset):
            loader = DataLoader(
                data, batch_size=self.eval_batch_size, collate_fn=self.collate,
                num_workers=usable_workers(self.eval_workers),
            )  # fmt: skip
        evaluator = evaluator_with_regions(
            ConfusionEvaluator(self.classes, self.ignore_index, self.class_names),
            self.data, self.ignore_index,
        )  # fmt: skip
        metrics = inference_on_dataset(model, loader, evaluator, self._forward)
        metrics.pop("time_s")
        return metrics

    @property
    def _forward(self) -> Any:
        d = self.data
        base = _forward_volumes if d.kind == "volume" else _forward_images
        if not d.sliding_window:
            return base
        return window_forward(base, d.patch if d.kind == "volume" else d.crop, d.window_overlap)

    def metadata(self, dataset: Any) -> dict[str, Any]:
        d = self.data
        # how nlnet eval ran the network (nlnet predict / nlnet.segment do the same by default)
        run = {"window": d.patch if d.kind == "volume" else d.crop,
               "sliding_window": d.sliding_window, "window_overlap": d.window_overlap}  # fmt: skip
        if d.kind == "volume":
            prep = Preprocessing("volume", label_map=d.label_map, modalities=d.modalities, **run)
        else:
            prep = Preprocessing("image", self.mean, self.std, **run)
        return {"class_names": self.class_names, "preprocessing": prep}

    @staticmethod
    def summary(metrics: dict[str, Any]) -> str:
        dice = f", mDice {metrics['mDice']:.2f}" if "mDice" in metrics else ""
        return f"mIoU {metrics['mIoU']:.2f}{dice}, pixel_acc {metrics['pixel_acc']:.2f}"
