"""Per-item randomness: item ``index`` of ``epoch`` under a base ``seed`` gets one seed, carried
with the index as an :class:`ItemKey`.

The training loop's sampler yields keys (:class:`nlnet.engine.distributed.ResumableDistributedSampler`
with ``with_seeds=True``) and reads items through :class:`SeededDataset`. A dataset that draws its
random choices from an explicit ``torch.Generator`` (``takes_item_key = True``, as
:class:`nlnet.data.video.dataset.VideoClipDataset`) receives the key itself and draws from
:meth:`ItemKey.generator`; for any other dataset (torchvision's transforms use the global
generators) the global python, numpy and torch generators are seeded from the same key for the
duration of the fetch. Either way augmentation depends only on ``(seed, epoch, index)``: not on
the number of workers or processes, and it replays exactly after a resume.
"""

from __future__ import annotations

import random
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = ["ItemKey", "SeededDataset", "item_seed", "seed_all", "seed_host", "seed_worker"]


def item_seed(seed: int, epoch: int, index: int) -> int:
    """A 63-bit seed for the augmentation of dataset item ``index`` in ``epoch``."""
    state = np.random.SeedSequence([seed & 0xFFFFFFFF, epoch, index]).generate_state(2)
    return int((int(state[0]) << 31) ^ int(state[1])) & 0x7FFF_FFFF_FFFF_FFFF


class ItemKey(NamedTuple):
    """A dataset index with the seed of the item's random choices (:func:`item_seed`)."""

    index: int
    seed: int

    @classmethod
    def of(cls, seed: int, epoch: int, index: int) -> ItemKey:
        """The key of item ``index`` in ``epoch`` under the base ``seed``."""
        return cls(int(index), item_seed(seed, epoch, index))

    def generator(self) -> torch.Generator:
        """A fresh ``torch.Generator`` seeded with the key's seed."""
        return torch.Generator().manual_seed(self.seed)


class SeededDataset(Dataset):
    """Read ``dataset`` by :class:`ItemKey` (a plain int index passes through unseeded).

    Datasets with ``takes_item_key = True`` get the key and draw from its generator; others are
    read with the global generators seeded by the key (restored afterwards in the main process,
    so a fetch leaves the training's own random state untouched).
    """

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: int | ItemKey | tuple[int, int]) -> Any:
        if not isinstance(key, tuple):
            return self.dataset[key]
        key = ItemKey(*key)
        if getattr(self.dataset, "takes_item_key", False):
            return self.dataset[key]
        in_main = torch.utils.data.get_worker_info() is None
        if in_main:
            saved = (random.getstate(), np.random.get_state(), torch.get_rng_state())
        seed_host(key.seed)
        try:
            return self.dataset[key.index]
        finally:
            if in_main:
                random.setstate(saved[0])
                np.random.set_state(saved[1])
                torch.set_rng_state(saved[2])

    def __getattr__(self, name: str) -> Any:
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)


def seed_all(seed: int) -> None:
    """Seed python's, numpy's and torch's global generators (torch's on every device)."""
    seed_host(seed)
    torch.manual_seed(seed)  # the accelerators' generators too


def seed_host(seed: int) -> None:
    """Seed python's, numpy's and torch's CPU global generators: those a dataset fetch draws
    from, and the ones :class:`SeededDataset` restores (``torch.manual_seed`` would also reseed
    the accelerators' generators, at about 100 times the cost of the CPU one)."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.default_generator.manual_seed(seed)


def seed_worker(worker_id: int) -> None:
    """``worker_init_fn``: numpy and python generators from the worker's torch seed."""
    seed = torch.initial_seed() % (2**32)
    np.random.seed(seed)
    random.seed(seed)
