"""Per-item seeding for exact resume: the data order and the augmentation of every item are
functions of ``(seed, epoch, index)``, not of workers, ranks or where a run was interrupted."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from nlnet.engine.errors import CheckpointError
from nlnet.engine.runlog import say

__all__ = ["SeededDataset", "seed_all", "seed_worker", "resolve_resume", "CHECKPOINT_DIR", "LAST",
           "FINAL"]  # fmt: skip

CHECKPOINT_DIR = "checkpoints"
LAST = "last.pt"
FINAL = "final.pt"


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


def resolve_resume(resume: bool | str | os.PathLike | None, run_dir: Path) -> Path | None:
    """The checkpoint ``--resume`` means: ``True`` -> ``<run>/checkpoints/last.pt`` (``None``
    when the run has none yet), a directory or a file path."""
    if not resume:
        return None
    path = run_dir / CHECKPOINT_DIR / LAST if resume is True else Path(resume)
    if path.is_dir():
        path = path / CHECKPOINT_DIR / LAST if (path / CHECKPOINT_DIR).is_dir() else path / LAST
    if not path.is_file():
        if resume is True:
            say(f"resume: no checkpoint at {path} yet; starting the run from the beginning")
            return None
        raise CheckpointError(f"--resume: no checkpoint at {str(path)!r}")
    return path
