"""The run directory: refuse to mix two runs, lock it while a run writes, clean up after a kill.

* A fresh run into a directory that already holds files is refused unless it is resumed
  (``--resume``) or restarted (``--force``, which deletes the previous run's records and
  checkpoints); ``nlnet train`` without ``--output-dir`` gets a new timestamped directory.
* While a run writes, ``<run_dir>/.lock`` is held with ``fcntl.flock``: a second run into the
  same directory fails at once with a clear error.  The kernel drops the lock when the process
  dies, so a SIGKILLed run never leaves a stale lock behind.
* Temporary files of a checkpoint write that was killed are deleted.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path
from typing import Any

from nlnet.engine import distributed as du
from nlnet.engine.checkpoint.file_io import clean_orphan_temp_files
from nlnet.engine.errors import CheckpointError, RunDirError

__all__ = ["RunLock", "PREVIOUS_RUN_FILES", "check_run_dir", "clear_previous_run", "check_new_run",
           "lock_run_dir"]  # fmt: skip

LOCK_NAME = ".lock"
#: What a previous run leaves behind (``--force`` deletes these and nothing else).
PREVIOUS_RUN_FILES = (
    "config.yaml",
    "metrics.jsonl",
    "metrics.csv",
    "curves.png",
    "summary.json",
    "checkpoints",
)


def check_run_dir(run_dir: Path, *, resume: bool, force: bool) -> None:
    """Refuse a fresh run into a directory that holds files (unless ``resume`` or ``force``)."""
    if resume or force or not run_dir.is_dir():
        return
    present = sorted(p.name for p in run_dir.iterdir() if p.name != LOCK_NAME)
    if present == ["config.yaml"]:  # a run that stopped before its first step: nothing to keep
        return
    if present:
        shown = ", ".join(present[:4]) + (", ..." if len(present) > 4 else "")
        raise RunDirError(
            f"run directory {str(run_dir)!r} is not empty ({shown}); continue that run with "
            "--resume, start it over with --force, or choose another --output-dir"
        )


def clear_previous_run(run_dir: Path) -> None:
    """Delete the records and checkpoints of a previous run (``--force``)."""
    for name in PREVIOUS_RUN_FILES:
        p = run_dir / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


class RunLock:
    """An exclusive ``flock`` on ``<run_dir>/.lock`` (context manager; released on exit/death)."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise RunDirError(
                f"run directory {str(self.path.parent)!r} is in use by another run ({holder}); "
                "wait for it or choose another --output-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        self._fd = fd
        clean_orphan_temp_files(self.path.parent / "checkpoints")
        return self

    def release(self) -> None:
        if self._fd is not None:
            import fcntl

            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def check_new_run(run_dir: Path, resume: Any, force: bool) -> None:
    """Refuse a used directory (unless ``resume``/``force``) and a ``--resume`` path that does
    not exist, without creating anything."""
    check_run_dir(run_dir, resume=bool(resume), force=force)
    if resume not in (None, False, True) and not Path(resume).exists():
        raise CheckpointError(f"--resume: no checkpoint or run directory at {str(resume)!r}")


def lock_run_dir(run_dir: Path, resume: Any, force: bool, main: bool) -> RunLock | None:
    """Check the directory again and lock it (rank 0; ``--force`` clears the previous run);
    called once the config, the data and the model are known to work, so a failed start
    leaves no directory or lock.  An error of any rank is raised on every rank."""
    error = None
    try:
        check_run_dir(run_dir, resume=bool(resume), force=force)
    except Exception as exc:  # raised on every rank alike (shared file system)
        error = exc
    du.barrier()
    lock = None
    if error is None and main:
        try:
            lock = RunLock(run_dir).acquire()
            if force and not resume:
                clear_previous_run(run_dir)
        except Exception as exc:
            error = exc
    errors = [e for e in du.all_gather_object(error) if e is not None]
    if errors:
        if lock is not None:
            lock.release()
        raise errors[0]
    return lock
