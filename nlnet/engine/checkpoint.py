"""Checkpoints: atomic writes, safe loading, exact-resume state and backbone loading.

A checkpoint is a plain dictionary that ``torch.load(..., weights_only=True)`` can read, so
loading one never executes pickled code::

    {
        "format": "nlnet-checkpoint", "version": 1,
        "model_name": "c2d_r50_nl5", "num_classes": 400, "class_names": [...] | None,
        "model": state_dict,
        "optimizer": ..., "scheduler": ..., "scaler": ...,     # optional (training state)
        "epoch": int, "iteration": int, "batch_in_epoch": int,
        "rng": {"python": [...], "numpy": {...}, "torch": ByteTensor, "cuda": [ByteTensor, ...]},
        "config": {...resolved config as plain dicts...},
        "extra": {...},
    }

A checkpoint of another architecture or class count is refused with a
:class:`CheckpointMismatchError` by :func:`load_training_state`; to use a trained network as the
initialisation of another task (Section 5.2 of "Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971) fine-tunes the
Kinetics model on Charades), call :func:`load_backbone`, which skips the classifier::

    model = create_model("i3d_r101_nl5", num_classes=157)
    load_backbone(model, "runs/kinetics/final.pt", exclude=("fc",))

or set ``model.pretrained=PATH model.reset_head=true`` in a config.
"""

from __future__ import annotations

import os
import random
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = [
    "CheckpointMismatchError",
    "save_checkpoint",
    "load_checkpoint",
    "unwrap_model",
    "get_rng_state",
    "set_rng_state",
    "check_compatible",
    "load_training_state",
    "load_model_weights",
    "load_backbone",
]

FORMAT = "nlnet-checkpoint"
VERSION = 1


class CheckpointMismatchError(ValueError):
    """The checkpoint was written for another architecture or number of classes."""


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
# RNG state as tensors / plain containers (weights_only-loadable)
# --------------------------------------------------------------------------------------------
def get_rng_state() -> dict[str, Any]:
    """Capture the python, numpy, torch (CPU) and CUDA generators as plain containers."""
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": [version, torch.tensor(internal, dtype=torch.int64), gauss],
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore generators captured by :func:`get_rng_state`."""
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((int(version), tuple(int(v) for v in internal.tolist()), gauss))
    if "numpy" in state:
        s = state["numpy"]
        np.random.set_state(
            {
                "bit_generator": s["bit_generator"],
                "state": {"key": s["key"].numpy().astype(np.uint32), "pos": int(s["pos"])},
                "has_gauss": int(s["has_gauss"]),
                "gauss": float(s["gauss"]),
            }
        )
    if "torch" in state:
        torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        cuda_states = state["cuda"]
        if len(cuda_states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all([s.cpu() for s in cuda_states])


# --------------------------------------------------------------------------------------------
# save / load
# --------------------------------------------------------------------------------------------
def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


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
    rng_state: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write a checkpoint atomically: temporary file in the same directory, fsync, rename.

    A reader never sees a half-written file: either the previous checkpoint or the new one.

    Args:
        path: destination file (``.pt``).
        model: the network (DDP wrappers are unwrapped).
        model_name: registry name, checked when resuming.
        num_classes: classifier width, checked when resuming.
        optimizer, scheduler, scaler: training state (optional).
        epoch, iteration, batch_in_epoch: position of the run (iteration = optimizer steps done;
            batch_in_epoch = mini-batches of the current epoch already consumed).
        config: the resolved configuration as plain dicts.
        class_names: names of the output classes (used by ``nlnet predict``).
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
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
        raise
    _fsync_dir(path.parent)
    return path


def load_checkpoint(
    path_or_ckpt: str | os.PathLike | Mapping[str, Any], map_location: Any = "cpu"
) -> dict[str, Any]:
    """Read a checkpoint with ``torch.load(weights_only=True)`` (no pickled code runs).

    A bare ``state_dict`` file is accepted too and wrapped as ``{"model": state_dict}``.
    """
    if isinstance(path_or_ckpt, Mapping):
        return dict(path_or_ckpt)
    path = Path(path_or_ckpt)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint: no such file {str(path)!r}")
    ckpt = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(ckpt, Mapping):
        raise ValueError(f"checkpoint {str(path)!r}: expected a dict, got {type(ckpt).__name__}")
    if ckpt.get("format") != FORMAT:
        if "model" in ckpt and isinstance(ckpt["model"], Mapping):
            return dict(ckpt)
        if "state_dict" in ckpt and isinstance(ckpt["state_dict"], Mapping):
            return {"model": ckpt["state_dict"]}
        return {"model": dict(ckpt)}
    return dict(ckpt)


def check_compatible(ckpt: Mapping[str, Any], model_name: str, num_classes: int) -> None:
    """Raise :class:`CheckpointMismatchError` unless ``ckpt`` matches the architecture/classes."""
    saved_name = ckpt.get("model_name")
    saved_classes = ckpt.get("num_classes")
    hint = (
        "to initialise a different model or class count from it, use "
        "nlnet.engine.checkpoint.load_backbone(model, ckpt, exclude=('fc',)) or the config "
        "options model.pretrained=PATH model.reset_head=true"
    )
    if saved_name is not None and saved_name != model_name:
        raise CheckpointMismatchError(
            f"checkpoint is for model {saved_name!r}, not {model_name!r}; {hint}"
        )
    if saved_classes is not None and int(saved_classes) != int(num_classes):
        raise CheckpointMismatchError(
            f"checkpoint has {saved_classes} classes, the model has {num_classes}; {hint}"
        )


def load_model_weights(
    model: nn.Module, ckpt: Mapping[str, Any], model_name: str | None = None
) -> None:
    """Load the checkpoint's weights into ``model`` strictly (same architecture and classes)."""
    target = unwrap_model(model)
    if model_name is not None:
        fc_classes = ckpt.get("num_classes")
        check_compatible(ckpt, model_name, fc_classes if fc_classes is not None else 0)
    try:
        target.load_state_dict(ckpt["model"], strict=True)
    except RuntimeError as exc:
        raise CheckpointMismatchError(
            f"checkpoint weights do not fit the model ({str(exc).splitlines()[0]}); "
            "use load_backbone(model, ckpt, exclude=...) to load a backbone only"
        ) from exc


def load_training_state(
    ckpt: Mapping[str, Any],
    *,
    model: nn.Module,
    model_name: str,
    num_classes: int,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    scaler: Any = None,
    restore_rng: bool = True,
) -> dict[str, int]:
    """Restore model, optimizer, scheduler, scaler and RNG from ``ckpt`` for ``--resume``.

    Returns:
        ``{"epoch", "iteration", "batch_in_epoch"}`` of the checkpoint.
    """
    check_compatible(ckpt, model_name, num_classes)
    load_model_weights(model, ckpt)
    if optimizer is not None and "optimizer" in ckpt:
        optimizer.load_state_dict(ckpt["optimizer"])
    if scheduler is not None and "scheduler" in ckpt:
        scheduler.load_state_dict(ckpt["scheduler"])
    if scaler is not None and "scaler" in ckpt and ckpt["scaler"]:
        scaler.load_state_dict(ckpt["scaler"])
    if restore_rng and "rng" in ckpt:
        set_rng_state(ckpt["rng"])
    return {
        "epoch": int(ckpt.get("epoch", 0)),
        "iteration": int(ckpt.get("iteration", 0)),
        "batch_in_epoch": int(ckpt.get("batch_in_epoch", 0)),
    }


def load_backbone(
    model: nn.Module,
    ckpt: str | os.PathLike | Mapping[str, Any],
    exclude: Iterable[str] = ("fc",),
) -> dict[str, list[str]]:
    """Initialise ``model`` from a checkpoint of possibly another task, skipping the head.

    Every parameter/buffer whose name starts with one of ``exclude`` keeps its fresh value (so a
    400-class Kinetics model can initialise a 157-class Charades model, Section 5.2).  All other
    tensors must exist with the same shape, otherwise a :class:`CheckpointMismatchError` names
    them.

    Args:
        model: the network to initialise (DDP wrappers are unwrapped).
        ckpt: a checkpoint path or an already loaded checkpoint.
        exclude: parameter-name prefixes left untouched (the classifier).

    Returns:
        ``{"loaded": [...], "skipped": [...]}`` parameter names.
    """
    exclude = tuple(exclude)
    target = unwrap_model(model)
    state = load_checkpoint(ckpt)["model"]

    def excluded(name: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in exclude)

    own = target.state_dict()
    loaded, skipped, problems = [], [], []
    new_state = {}
    for name, value in own.items():
        if excluded(name):
            skipped.append(name)
            continue
        if name not in state:
            problems.append(f"missing {name}")
            continue
        if tuple(state[name].shape) != tuple(value.shape):
            problems.append(
                f"{name}: checkpoint {tuple(state[name].shape)} vs model {tuple(value.shape)}"
            )
            continue
        new_state[name] = state[name]
        loaded.append(name)
    if problems:
        shown = "; ".join(problems[:5]) + (
            f"; ... ({len(problems)} in all)" if len(problems) > 5 else ""
        )
        raise CheckpointMismatchError(
            f"load_backbone: the checkpoint does not fit the model outside {exclude}: {shown}"
        )
    target.load_state_dict(new_state, strict=False)
    return {"loaded": loaded, "skipped": skipped}
