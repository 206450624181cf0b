"""User errors of the engine: bad data, bad config, bad checkpoint, occupied run directory.

The command line prints any :class:`UserError` as one line on stderr and exits with status 2;
every other exception is a bug and keeps its traceback (``nlnet --debug`` shows tracebacks for
user errors too).
"""

from __future__ import annotations

__all__ = [
    "UserError",
    "ConfigError",
    "DataError",
    "CheckpointError",
    "RunDirError",
    "DivergedError",
    "MissingPackageError",
]


class UserError(Exception):
    """Base class of the errors a user can fix (message: one line naming the cause)."""


class ConfigError(UserError, ValueError):
    """Raised for an invalid configuration (unknown key, wrong type, bad value)."""


class DataError(UserError, ValueError):
    """The data cannot be trained or evaluated on (no usable video, class mismatch, ...)."""


class CheckpointError(UserError, ValueError):
    """A checkpoint file is missing, truncated, corrupted or not an nlnet/PyTorch checkpoint."""


class RunDirError(UserError):
    """The run directory is in use by another run or holds a previous run."""


class DivergedError(UserError, FloatingPointError):
    """The training loss became infinite or NaN on clips that did decode."""


class MissingPackageError(UserError, ModuleNotFoundError):
    """An optional package is not installed; the message names it and the extra to install
    (e.g. ``COCO AP evaluation needs pycocotools: pip install 'nlnet[coco]'``)."""
