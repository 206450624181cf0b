"""Files written whole or not at all: the package's one atomic write.

A file is written under a temporary name in its own folder and renamed onto its path only when
the writing finished (``os.replace`` is atomic on one file system), so a reader -- another
process, a resumed run, a second demo job -- never sees half a file, and an interrupted write
leaves the old file (or none), never a damaged one. The file gets the mode ``open()`` gives a new
file (``0o666`` minus the umask), and ``durable=True`` (checkpoints) also ``fsync``s it before
the rename and its folder after.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "user_file_mode"]


def user_file_mode() -> int:
    """``0o666`` minus the process umask: the mode ``open()`` gives a new file."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _fsync(path: Path) -> None:
    """``fsync`` of a file or a folder (best effort where the system cannot open a folder)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. a folder on Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(
    path: str | os.PathLike, suffix: str = ".tmp", *, durable: bool = False
) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed onto ``path`` when the block ends
    without an error, removed otherwise (the error propagates).

    Args:
        path: the file to write (its folder is created).
        suffix: the temporary name's ending (``".npy"`` where a writer appends one otherwise).
        durable: ``fsync`` the file before the rename and the folder after (a power loss keeps
            the old file or the whole new one).

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
        os.chmod(tmp, user_file_mode())  # mkstemp creates 0o600
        if durable:
            _fsync(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if durable:
        _fsync(path.parent)
