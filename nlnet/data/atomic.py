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
import secrets
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path"]


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


def _new_temp_file(path: Path, suffix: str) -> Path:
    """An empty new file ``.<name>.<random><suffix>`` beside ``path``, with the mode ``open()``
    gives a new file (``0o666`` minus the umask, applied by the system: ``mkstemp``'s files
    are ``0o600``, and reading the umask would change it for every thread)."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}{suffix}")
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")  # pragma: no cover


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
    tmp = _new_temp_file(path, suffix)
    try:
        yield tmp
        if durable:
            _fsync(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if durable:
        _fsync(path.parent)
