"""Stopping a run cleanly: SIGINT (Ctrl-C) or SIGTERM (a pre-empting scheduler) during
``train()`` end the current step; the loop then writes ``last.pt`` and prints the exact command
that continues the run (exact resume: see :mod:`nlnet.engine.loop`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from nlnet.engine import distributed as du
from nlnet.engine.runlog import say

__all__ = ["StopRequest", "resume_command"]


def resume_command(run_dir: Path) -> str:
    """The exact command that continues a run (its config is stored in the run directory)."""
    import shlex

    return f"nlnet train --output-dir {shlex.quote(str(run_dir))} --resume"


class StopRequest:
    """SIGINT/SIGTERM during training ask the loop to stop after the current step, write
    ``last.pt`` and say how to resume (a second Ctrl-C stops at once).  Handlers are installed
    only in the main thread and restored on exit; under DDP the request is all-reduced so
    every process stops at the same step."""

    def __init__(self, distributed: bool = False) -> None:
        self.distributed = distributed
        self.name: str | None = None
        self._old: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        import signal

        if self.name is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: now
        self.name = signal.Signals(signum).name
        say(f"{self.name}: finishing this step, then saving last.pt (Ctrl-C again to quit now)")

    def requested(self) -> bool:
        flag = self.name is not None
        if self.distributed:
            t = torch.tensor([float(flag)], dtype=torch.float64)
            flag = bool(du.all_reduce_sum(t).item() > 0)
            self.name = self.name or ("SIGTERM" if flag else None)
        return flag

    def __enter__(self) -> StopRequest:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()
