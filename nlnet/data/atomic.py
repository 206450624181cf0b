"""Files written whole or not at all: the package's one atomic write.

A file is written under a temporary name in its own folder and renamed onto its path only when
the writing finished (``os.replace`` is atomic on one file system), so a reader -- another
process, a resumed run, a second demo job -- never sees half a file, and an interrupted write
leaves the old file (or none), never a damaged one. Checkpoints add an ``fsync`` of the file and
its folder (:func:`nlnet.engine.checkpoint.save_checkpoint`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed onto ``path`` when the block ends
    without an error, removed otherwise (the error propagates).

    Args:
        path: the file to write (its folder is created).
        suffix: the temporary name's ending (``".npy"`` where a writer appends one otherwise).

    Example::

        with atomic_path(cache / "weights.pt") as tmp:
            torch.save(state, tmp)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
