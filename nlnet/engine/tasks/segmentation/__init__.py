"""Semantic segmentation of images and volumes: the task, its sliding-window forward and BraTS regions.

==================  ======================================================================
``task``            ``SegmentationTask``: per-pixel cross-entropy (or Dice), mIoU / mDice
``labels``          the class ids of the masks, read before training (``model.num_classes``)
``options``         what the task builds from the data section's window and region keys
``sliding_window``  sliding-window inference on inputs larger than the training crop
``region_metrics``  BraTS's per-case region Dice and HD95
==================  ======================================================================

Its datasets are built by :mod:`nlnet.data.segmentation`.
"""

from __future__ import annotations

from nlnet.engine.tasks.segmentation.task import *  # noqa: F403  (the task module's public names)
from nlnet.engine.tasks.segmentation.task import __all__ as __all__
