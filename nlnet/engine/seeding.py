"""Per-item seeding for exact resume: the data order and the augmentation of every item are
functions of ``(seed, epoch, index)``, not of workers, ranks or where a run was interrupted."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = ["SeededDataset", "seed_all", "seed_worker"]


class SeededDataset(Dataset):
    """Wrap a dataset so item ``i`` of epoch ``e`` sees generators seeded by ``(seed, e, i)``.

    The sampler yields ``(index, item_seed)`` pairs; before fetching, the python, numpy and torch
    generators are seeded with ``item_seed`` (and restored afterwards in the main process), so
    random augmentation is reproducible regardless of workers, ranks or resumption.
    """

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: Any) -> Any:
        if not isinstance(key, tuple):
            return self.dataset[key]
        index, seed = key
        in_main = torch.utils.data.get_worker_info() is None
        if in_main:
            saved = (random.getstate(), np.random.get_state(), torch.get_rng_state())
        seed_all(seed)
        try:
            return self.dataset[index]
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
    """Seed python's, numpy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def seed_worker(worker_id: int) -> None:
    """``worker_init_fn``: numpy and python generators from the worker's torch seed."""
    seed = torch.initial_seed() % (2**32)
    np.random.seed(seed)
    random.seed(seed)
