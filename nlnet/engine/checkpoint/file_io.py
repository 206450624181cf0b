"""Writing and reading checkpoint files: atomic saves, verified ``weights_only`` loads.

:func:`save_checkpoint` writes to a temporary file, syncs it and renames it into place (a killed
write leaves the previous checkpoint intact); :func:`load_checkpoint` checks the file (empty,
truncated, zip CRC) before ``torch.load(weights_only=True)``, so no pickled code ever runs. The
format is described in :mod:`nlnet.engine.checkpoint`.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nlnet.data.atomic import atomic_path
from nlnet.data.preprocessing import Preprocessing
from nlnet.engine.checkpoint.rng import get_rng_state
from nlnet.engine.errors import CheckpointError

FORMAT = "nlnet-checkpoint"
VERSION = 2


def unwrap_model(model: nn.Module) -> nn.Module:
    """Return the bare module inside DistributedDataParallel / DataParallel / torch.compile."""
    while True:
        if hasattr(model, "module") and isinstance(model.module, nn.Module):
            model = model.module
        elif hasattr(model, "_orig_mod") and isinstance(model._orig_mod, nn.Module):
            model = model._orig_mod
        else:
            return model


# --------------------------------------------------------------------------------------------
# save / load
# --------------------------------------------------------------------------------------------
def clean_orphan_temp_files(directory: str | os.PathLike) -> list[Path]:
    """Delete ``.<name>.*.tmp`` files left by a write that was killed (SIGKILL, power loss).

    Only call this while holding the run directory's lock (no other writer can be mid-write).
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = []
    for p in directory.glob(".*.pt.*.tmp"):
        p.unlink(missing_ok=True)
        removed.append(p)
    return removed


def stored_preprocessing(value: Preprocessing | Mapping[str, Any] | None) -> dict[str, Any]:
    """The versioned dict a checkpoint stores for a test-time record (``{}`` for none).

    Raises:
        CheckpointError: a dict the record refuses (one line naming ``preprocessing``).
    """
    try:
        record = Preprocessing.of(value)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"preprocessing: {exc}") from None
    return record.to_dict() if record is not None else {}


def save_checkpoint(
    path: str | os.PathLike,
    *,
    model: nn.Module,
    model_name: str,
    num_classes: int,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    scaler: Any = None,
    epoch: int = 0,
    iteration: int = 0,
    batch_in_epoch: int = 0,
    config: Mapping[str, Any] | None = None,
    class_names: Iterable[str] | None = None,
    model_options: Mapping[str, Any] | None = None,
    preprocessing: Preprocessing | Mapping[str, Any] | None = None,
    rng_state: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write a checkpoint atomically: temporary file in the same directory, fsync, rename.

    A reader never sees a half-written file: either the previous checkpoint or the new one.  The
    file gets the mode of any new file of the user (``0o666 & ~umask``).

    Args:
        path: destination file (``.pt``).
        model: the network (DDP wrappers are unwrapped).
        model_name: registry name, checked when resuming and used by :func:`build_model_from_checkpoint`.
        num_classes: classifier width, checked when resuming.
        optimizer, scheduler, scaler: training state (optional).
        epoch, iteration, batch_in_epoch: position of the run (iteration = optimizer steps done;
            batch_in_epoch = mini-batches of the current epoch already consumed).
        config: the resolved configuration as plain dicts.
        class_names: names of the output classes (used by ``nlnet predict``).
        model_options: keyword arguments of ``create_model`` besides ``num_classes``.
        preprocessing: the test-time record (:class:`~nlnet.data.preprocessing.Preprocessing`,
            or a dict of it, an older shape too), stored as its versioned dict.
        rng_state: generator states (default: :func:`get_rng_state` now).
        extra: more plain data (e.g. the sampler state).

    Returns:
        The path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "model_name": str(model_name),
        "num_classes": int(num_classes),
        "class_names": list(class_names) if class_names is not None else None,
        "model_options": dict(model_options or {}),
        "preprocessing": stored_preprocessing(preprocessing),
        "model": unwrap_model(model).state_dict(),
        "epoch": int(epoch),
        "iteration": int(iteration),
        "batch_in_epoch": int(batch_in_epoch),
        "rng": dict(rng_state) if rng_state is not None else get_rng_state(),
        "config": dict(config) if config is not None else {},
        "extra": dict(extra) if extra is not None else {},
    }
    if optimizer is not None:
        payload["optimizer"] = optimizer.state_dict()
    if scheduler is not None:
        payload["scheduler"] = scheduler.state_dict()
    if scaler is not None:
        payload["scaler"] = scaler.state_dict()
    with atomic_path(path, durable=True) as tmp:
        torch.save(payload, tmp)
    return path


_ZIP_MAGIC = b"PK\x03\x04"
#: What a file that is not a checkpoint often is (its first bytes, what to call it).
_OTHER_FILES = ((b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"),
                (b"GIF8", "a GIF image"), (b"%PDF", "a PDF file"),
                (b"\x00\x00\x00", "a video or other binary file"))  # fmt: skip


def _verify_file(path: Path) -> None:
    """Raise :class:`CheckpointError` for an empty, truncated or corrupted (CRC) file."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r}: no such file")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {str(path)!r}: the file is empty")
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:1] != b"\x80" and head[:4] != _ZIP_MAGIC:  # neither a pickle nor torch's zip
        kind = next((k for magic, k in _OTHER_FILES if head.startswith(magic)), None)
        if kind is None and all(32 <= b < 127 or b in (9, 10, 13) for b in head):
            kind = "a text file"
        raise CheckpointError(
            f"checkpoint {str(path)!r}: not a PyTorch checkpoint"
            + (f" (it is {kind})" if kind else " (not torch.save's format)")
        )
    if head[:4] != _ZIP_MAGIC:
        return  # a legacy pickle file: torch.load decides
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()  # reads every member and checks its CRC-32
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise CheckpointError(
            f"checkpoint {str(path)!r}: truncated or corrupted ({exc}); use another checkpoint"
        ) from None
    if bad is not None:
        raise CheckpointError(
            f"checkpoint {str(path)!r}: corrupted (CRC mismatch in {bad!r}); use another checkpoint"
        )


def _weights(ckpt: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for key in ("model", "state_dict"):
        if isinstance(ckpt.get(key), Mapping):
            return ckpt[key]
    if ckpt and all(isinstance(v, torch.Tensor) for v in ckpt.values()):
        return ckpt  # a bare state dict
    return None


def load_checkpoint(
    path_or_ckpt: str | os.PathLike | Mapping[str, Any], map_location: Any = "cpu"
) -> dict[str, Any]:
    """Verify and read a checkpoint with ``torch.load(weights_only=True)`` (no pickled code runs).

    A bare ``state_dict`` file (or ``{"state_dict": ...}``) is accepted too and wrapped as
    ``{"model": state_dict}``, and so is a folder of ``config.json`` + ``model.safetensors``
    (:mod:`nlnet.engine.checkpoint.pretrained`).

    Raises:
        CheckpointError: missing, empty, truncated, corrupted, not a PyTorch file, holding
            pickled code, or holding no weights; the message names the file.
    """
    if isinstance(path_or_ckpt, Mapping):
        return dict(path_or_ckpt)
    path = Path(path_or_ckpt)
    from nlnet.engine.checkpoint.pretrained import is_pretrained_dir, read_pretrained

    if is_pretrained_dir(path):  # config.json + model.safetensors (save_pretrained)
        return read_pretrained(path)
    _verify_file(path)
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # pickle/zip/torch errors: all mean "not a usable checkpoint"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if "weights_only" in str(exc) or "Weights only load failed" in str(exc):
            why = "it contains pickled code, which nlnet never runs (weights_only loading)"
        else:
            why = f"not a PyTorch checkpoint ({first})"
        raise CheckpointError(f"checkpoint {str(path)!r}: {why}") from None
    if not isinstance(ckpt, Mapping):
        raise CheckpointError(
            f"checkpoint {str(path)!r}: expected a dict of weights, got {type(ckpt).__name__}"
        )
    weights = _weights(ckpt)
    if weights is None or not weights:
        raise CheckpointError(f"checkpoint {str(path)!r}: holds no model weights")
    if ckpt.get("format") != FORMAT:
        return {**{k: v for k, v in ckpt.items() if k != "state_dict"}, "model": dict(weights)}
    return dict(ckpt)
