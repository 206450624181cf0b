"""Image classification: fine-tuning ViT, Swin or a 2D ResNet with non-local blocks.

========  ======================================================================
``task``  ``ImageClassificationTask``
========  ======================================================================

Its datasets are built by :mod:`nlnet.data.images`.
"""

from __future__ import annotations

from nlnet.engine.tasks.image.task import *  # noqa: F403  (the task module's public names)
from nlnet.engine.tasks.image.task import __all__ as __all__
