"""Video classification (Sections 4-5.2): the task, its config sections and its tools.

=================  ============================================================================
``task``           :class:`VideoClassificationTask`: clips in, class scores out, the loss
``config``         its sections: ``eval`` with the test views, ``augment``, ``multigrid``
``evaluation``     multi-clip testing (Section 4.1): clip and video scores, the test loader
``augment``        MixUp / CutMix / RandAugment of training clips, soft-target cross-entropy
``multigrid``      multigrid training (Wu et al., CVPR 2020): schedules and the task's hook
=================  ============================================================================

Its datasets are built by :mod:`nlnet.data.video`.
"""

from __future__ import annotations

from nlnet.engine.tasks.video.config import AugmentConfig, MultigridConfig, VideoEvalConfig
from nlnet.engine.tasks.video.task import VideoClassificationTask, compute_loss, resample_clip

__all__ = [
    "AugmentConfig",
    "MultigridConfig",
    "VideoClassificationTask",
    "VideoEvalConfig",
    "compute_loss",
    "resample_clip",
]
