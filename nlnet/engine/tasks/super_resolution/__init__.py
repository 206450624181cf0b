"""Single-image super-resolution: L1 loss, PSNR / SSIM on the Y channel.

========  ======================================================================
``task``  ``SuperResolutionTask``
========  ======================================================================

Its datasets are built by :mod:`nlnet.data.super_resolution`.
"""

from __future__ import annotations

from nlnet.engine.tasks.super_resolution.task import (
    SuperResolutionTask,
    rgb_to_y,
    sr_metrics,
)

__all__ = [
    "SuperResolutionTask",
    "rgb_to_y",
    "sr_metrics",
]
