"""Checkpoints: atomic writes, verified safe loading, exact-resume state, checkpoint -> model.

A checkpoint is a plain dictionary that ``torch.load(..., weights_only=True)`` can read, so
loading one never executes pickled code.  It always says how to rebuild the network and how to
feed it (format version 2)::

    {
        "format": "nlnet-checkpoint", "version": 2,
        "model_name": "c2d_r50_nl5", "num_classes": 400, "class_names": [...] | None,
        "model_options": {...create_model keyword arguments (dropout, overrides)...},
        "preprocessing": {"mean": [...], "std": [...], "num_frames": 32, "stride": 2,
                          "size": 256, "crop": 224 | None},
        "model": state_dict,
        "optimizer": ..., "scheduler": ..., "scaler": ...,     # optional (training state)
        "epoch": int, "iteration": int, "batch_in_epoch": int,
        "rng": {"python": [...], "numpy": {...}, "torch": ByteTensor, "cuda": [ByteTensor, ...]},
        "config": {...resolved config as plain dicts...},
        "extra": {...},
    }

A checkpoint of another architecture or class count is refused with a
:class:`CheckpointMismatchError` by :func:`check_compatible`; to use a trained network as the
initialisation of another task (Section 5.2 of "Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971) fine-tunes the
Kinetics model on Charades), call :func:`load_backbone`, which skips the classifier::

    model = create_model("i3d_r101_nl5", num_classes=157)
    load_backbone(model, "runs/kinetics/final.pt", exclude=("fc",))

or set ``model.pretrained=PATH model.reset_head=true`` in a config.

The one way from a checkpoint to a network is :func:`load_model` (used by ``nlnet eval``,
``predict``, ``visualize`` and ``cost``); :func:`checkpoint_info` gives its class names and
preprocessing.  Loading verifies the file first (:func:`load_checkpoint`): an empty, truncated,
corrupted (zip CRC), foreign or weight-less file is a :class:`CheckpointError` naming the file.
"""

from __future__ import annotations

import os
import random
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from nlnet.engine.errors import CheckpointError, UserError

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointMismatchError",
    "checkpoint_info",
    "clean_orphan_temp_files",
    "load_model",
    "save_checkpoint",
    "load_checkpoint",
    "unwrap_model",
    "get_rng_state",
    "set_rng_state",
    "check_compatible",
    "load_model_weights",
    "load_backbone",
]

FORMAT = "nlnet-checkpoint"
VERSION = 2


class CheckpointMismatchError(UserError, ValueError):
    """The checkpoint was written for another architecture or number of classes."""


#: Registry ``task``\ s whose models have no dropout before a classifier (``model.dropout`` is
#: not passed to them): per-pixel and R-CNN heads.
DENSE_TASKS = (
    "segmentation",
    "instance_segmentation",
    "keypoints",
    "object_detection",
    "super_resolution",
)


def takes_dropout(model_name: str) -> bool:
    """Whether ``create_model(model_name)`` takes ``train.dropout``: a fact of the model
    (``ModelFacts.takes_dropout``; never the dense models of :data:`DENSE_TASKS`); an
    unregistered name: yes, as before."""
    from nlnet.models.registry import get_model_entry

    try:
        entry = get_model_entry(model_name)
    except ValueError:  # not registered: the caller passes its own network
        return True
    return entry.default_cfg.get("task") not in DENSE_TASKS and entry.facts.takes_dropout


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


def _user_file_mode() -> int:
    """``0o666`` minus the process umask: the mode ``open()`` gives a new file."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


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
    preprocessing: Mapping[str, Any] | None = None,
    rng_state: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write a checkpoint atomically: temporary file in the same directory, fsync, rename.

    A reader never sees a half-written file: either the previous checkpoint or the new one.  The
    file gets the mode of any new file of the user (``0o666 & ~umask``).

    Args:
        path: destination file (``.pt``).
        model: the network (DDP wrappers are unwrapped).
        model_name: registry name, checked when resuming and used by :func:`load_model`.
        num_classes: classifier width, checked when resuming.
        optimizer, scheduler, scaler: training state (optional).
        epoch, iteration, batch_in_epoch: position of the run (iteration = optimizer steps done;
            batch_in_epoch = mini-batches of the current epoch already consumed).
        config: the resolved configuration as plain dicts.
        class_names: names of the output classes (used by ``nlnet predict``).
        model_options: keyword arguments of ``create_model`` besides ``num_classes``.
        preprocessing: ``mean``, ``std``, ``num_frames``, ``stride``, ``size``, ``crop``.
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
        "preprocessing": dict(preprocessing or {}),
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
        os.fchmod(fd, _user_file_mode())  # mkstemp creates 0o600
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


_ZIP_MAGIC = b"PK\x03\x04"


def _verify_file(path: Path) -> None:
    """Raise :class:`CheckpointError` for an empty, truncated or corrupted (CRC) file."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r}: no such file")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {str(path)!r}: the file is empty")
    with open(path, "rb") as f:
        head = f.read(4)
    if head != _ZIP_MAGIC:
        return  # not torch's zip format: torch.load decides (legacy pickle files)
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
    ``{"model": state_dict}``.

    Raises:
        CheckpointError: missing, empty, truncated, corrupted, not a PyTorch file, holding
            pickled code, or holding no weights; the message names the file.
    """
    if isinstance(path_or_ckpt, Mapping):
        return dict(path_or_ckpt)
    path = Path(path_or_ckpt)
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


@dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint says about its network: how to build it and how to feed it.

    Attributes:
        model_name: registry name.
        num_classes: classifier width.
        model_options: ``create_model`` keyword arguments besides ``num_classes``.
        class_names: output class names (``class_<i>`` when none were stored).
        preprocessing: ``mean``, ``std`` (per channel, on [0, 1] pixels), ``num_frames``,
            ``stride``, ``size`` (shorter side at test time), ``crop`` (or ``None``), optionally
            ``channel_order`` (``"RGB"``, what nlnet's decoders give; imported models say so);
            empty when the checkpoint does not say (a bare state dict).
        multi_label: per-category sigmoid scores (Section 5.2) instead of softmax.
    """

    model_name: str
    num_classes: int
    model_options: dict[str, Any] = field(default_factory=dict)
    class_names: list[str] = field(default_factory=list)
    preprocessing: dict[str, Any] = field(default_factory=dict)
    multi_label: bool = False


def checkpoint_info(ckpt: str | os.PathLike | Mapping[str, Any]) -> CheckpointInfo:
    """Read the build options, class names and preprocessing of a checkpoint.

    Version-1 checkpoints (no ``model_options``/``preprocessing``) are read from their stored
    config (and from ``extra`` for the demo's).
    """
    where = f"checkpoint {str(ckpt)!r}" if not isinstance(ckpt, Mapping) else "checkpoint"
    ckpt = load_checkpoint(ckpt)
    name = ckpt.get("model_name")
    if not name:
        raise CheckpointError(f"{where}: no model name stored (not written by nlnet)")
    cfg = ckpt.get("config") or {}
    extra = ckpt.get("extra") or {}
    options = ckpt.get("model_options")
    if not options:  # version 1, or none stored (e.g. nlnet import-caffe2): from the config
        model_cfg = cfg.get("model") or {}
        options = dict(model_cfg.get("overrides") or {})
        # model.dropout; configs written before it moved kept it as train.dropout
        dropout = model_cfg.get("dropout", (cfg.get("train") or {}).get("dropout"))
        if dropout is not None and takes_dropout(name):
            options.setdefault("dropout", dropout)
        options.update(extra.get("model_overrides") or {})
    prep = dict(ckpt.get("preprocessing") or {})
    if not prep and (cfg.get("data") is not None or extra):  # version 1
        from nlnet.data.config import Preprocessing, VideoDataConfig

        data = {k: v for k, v in (cfg.get("data") or {}).items() if not k.startswith("test_c")}
        prep = Preprocessing.from_data(VideoDataConfig.from_mapping(data)).to_dict()
        prep.update({k: extra[k] for k in ("mean", "std", "num_frames") if k in extra})
    n = int(ckpt.get("num_classes") or 0)
    names = list(ckpt.get("class_names") or [f"class_{i}" for i in range(n)])
    loss = (cfg.get("train") or {}).get("loss", "ce")
    return CheckpointInfo(str(name), n, dict(options), names, prep, loss == "bce")


def load_model(
    checkpoint: str | os.PathLike | Mapping[str, Any], device: str | torch.device = "cpu"
) -> nn.Module:
    """Build the network a checkpoint was trained as and load its weights (eval mode).

    ``create_model(name, num_classes, **model_options)`` followed by a strict weight load: the
    one way from a checkpoint to a model (``nlnet eval``/``predict``/``visualize``/``cost``).
    """
    from nlnet.models.registry import create_model

    ckpt = load_checkpoint(checkpoint)
    info = checkpoint_info(ckpt)
    try:
        model = create_model(info.model_name, num_classes=info.num_classes, **info.model_options)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint {str(checkpoint)!r}: cannot rebuild model {info.model_name!r} ({exc})"
        ) from None
    load_model_weights(model, ckpt)
    return model.to(device).eval()


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
