"""Detection, instance segmentation and keypoints as a training task, evaluated by pycocotools.

The loss is torchvision's: an R-CNN in training mode returns its loss terms (RPN objectness and
box regression, box classification and regression, mask / keypoint loss) and the task sums them.
Evaluation converts the detector's outputs to COCO results (boxes as ``x, y, w, h``, masks as RLE
of the 0.5-thresholded soft masks, keypoints as ``x, y, score`` triples) and runs
:class:`pycocotools.cocoeval.COCOeval` against the dataset's own json file: the AP figures of
Tables 5 and 6 (Wang et al., "Non-local Neural Networks", arXiv:1711.07971).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from nlnet.data.coco import CocoDataset, collate_detection

__all__ = ["DetectionTask", "coco_evaluate", "outputs_to_coco", "STAT_NAMES"]

#: Names of the 12 numbers of ``COCOeval.stats`` (bbox / segm); keypoints have the first 10
#: without the small-object entries (see :data:`KEYPOINT_STAT_NAMES`).
STAT_NAMES: tuple[str, ...] = (
    "AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl",
)  # fmt: skip
KEYPOINT_STAT_NAMES: tuple[str, ...] = (
    "AP", "AP50", "AP75", "APm", "APl", "AR", "AR50", "AR75", "ARm", "ARl",
)  # fmt: skip
_PREFIX = {"bbox": "box", "segm": "mask", "keypoints": "kp"}


def outputs_to_coco(
    outputs: Sequence[Mapping[str, torch.Tensor]],
    image_ids: Sequence[int],
    label_to_category: Any = None,
    *,
    mask_threshold: float = 0.5,
) -> list[dict[str, Any]]:
    """COCO result entries from torchvision detector outputs.

    Args:
        outputs: per image ``boxes`` (N, 4) xyxy, ``scores``, ``labels`` and optionally ``masks``
            (N, 1, H, W) probabilities and ``keypoints`` (N, K, 3) / ``keypoints_scores`` (N, K).
        image_ids: the COCO image id of each output.
        label_to_category: maps a contiguous label to a COCO category id (identity if None).
        mask_threshold: binarisation threshold of the soft masks.
    """
    from pycocotools import mask as mask_utils

    results: list[dict[str, Any]] = []
    for out, image_id in zip(outputs, image_ids):
        boxes = out["boxes"].detach().cpu().double()
        xywh = torch.cat([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], 1).tolist()
        scores = out["scores"].detach().cpu().tolist()
        labels = out["labels"].detach().cpu().tolist()
        masks = out.get("masks")
        if masks is not None:
            binary = (masks.detach().cpu()[:, 0] > mask_threshold).numpy().astype(np.uint8)
        kps = out.get("keypoints")
        for i, (box, score, label) in enumerate(zip(xywh, scores, labels)):
            cat = label_to_category(label) if label_to_category else int(label)
            r: dict[str, Any] = {
                "image_id": int(image_id),
                "category_id": int(cat),
                "bbox": [round(v, 3) for v in box],
                "score": float(score),
            }
            if masks is not None:
                rle = mask_utils.encode(np.asfortranarray(binary[i]))
                rle["counts"] = rle["counts"].decode("ascii")
                r["segmentation"] = rle
            if kps is not None:
                k = kps[i].detach().cpu().clone()
                k[:, 2] = 1.0  # COCO results carry x, y and a (unused) visibility/score
                r["keypoints"] = [round(float(v), 3) for v in k.reshape(-1)]
            results.append(r)
    return results


def coco_evaluate(
    coco_gt: Any, results: Sequence[Mapping[str, Any]], iou_types: Sequence[str] = ("bbox",)
) -> dict[str, float]:
    """Run :class:`pycocotools.cocoeval.COCOeval` for each IoU type; percentages.

    Args:
        coco_gt: a :class:`pycocotools.coco.COCO` (ground truth).
        results: COCO result entries (:func:`outputs_to_coco`).
        iou_types: any of ``"bbox"``, ``"segm"``, ``"keypoints"``.

    Returns:
        ``box_AP``, ``box_AP50``, ... ``mask_AP``, ... ``kp_AP``, ... (``-100`` where pycocotools
        reports -1: no ground truth of that kind). With no results every AP is 0.
    """
    from pycocotools.cocoeval import COCOeval

    out: dict[str, float] = {}
    for iou_type in iou_types:
        if iou_type not in _PREFIX:
            raise ValueError(f"iou_types: expected bbox, segm or keypoints, got {iou_type!r}")
        names = KEYPOINT_STAT_NAMES if iou_type == "keypoints" else STAT_NAMES
        if not results:
            out.update({f"{_PREFIX[iou_type]}_{n}": 0.0 for n in names})
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            dt = coco_gt.loadRes([dict(r) for r in results])
            ev = COCOeval(coco_gt, dt, iou_type)
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
        out.update({f"{_PREFIX[iou_type]}_{n}": 100.0 * float(v) for n, v in zip(names, ev.stats)})
    return out


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    data = cfg.get("data", cfg) if isinstance(cfg, Mapping) else getattr(cfg, "data", cfg)
    if isinstance(data, Mapping):
        return data.get(key, default)
    return getattr(data, key, default)


class DetectionTask:
    """COCO-format detection / instance segmentation / keypoints for the engine.

    Args:
        iou_types: what to evaluate (``"bbox"``, ``"segm"``, ``"keypoints"``); masks and
            keypoints are loaded when ``segm`` / ``keypoints`` is asked for.
    """

    name = "detection"

    def __init__(self, iou_types: Sequence[str] = ("bbox", "segm")) -> None:
        bad = [t for t in iou_types if t not in _PREFIX]
        if bad or not iou_types:
            raise ValueError(
                f"iou_types: expected some of bbox, segm, keypoints, got {iou_types!r}"
            )
        self.iou_types = tuple(iou_types)

    def dataset(self, root: str | os.PathLike, split: str) -> CocoDataset:
        """``root/<split>/images`` with ``root/annotations/instances_<split>.json`` (or
        ``person_keypoints_<split>.json`` for keypoints)."""
        root = Path(root)
        kind = "person_keypoints" if "keypoints" in self.iou_types else "instances"
        return CocoDataset(
            root / split / "images",
            root / "annotations" / f"{kind}_{split}.json",
            masks="segm" in self.iou_types,
            keypoints="keypoints" in self.iou_types,
        )

    def build_datasets(self, cfg: Any) -> tuple[Dataset, Dataset]:
        """Train and validation sets from ``cfg.data`` (``root``, ``train_split``, ``val_split``)."""
        root = _get(cfg, "root")
        if root is None:
            raise ValueError("data.root: expected the dataset folder (COCO json + images)")
        return (
            self.dataset(root, _get(cfg, "train_split", "train")),
            self.dataset(root, _get(cfg, "val_split", "val")),
        )

    @staticmethod
    def collate(batch: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        return collate_detection(batch)

    def loss(self, model: nn.Module, batch: Sequence[Any]) -> tuple[torch.Tensor, int]:
        """Sum of the detector's training losses for a batch ``(images, targets)``."""
        images, targets = batch
        device = next(model.parameters()).device
        images = [im.to(device) for im in images]
        targets = [{k: v.to(device) for k, v in t.items()} for t in targets]
        losses = model(images, targets)
        return sum(losses.values()), len(images)

    @torch.no_grad()
    def predict(self, model: nn.Module, loader: DataLoader) -> list[dict[str, Any]]:
        """COCO results of ``model`` on every image of ``loader`` (eval mode restored after)."""
        dataset = loader.dataset
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        results: list[dict[str, Any]] = []
        try:
            for images, targets in loader:
                outputs = model([im.to(device) for im in images])
                ids = [int(t["image_id"]) for t in targets]
                results += outputs_to_coco(outputs, ids, dataset.label_to_category)
        finally:
            model.train(was_training)
        return results

    def evaluate(self, model: nn.Module, loader: DataLoader) -> dict[str, float]:
        """COCO AP/AR of ``model`` over ``loader`` (a :class:`CocoDataset` loader)."""
        return coco_evaluate(loader.dataset.coco, self.predict(model, loader), self.iou_types)
