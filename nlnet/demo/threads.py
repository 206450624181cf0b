"""``--threads`` of the demos: a number, or ``auto`` = the idle cores of a shared machine."""

from __future__ import annotations

import os

__all__ = ["threads_for"]


def threads_for(arg: str) -> int:
    """``--threads``: a positive int, or ``auto`` = the idle cores (at least 1).

    On a shared machine more threads than idle cores make PyTorch's CPU kernels far slower, so
    ``auto`` subtracts the 1-minute load average from the core count.

    Raises:
        ValueError: neither a positive integer nor ``auto``.
    """
    if arg != "auto":
        try:
            n = int(arg)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"--threads: expected a positive integer or 'auto', got {arg!r}")
        return n
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    cores = os.cpu_count() or 1
    return max(1, min(cores, int(cores - load + 0.5)))
