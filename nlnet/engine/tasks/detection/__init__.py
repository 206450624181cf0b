"""Detection, instance segmentation and keypoints (Section 6), evaluated by pycocotools.

========  ======================================================================
``task``  ``DetectionTask``: torchvision's R-CNN losses, COCO box/mask/keypoint AP
========  ======================================================================

Its datasets are built by :mod:`nlnet.data.detection`.
"""

from __future__ import annotations

from nlnet.engine.tasks.detection.task import *  # noqa: F403  (the task module's public names)
from nlnet.engine.tasks.detection.task import __all__ as __all__
