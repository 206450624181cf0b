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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from nlnet.data.detection.coco import (
    CocoDataset,
    collate_detection,
    import_pycocotools,
    quiet_pycocotools,
)
from nlnet.data.detection.config import IOU_TYPES, DetectionDataConfig
from nlnet.data.loader import skipped_count
from nlnet.data.preprocessing import Preprocessing
from nlnet.engine.checkpoint import unwrap_model
from nlnet.engine.config.sections import data_section
from nlnet.engine.errors import DataError, MissingPackageError
from nlnet.engine.evaluation import inference_on_dataset

__all__ = [
    "coco_evaluate",
    "CocoEvaluator",
    "default_iou_types",
    "DetectionTask",
    "outputs_to_coco",
    "STAT_NAMES",
]

#: Names of the 12 numbers of ``COCOeval.stats`` (bbox / segm); keypoints have the first 10
#: without the small-object entries (see :data:`KEYPOINT_STAT_NAMES`).
STAT_NAMES: tuple[str, ...] = (
    "AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl",
)  # fmt: skip
KEYPOINT_STAT_NAMES: tuple[str, ...] = (
    "AP", "AP50", "AP75", "APm", "APl", "AR", "AR50", "AR75", "ARm", "ARl",
)  # fmt: skip
_PREFIX = {"bbox": "box", "segm": "mask", "keypoints": "kp"}


def _pycocotools(submodule: str, what: str) -> Any:
    """``pycocotools.<submodule>``; a :class:`MissingPackageError` (exit 2) when it is missing."""
    try:
        return import_pycocotools(submodule, what)
    except ModuleNotFoundError as exc:
        raise MissingPackageError(str(exc), name="pycocotools") from None


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
    mask_utils = _pycocotools("mask", "COCO mask results")
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
                with quiet_pycocotools():
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
    cocoeval = _pycocotools("cocoeval", "COCO AP evaluation")
    out: dict[str, float] = {}
    for iou_type in iou_types:
        if iou_type not in _PREFIX:
            raise ValueError(f"iou_types: expected bbox, segm or keypoints, got {iou_type!r}")
        names = KEYPOINT_STAT_NAMES if iou_type == "keypoints" else STAT_NAMES
        if not results:
            out.update({f"{_PREFIX[iou_type]}_{n}": 0.0 for n in names})
            continue
        with contextlib.redirect_stdout(io.StringIO()), quiet_pycocotools():
            dt = coco_gt.loadRes([dict(r) for r in results])
            ev = cocoeval.COCOeval(coco_gt, dt, iou_type)
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
        out.update({f"{_PREFIX[iou_type]}_{n}": 100.0 * float(v) for n, v in zip(names, ev.stats)})
    return out


def default_iou_types(model_name: str | None) -> tuple[str, ...]:
    """What a registered detector predicts (its ``ModelCfg.outputs``: ``bbox`` + ``keypoints``
    for Keypoint R-CNN, ``bbox`` alone for Faster R-CNN); ``bbox`` + ``segm`` (Mask R-CNN) for
    an unregistered name."""
    from nlnet.models.registry import get_model_entry

    try:
        outputs = get_model_entry(model_name).default_cfg.outputs if model_name else ()
    except ValueError:
        outputs = ()
    return tuple(outputs) or ("bbox", "segm")


class CocoEvaluator:
    """COCO AP of the detections of every image: ``reset`` / ``process(batch, outputs)`` /
    ``evaluate`` (detectron2's ``DatasetEvaluator`` shape; pycocotools does the scoring)."""

    def __init__(self, dataset: Any, iou_types: Sequence[str]) -> None:
        self.dataset, self.iou_types = dataset, tuple(iou_types)
        self.reset()

    def reset(self) -> None:
        self.results: list[dict[str, Any]] = []

    def process(self, batch: Mapping[str, Any], outputs: list[dict[str, Any]] | None) -> None:
        if outputs is not None:
            ids = [int(t["image_id"]) for t in batch["target"]]
            self.results += outputs_to_coco(outputs, ids, self.dataset.label_to_category)

    def evaluate(self) -> dict[str, float]:
        return coco_evaluate(self.dataset.coco, self.results, self.iou_types)


def _forward_images(model: nn.Module, batch: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    if not batch["image"]:
        return None
    device = next(model.parameters()).device
    return model([im.to(device) for im in batch["image"]])


class DetectionTask:
    """COCO-format detection / instance segmentation / keypoints for the engine (``task:
    detection``).

    ``data`` holds ``root`` (images in ``root/<images>`` with ``images`` a template, default
    ``{split}/images`` as in the dense digits task, ``{split}`` for COCO's own layout; annotations
    in ``root/annotations/instances_<split>.json``, or ``person_keypoints_<split>.json`` for
    keypoints), optionally ``iou_types`` (default from the model: ``[bbox, segm]`` for Mask R-CNN,
    ``[bbox, keypoints]`` for Keypoint R-CNN), ``hflip`` (training flip probability, 0.5 in the
    paper's Detectron recipe; default 0) and ``keep_empty`` (train on images without objects).
    ``model.num_classes`` is inferred: the dataset's categories + 1 (the background, label 0).

    Batches are ``(images, targets, dropped)``: lists of ``(3, H, W)`` images in [0, 1] and
    torchvision target dicts (the detector resizes and normalises itself). The loss is the sum of
    torchvision's loss terms; each term's mean over a logging window is logged too
    (:meth:`pop_terms`).

    Built by :meth:`from_config` from the config's sections, or directly from them:

    Args:
        iou_types: what to load and evaluate (``"bbox"``, ``"segm"``, ``"keypoints"``); default
            ``data.iou_types``, else ``("bbox", "segm")`` (:meth:`from_config`: the model's).
        data: the ``data`` section (:class:`DetectionDataConfig`, or a mapping of its keys):
            ``root``, ``images`` (a split's image folder under the root, ``{split}`` replaced),
            ``hflip`` (training flip probability), ``keep_empty`` (keep training images without
            annotations), the train/val splits.
        eval_batch_size: images per batch when :meth:`evaluate` is given a dataset
            (``eval.batch_size``).
    """

    name = "detection"
    data_config = DetectionDataConfig
    words = ("image", "image")  # a training item, its source (the loop's messages)

    def __init__(
        self,
        iou_types: Sequence[str] | None = None,
        *,
        data: DetectionDataConfig | Mapping[str, Any] | None = None,
        eval_batch_size: int = 4,
    ) -> None:
        self.data = data_section(DetectionDataConfig, data)
        if iou_types is None:
            iou_types = self.data.iou_types or ("bbox", "segm")
        bad = [t for t in iou_types if t not in IOU_TYPES]
        if bad or not iou_types:
            raise ValueError(
                f"iou_types: expected some of {', '.join(IOU_TYPES)}, got {iou_types!r}"
            )
        self.iou_types = tuple(iou_types)
        self.eval_batch_size = int(eval_batch_size)
        self.class_names: list[str] | None = None
        self._terms: dict[str, float] = {}
        self._terms_count = 0

    @classmethod
    def from_config(cls, cfg: Any) -> DetectionTask:
        """The task of an engine config: ``data`` (``iou_types``, default from the model
        ``model.name``; ``hflip``, ``keep_empty``, ``images``, ``root``) and ``eval.batch_size``."""
        try:
            data = data_section(DetectionDataConfig, cfg.data)
            return cls(
                data.iou_types or default_iou_types(cfg.model.name),
                data=data,
                eval_batch_size=cfg.eval.batch_size,
            )
        except ValueError as exc:
            from nlnet.engine.errors import ConfigError

            msg = str(exc)
            raise ConfigError(msg if msg.startswith("data") else f"data.{msg}") from None

    # -- data -----------------------------------------------------------------------------------
    def build_dataset(self, split: str, mode: str = "train") -> CocoDataset:
        """The :class:`CocoDataset` of ``split`` (:func:`~nlnet.data.detection.builder.build_coco_dataset`
        with this task's ``iou_types``); a missing folder/file or an empty split is a
        :class:`~nlnet.engine.errors.DataError`."""
        from nlnet.data.detection.builder import build_coco_dataset

        try:
            dataset = build_coco_dataset(self.data, split, mode, self.iou_types)
        except (FileNotFoundError, ValueError) as exc:
            raise DataError(f"data (split {split!r}): {exc}") from None
        except ModuleNotFoundError as exc:
            if exc.name != "pycocotools":
                raise
            raise MissingPackageError(str(exc), name="pycocotools") from None
        if len(dataset) == 0:
            raise DataError(f"data (split {split!r}): no image in {dataset.image_dir}")
        if self.class_names is None:
            self.class_names = ["__background__", *dataset.class_names]
        return dataset

    def build_datasets(self) -> tuple[Dataset, Dataset]:
        """Train and validation sets (``data.root``, ``train_split``, ``val_split``)."""
        return (
            self.build_dataset(self.data.train_split, "train"),
            self.build_dataset(self.data.val_split, "test"),
        )

    def num_classes(self, dataset: Any) -> int | None:
        """Categories + 1 (the background)."""
        cats = getattr(dataset, "cat_ids", None)
        return len(cats) + 1 if cats is not None else None

    @staticmethod
    def collate(batch: Sequence[Any]) -> dict[str, Any]:
        """``{"image", "target", "skipped"}``: lists of the usable images and targets, and how
        many items were dropped (:func:`~nlnet.data.detection.coco.collate_detection`)."""
        return collate_detection(batch)

    skipped = staticmethod(skipped_count)  # the collate function's count of bad items

    # -- training -------------------------------------------------------------------------------
    def loss(
        self, model: nn.Module, batch: Mapping[str, Any], device: torch.device | None = None
    ) -> tuple[torch.Tensor | None, int]:
        """Sum of the detector's training losses for a batch ``{"image", "target", ...}``;
        ``(None, 0)`` for an empty batch."""
        images, targets = batch["image"], batch["target"]
        if not images:
            return None, 0
        device = device or next(model.parameters()).device
        images = [im.to(device) for im in images]
        targets = [{k: v.to(device) for k, v in t.items()} for t in targets]
        losses = model(images, targets)
        n = len(images)
        for k, v in losses.items():
            self._terms[k] = self._terms.get(k, 0.0) + float(v.detach()) * n
        self._terms_count += n
        return sum(losses.values()), n

    def pop_terms(self) -> dict[str, float]:
        """Mean of each loss term since the last call (``loss_classifier``, ``loss_mask``...)."""
        n, terms = self._terms_count, self._terms
        self._terms, self._terms_count = {}, 0
        return {k: v / n for k, v in sorted(terms.items())} if n else {}

    # -- evaluation -----------------------------------------------------------------------------
    def predict(
        self, model: nn.Module, loader: DataLoader, device: Any = None
    ) -> list[dict[str, Any]]:
        """COCO results of ``model`` on every image of ``loader`` (its mode restored after)."""
        evaluator = CocoEvaluator(loader.dataset, self.iou_types)
        inference_on_dataset(model, loader, evaluator, _forward_images)
        return evaluator.results

    def evaluate(
        self, model: nn.Module, data: Any, device: Any = None, **_: Any
    ) -> dict[str, float]:
        """COCO AP/AR (percent) of ``model`` over a :class:`CocoDataset` (in batches of
        ``eval_batch_size``) or a loader of one: ``box_AP``..., ``mask_AP``... and/or
        ``kp_AP``... as in Tables 5 and 6."""
        loader = data
        if isinstance(data, Dataset):
            loader = DataLoader(data, batch_size=self.eval_batch_size, collate_fn=self.collate)
        model = unwrap_model(model)  # a DDP wrapper: evaluate the bare network
        metrics = inference_on_dataset(
            model, loader, CocoEvaluator(loader.dataset, self.iou_types), _forward_images
        )
        metrics.pop("time_s")
        return metrics

    def metadata(self, dataset: Any) -> dict[str, Any]:
        """Class names (background first) and the input convention stored in checkpoints."""
        names = ["__background__", *dataset.class_names] if dataset is not None else None
        return {
            "class_names": names or self.class_names,
            # images in [0, 1]; torchvision's transform resizes and normalises inside the model
            "preprocessing": Preprocessing("boxes", iou_types=self.iou_types),
        }  # fmt: skip

    def summary(self, metrics: dict[str, Any]) -> str:
        keys = [f"{_PREFIX[t]}_AP" for t in self.iou_types]
        return ", ".join(f"{k} {metrics[k]:.2f}" for k in keys if k in metrics)
