"""Single-image super-resolution: L1 loss, PSNR / SSIM on the Y channel.

========  ======================================================================
``task``  ``SuperResolutionTask``
========  ======================================================================

Its datasets are built by :mod:`nlnet.data.super_resolution`.
"""

from __future__ import annotations

from nlnet.engine.tasks.super_resolution.task import *  # noqa: F403  (the task module's public names)
from nlnet.engine.tasks.super_resolution.task import __all__ as __all__
