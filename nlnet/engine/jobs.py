"""Independent trainings side by side: one PyTorch thread per job, and the record of the
machine's load (so the figures do not depend on the cores, and their conditions are written down).

Small models (the demos', a seed sweep's) gain little from a second CPU thread, and their
results change with the thread count (float sums are reduced in another order). So each job --
a pre-training, one model's training of one seed -- gets exactly one thread, and the machine's
other cores run jobs side by side in spawned processes
(:class:`concurrent.futures.ProcessPoolExecutor`). With one core, or on a GPU, the same jobs run
one after the other in this process; either way each job computes the same numbers.

``--threads`` of the demos is a number or ``auto`` (:func:`jobs_for`);
``summary.json`` of a run carries the load average (:func:`write_summary`).
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import torch

from nlnet.data.atomic import atomic_path
from nlnet.data.loader import usable_cores  # the one reading of the CPU affinity

__all__ = ["Jobs", "jobs_for", "load_average", "write_summary"]

T = TypeVar("T")


def _worker_init() -> None:
    """One PyTorch thread; Ctrl-C is the main process's to handle (it stops the workers)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)


class Jobs:
    """Run functions side by side in ``n`` worker processes (``n > 1``) or here, one by one.

    Functions and their arguments must be picklable (module-level functions; tensors are sent
    through shared memory by :mod:`torch.multiprocessing`'s pickler, so keep them small and pass
    paths to large data instead). Use as a context manager.

    Args:
        n: how many jobs may run at once (``jobs_for(--threads)``); 1 runs everything in this
            process when its result is asked for.
        device: where the jobs compute: on a GPU they run one after the other here (``n`` is
            then 1: one device, and its kernels use the whole of it).
    """

    def __init__(self, n: int, device: str | torch.device = "cpu") -> None:
        if n < 1:
            raise ValueError(f"n: expected a positive number of jobs, got {n}")
        self.n = n if torch.device(device).type == "cpu" else 1
        self._pool: ProcessPoolExecutor | None = None
        if self.n > 1:
            importlib.import_module("torch.multiprocessing")  # registers the tensor pickler

            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(self.n, mp_context=context, initializer=_worker_init)

    @property
    def parallel(self) -> bool:
        """Whether jobs run in worker processes."""
        return self._pool is not None

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
        """Start ``fn(*args, **kwargs)``; with one job it runs now, in this process, on one
        thread (the thread count is restored afterwards)."""
        if self._pool is not None:
            return self._pool.submit(fn, *args, **kwargs)
        future: Future[T] = Future()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:  # delivered by .result(), as a worker's would be
            future.set_exception(exc)
        finally:
            torch.set_num_threads(threads)
        return future

    def starmap(self, fn: Callable[..., T], calls: list[tuple[Any, ...]]) -> list[T]:
        """``[fn(*args) for args in calls]``, the calls side by side; results in call order."""
        futures = [self.submit(fn, *args) for args in calls]
        return [f.result() for f in futures]

    def close(self, stop: bool = False) -> None:
        """Wait for the running jobs, or with ``stop`` kill the workers at once (an error or
        Ctrl-C in this process: their results would not be used)."""
        if self._pool is None:
            return
        if stop:
            for process in list(getattr(self._pool, "_processes", {}).values()):
                process.kill()
        self._pool.shutdown(wait=not stop, cancel_futures=True)
        self._pool = None

    def __enter__(self) -> Jobs:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.close(stop=exc_type is not None)


# ------------------------------------------------------------------ --threads
def _positive(arg: str) -> int:
    try:
        n = int(arg)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"--threads: expected a positive integer or 'auto', got {arg!r}")
    return n


def jobs_for(arg: str) -> int:
    """``--threads`` as one-thread jobs side by side (:class:`Jobs`): a
    positive int, or ``auto`` = the usable cores.

    Unlike the threads of one process, single-threaded processes lose little when the machine is
    busy (the OS shares the cores; no thread waits for another's slice), so ``auto`` does not
    look at the load.

    Raises:
        ValueError: neither a positive integer nor ``auto``.
    """
    return usable_cores() if arg == "auto" else _positive(arg)


# ------------------------------------------------------------------ summary.json
def load_average() -> list[float] | None:
    """The 1/5/15-minute load averages, or ``None`` where the OS does not report them."""
    try:
        return list(os.getloadavg())
    except (AttributeError, OSError):
        return None


def write_summary(out: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """Add ``loadavg_end`` and write ``out/summary.json`` (non-JSON numbers as floats)."""
    summary = {**summary, "loadavg_end": load_average()}
    with atomic_path(Path(out) / "summary.json") as tmp:
        tmp.write_text(json.dumps(summary, indent=1, default=float))
    return summary
