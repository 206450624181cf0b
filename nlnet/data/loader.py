"""A data loader that overlaps decoding and the host-to-device copy with the model's compute.

* decoding runs in ``workers`` DataLoader processes, each keeping ``prefetch`` batches ready
  (PyTorch's ``prefetch_factor``), while the main process trains;
* batches are collated into pinned (page-locked) memory when the device is CUDA, so that
* :class:`DevicePrefetcher` can start copying batch ``k + 1`` to the GPU (``non_blocking`` on a
  side stream) while the model computes on batch ``k``; on a CPU device it passes batches
  through unchanged.

timm's ``PrefetchLoader`` and PySlowFast's loader (``DATA_LOADER.PIN_MEMORY``,
``DATA_LOADER.NUM_WORKERS``) are the models of this file.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

__all__ = ["DevicePrefetcher", "TimedBatches", "WorkerTuner", "make_loader", "skipped_count",
           "to_device", "usable_cores", "usable_workers", "worker_tuner"]  # fmt: skip


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS reports it)."""
    import os

    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def usable_workers(workers: int) -> int:
    """``workers``, at most the CPU cores this process may use (a shipped config's 4 workers on
    a 2-core machine only add processes that wait for a core); a cut says so once. Items are
    seeded per item, so the batches do not depend on the worker count."""
    import warnings

    cores = usable_cores()
    if workers > cores:
        warnings.warn(f"train/eval workers={workers} is more than the {cores} usable CPU "
                      f"core(s); using {cores}", RuntimeWarning, stacklevel=3)  # fmt: skip
        return cores
    return workers


class WorkerTuner:
    """``train.workers: auto``: the loader's worker count chosen epoch by epoch from what the
    training loop measured.

    It starts with 0 workers: decoding in the training process, with no process start-up each
    epoch, and an in-process clip cache (``data.clip_cache: memory``) that stays filled. After
    each full epoch, :meth:`update` gets its items/s and the fraction of its time spent waiting
    for batches; the first epoch is only a warm-up (it fills caches, opens every file the first
    time, compiles) and decides nothing. While the wait is above ``keep_up`` (the loader does not
    keep up), the count grows (0 -> 2 -> 4 -> 8 ..., at most the usable cores); a count whose
    epoch was slower than the best one so far (by more than ``tolerance``) is undone and the
    search ends there, as it does once the loader keeps up. The count does not change the
    numbers of data that decodes: every item's clip and augmentation is seeded by
    ``(seed, epoch, index)`` (:mod:`nlnet.data.seeding`); a video whose decoding fails is
    marked bad only in the process that met it (in a worker: for its epoch).

    Args:
        cores: the most workers to try (default: :func:`usable_cores`; a DDP run passes its
            share per process on the node).
        keep_up: the largest waiting fraction taken as keeping up.
        tolerance: relative items/s below the best that counts as slower.
    """

    def __init__(self, cores: int | None = None, keep_up: float = 0.05,
                 tolerance: float = 0.05) -> None:  # fmt: skip
        self.cores = usable_cores() if cores is None else int(cores)
        self.keep_up, self.tolerance = float(keep_up), float(tolerance)
        self.workers = 0
        self.best: tuple[float, int] | None = None  # (items/s, workers)
        self.warm = False  # the first epoch seen
        self.done = False

    def update(self, items_per_s: float, wait_fraction: float) -> int:
        """The count for the next epoch after one of ``self.workers`` workers ran at
        ``items_per_s``, waiting ``wait_fraction`` of its time for batches."""
        if self.done or not self.warm:
            self.warm = True
            return self.workers
        if self.best is not None and items_per_s < self.best[0] * (1 - self.tolerance):
            self.workers, self.done = self.best[1], True  # more workers made it slower: undo
            return self.workers
        if self.best is None or items_per_s > self.best[0]:
            self.best = (items_per_s, self.workers)
        grown = min(max(2, 2 * self.workers), self.cores)
        if wait_fraction <= self.keep_up or grown == self.workers:
            self.done = True
            return self.workers
        self.workers = grown
        return grown

    def after_epoch(self, items: int, busy_s: float, wait_s: float, epoch: int) -> str | None:
        """:meth:`update` from an epoch's ``items`` trained in ``busy_s`` seconds of steps, of
        which ``wait_s`` waiting for batches; the log line of a change (``epoch``: the next)."""
        if busy_s <= 0:
            return None
        before = self.workers
        rate, wait = items / busy_s, wait_s / busy_s
        if self.update(rate, wait) == before:
            return None
        return (f"train.workers=auto: {self.workers} loader worker(s) from epoch {epoch} (epoch "
                f"{epoch - 1} with {before}: {rate:.1f} items/s, {100 * wait:.0f}% of the steps' "
                "time waiting for data)")  # fmt: skip


def worker_tuner(workers: int | str, world_size: int = 1) -> WorkerTuner | None:
    """The :class:`WorkerTuner` of ``train.workers: auto`` (``None`` for a fixed count); with
    ``world_size`` processes (``LOCAL_WORLD_SIZE`` of them on this node where torchrun says so)
    each process may use its share of the cores."""
    import os

    if workers != "auto":
        return None
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size) or 1)
    return WorkerTuner(cores=max(1, usable_cores() // max(1, local)))


class TimedBatches:
    """An iterator of batches that adds up the time spent waiting in ``next`` (``wait_s``),
    the start of the loader's workers included (the loader is iterated at the first ``next``)."""

    def __init__(self, batches: Iterable[Any]) -> None:
        self._batches = batches
        self._it: Iterator[Any] | None = None
        self.wait_s = 0.0

    def __iter__(self) -> TimedBatches:
        return self

    def __next__(self) -> Any:
        t = time.perf_counter()
        try:
            if self._it is None:
                self._it = iter(self._batches)
            return next(self._it)
        finally:
            self.wait_s += time.perf_counter() - t


def make_loader(
    dataset: Dataset,
    *,
    batch_size: int,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    sampler: Sampler | Iterable | None = None,
    workers: int = 0,
    prefetch: int = 2,
    device: torch.device | str = "cpu",
    drop_last: bool = False,
    worker_init_fn: Callable[[int], None] | None = None,
    generator: torch.Generator | None = None,
) -> DataLoader:
    """A ``DataLoader`` with the overlap settings of this module.

    Args:
        dataset, batch_size, collate_fn, sampler, drop_last, worker_init_fn, generator: as for
            ``torch.utils.data.DataLoader``.
        workers: decoding processes (0: decode in the main process, no overlap).
        prefetch: batches each worker keeps ready (ignored without workers).
        device: where the batches go; pinned memory only for CUDA.

    Raises:
        ValueError: a negative worker count or a prefetch depth below 1.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"workers: expected an int >= 0, got {workers!r}")
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
        raise ValueError(f"prefetch: expected an int >= 1, got {prefetch!r}")
    workers = usable_workers(workers)
    return DataLoader(
        dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
        collate_fn=collate_fn, pin_memory=torch.device(device).type == "cuda",
        drop_last=drop_last, worker_init_fn=worker_init_fn, generator=generator,
        prefetch_factor=prefetch if workers > 0 else None,
    )  # fmt: skip


def skipped_count(batch: Any) -> int:
    """How many items of ``batch`` its collate function dropped as unreadable (the ``skipped``
    entry of a dict batch, as the package's collate functions write it; 0 otherwise)."""
    return int(batch.get("skipped", 0) or 0) if isinstance(batch, dict) else 0


def to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """``batch`` (tensors in dicts, lists and tuples) moved to ``device``; other leaves kept."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {k: to_device(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # NamedTuple
        return type(batch)(*(to_device(v, device, non_blocking) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device, non_blocking) for v in batch)
    return batch


class DevicePrefetcher:
    """Iterate ``loader``'s batches already on ``device``, the next one copied during this one.

    On CUDA the copy of the next batch is queued on a side stream right after the current batch
    is handed out; the consumer's stream waits for it before use. Elsewhere it is ``to_device``
    per batch (a no-op for CPU).
    """

    def __init__(self, loader: Iterable[Any], device: torch.device | str) -> None:
        self.loader = loader
        self.device = torch.device(device)

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        if self.device.type != "cuda":
            for batch in self.loader:
                yield to_device(batch, self.device)
            return
        stream = torch.cuda.Stream(device=self.device)
        pending = None
        for batch in self.loader:
            with torch.cuda.stream(stream):
                ready = to_device(batch, self.device, non_blocking=True)
            if pending is not None:
                yield pending
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(stream)
            for t in _tensors(ready):  # memory made on the side stream, used on this one
                t.record_stream(current)
            pending = ready
        if pending is not None:
            yield pending


def _tensors(batch: Any) -> Iterator[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, dict):
        for v in batch.values():
            yield from _tensors(v)
    elif isinstance(batch, (list, tuple)):
        for v in batch:
            yield from _tensors(v)
