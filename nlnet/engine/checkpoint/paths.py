"""Where a run keeps its checkpoints, and which one ``--resume`` means."""

from __future__ import annotations

import os
from pathlib import Path

from nlnet.engine.errors import CheckpointError
from nlnet.engine.runlog import say

__all__ = ["CHECKPOINT_DIR", "LAST", "FINAL", "resolve_resume"]

#: the run directory's folder of checkpoints
CHECKPOINT_DIR = "checkpoints"
#: the latest checkpoint of a run (``train.ckpt_every``, a stop), continued by ``--resume``
LAST = "last.pt"
#: the checkpoint written at the end of a run
FINAL = "final.pt"


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
