"""The one per-item seed of nlnet: item ``index`` of ``epoch`` under base ``seed``.

Both users derive from :func:`item_seed`: the engine's loop (which seeds the global generators
before fetching item ``index``, :class:`nlnet.engine.seeding.SeededDataset`) and a dataset's own
``seed`` (an explicit ``torch.Generator`` per item, :func:`item_generator`). Augmentation then
depends only on ``(seed, epoch, index)``, not on the number of workers or processes, and replays
exactly after a resume.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["item_generator", "item_seed"]


def item_seed(seed: int, epoch: int, index: int) -> int:
    """A 63-bit seed for the augmentation of dataset item ``index`` in ``epoch``."""
    state = np.random.SeedSequence([seed & 0xFFFFFFFF, epoch, index]).generate_state(2)
    return int((int(state[0]) << 31) ^ int(state[1])) & 0x7FFF_FFFF_FFFF_FFFF


def item_generator(seed: int, epoch: int, index: int) -> torch.Generator:
    """A ``torch.Generator`` seeded with :func:`item_seed`."""
    return torch.Generator().manual_seed(item_seed(seed, epoch, index))
