"""``--threads`` of the demos: a number, or ``auto``."""

from __future__ import annotations

import os

__all__ = ["jobs_for", "threads_for", "usable_cores"]


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS reports it)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _positive(arg: str) -> int:
    try:
        n = int(arg)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"--threads: expected a positive integer or 'auto', got {arg!r}")
    return n


def threads_for(arg: str) -> int:
    """``--threads`` as PyTorch threads of one process: a positive int, or ``auto`` = the idle
    cores (at least 1).

    On a shared machine more threads than idle cores make PyTorch's CPU kernels far slower, so
    ``auto`` subtracts the 1-minute load average from the core count.

    Raises:
        ValueError: neither a positive integer nor ``auto``.
    """
    if arg != "auto":
        return _positive(arg)
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    cores = usable_cores()
    return max(1, min(cores, int(cores - load + 0.5)))


def jobs_for(arg: str) -> int:
    """``--threads`` as one-thread jobs side by side (:class:`nlnet.demo.parallel.Jobs`): a
    positive int, or ``auto`` = the usable cores.

    Unlike the threads of one process, single-threaded processes lose little when the machine is
    busy (the OS shares the cores; no thread waits for another's slice), so ``auto`` does not
    look at the load.

    Raises:
        ValueError: neither a positive integer nor ``auto``.
    """
    return usable_cores() if arg == "auto" else _positive(arg)
