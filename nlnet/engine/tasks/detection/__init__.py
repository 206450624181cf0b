"""Detection, instance segmentation and keypoints (Section 6), evaluated by pycocotools.

========  ======================================================================
``task``  ``DetectionTask``: torchvision's R-CNN losses, COCO box/mask/keypoint AP
========  ======================================================================

Its datasets are built by :mod:`nlnet.data.detection`.
"""

from __future__ import annotations

from nlnet.engine.tasks.detection.task import (
    STAT_NAMES,
    CocoEvaluator,
    DetectionTask,
    coco_evaluate,
    default_iou_types,
    outputs_to_coco,
)

__all__ = [
    "coco_evaluate",
    "CocoEvaluator",
    "default_iou_types",
    "DetectionTask",
    "outputs_to_coco",
    "STAT_NAMES",
]
