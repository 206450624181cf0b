"""The dataset of a detection split: the images of ``root/<images>`` and their COCO-format
annotations (``root/annotations/instances_<split>.json``, or ``person_keypoints_<split>.json``
for keypoints)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nlnet.data.detection.coco import CocoDataset
from nlnet.data.detection.config import DetectionDataConfig

__all__ = ["build_coco_dataset"]


def build_coco_dataset(
    data: DetectionDataConfig,
    split: str,
    mode: str,
    iou_types: Sequence[str],
) -> CocoDataset:
    """The :class:`CocoDataset` of ``split`` with what ``iou_types`` evaluates (masks for
    ``segm``, keypoints for ``keypoints``); flips only in ``train`` mode, images without an
    object kept outside training (or with ``data.keep_empty``).

    Raises:
        ValueError: ``data.root`` not set; FileNotFoundError: a missing folder or file;
        ModuleNotFoundError: pycocotools is not installed.
    """
    if data.root is None:
        raise ValueError("data.root: expected the dataset folder (COCO json + images)")
    root = Path(data.root)
    kind = "person_keypoints" if "keypoints" in iou_types else "instances"
    return CocoDataset(
        root / data.images.format(split=split),
        root / "annotations" / f"{kind}_{split}.json",
        masks="segm" in iou_types,
        keypoints="keypoints" in iou_types,
        hflip=float(data.hflip) if mode == "train" else 0.0,
        keep_empty=bool(data.keep_empty) or mode != "train",
    )
