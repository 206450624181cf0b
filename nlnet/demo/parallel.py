"""Demo jobs side by side: one PyTorch thread per job, so the figures do not depend on the cores.

A demo trains small models whose CPU kernels gain little from a second thread, and whose results
change with the thread count (float sums are reduced in another order). So the demos give every
job -- the 2D pre-training, each model's training -- exactly one thread, and use the machine's
other cores by running jobs side by side in spawned processes
(:class:`concurrent.futures.ProcessPoolExecutor`). With one core, or on a GPU, the same jobs run
one after the other in this process; either way each job computes the same numbers.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, TypeVar

import torch

__all__ = ["Jobs"]

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
    """

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"n: expected a positive number of jobs, got {n}")
        self.n = n
        self._pool: ProcessPoolExecutor | None = None
        if n > 1:
            import torch.multiprocessing  # noqa: F401  (registers the tensor pickler)

            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(n, mp_context=context, initializer=_worker_init)

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
