"""Checkpoints: atomic writes, verified safe loading, exact-resume state, checkpoint -> model.

A checkpoint is a plain dictionary that ``torch.load(..., weights_only=True)`` can read, so
loading one never executes pickled code.  It always says how to rebuild the network and how to
feed it (format version 2)::

    {
        "format": "nlnet-checkpoint", "version": 2,
        "model_name": "c2d_r50_nl5", "num_classes": 400, "class_names": [...] | None,
        "model_options": {...create_model keyword arguments (dropout, overrides)...},
        "preprocessing": {"version": 2, "kind": "clip", "mean": [...], "std": [...],
                          "num_frames": 32, "stride": 2, "size": 256, "crop": 224, ...},
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

or set ``model.init={from: PATH, reset_head: true}`` in a config.

The one way from a checkpoint to a network is :func:`build_model_from_checkpoint` (behind
:func:`nlnet.load_model`, ``nlnet eval``, ``predict``, ``visualize``, ``export`` and ``cost``);
:func:`checkpoint_info` gives its class names and preprocessing.  Loading verifies the file first (:func:`load_checkpoint`): an empty, truncated,
corrupted (zip CRC), foreign or weight-less file is a :class:`CheckpointError` naming the file.

Saving and verified loading are in :mod:`nlnet.engine.checkpoint.file_io`, the generator states in
:mod:`nlnet.engine.checkpoint.rng`; this module turns a checkpoint into a model (all names
importable from :mod:`nlnet.engine.checkpoint`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from nlnet.data.preprocessing import Preprocessing
from nlnet.engine.checkpoint.file_io import load_checkpoint, unwrap_model
from nlnet.engine.errors import CheckpointError, UserError
from nlnet.models.loading import LoadReport, load_partial

__all__ = [
    "USER_MODEL_PREFIX",
    "check_rebuildable",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointMismatchError",
    "checkpoint_info",
    "build_model_from_checkpoint",
    "check_compatible",
    "load_model_weights",
    "load_backbone",
]


#: A checkpoint's ``model_name`` for a network the registry does not build (``train(cfg,
#: model=...)`` with a module of the user's own): ``user:<module>.<class>``.
USER_MODEL_PREFIX = "user:"


class CheckpointMismatchError(UserError, ValueError):
    """The checkpoint was written for another architecture or number of classes."""


def takes_dropout(model_name: str) -> bool:
    """Whether ``create_model(model_name)`` takes ``train.dropout``: a fact of the model
    (``ModelCfg.takes_dropout``; never the dense models of ``model_cfg.DENSE_TASKS``); an
    unregistered name: yes, as before."""
    from nlnet.models.registry import get_model_entry

    try:
        entry = get_model_entry(model_name)
    except ValueError:  # not registered: the caller passes its own network
        return True
    return entry.default_cfg.takes_dropout


@dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint says about its network: how to build it and how to feed it.

    Attributes:
        model_name: registry name.
        num_classes: classifier width.
        model_options: ``create_model`` keyword arguments besides ``num_classes``.
        class_names: output class names (``class_<i>`` when none were stored).
        preprocessing: the test-time record (:class:`~nlnet.data.preprocessing.Preprocessing`:
            clip, image, volume, super-resolution or boxes); ``None`` when the checkpoint does
            not say (a bare state dict).
        multi_label: per-category sigmoid scores (Section 5.2) instead of softmax.
    """

    model_name: str
    num_classes: int
    model_options: dict[str, Any] = field(default_factory=dict)
    class_names: list[str] = field(default_factory=list)
    preprocessing: Preprocessing | None = None
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
    stored = dict(ckpt.get("preprocessing") or {})
    if not stored and (cfg.get("data") is not None or extra):  # version 1
        from nlnet.data.video.config import VideoDataConfig

        data = {k: v for k, v in (cfg.get("data") or {}).items() if not k.startswith("test_c")}
        stored = VideoDataConfig.from_mapping(data).preprocessing().to_dict()
        stored.update({k: extra[k] for k in ("mean", "std", "num_frames") if k in extra})
    try:
        prep = Preprocessing.from_dict(stored)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{where}: its preprocessing: {exc}") from None
    n = int(ckpt.get("num_classes") or 0)
    names = list(ckpt.get("class_names") or [f"class_{i}" for i in range(n)])
    loss = (cfg.get("train") or {}).get("loss", "ce")
    return CheckpointInfo(str(name), n, dict(options), names, prep, loss == "bce")


def check_rebuildable(ckpt: Mapping[str, Any], source: Any = None) -> None:
    """Raise :class:`CheckpointError` (one line) for a checkpoint of a network of the user's
    own class (``model_name`` ``user:<module>.<class>``), which nlnet cannot rebuild."""
    name = str(ckpt.get("model_name") or "")
    if name.startswith(USER_MODEL_PREFIX):
        cls = name.removeprefix(USER_MODEL_PREFIX)
        where = "checkpoint" if source is None or isinstance(source, Mapping) else (
            f"checkpoint {source!s}")  # fmt: skip
        raise CheckpointError(
            f"{where} holds a network of your own class {cls} (trained with train(cfg, "
            "model=...)), which nlnet cannot rebuild: build it and pass it, "
            "nlnet.load_model(path, model=YourNet(...))"
        )


def build_model_from_checkpoint(
    checkpoint: str | os.PathLike | Mapping[str, Any], device: str | torch.device = "cpu"
) -> nn.Module:
    """Build the network a checkpoint was trained as and load its weights (eval mode).

    ``create_model(name, num_classes, **model_options)`` followed by a strict weight load: the
    engine's one way from a checkpoint to a bare model, behind the public
    :func:`nlnet.load_model` (which adds the class names and preprocessing) and ``nlnet
    eval``/``export``.
    """
    from nlnet.models.registry import create_model

    ckpt = load_checkpoint(checkpoint)
    check_rebuildable(ckpt, checkpoint)
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
        "option model.init={from: PATH, reset_head: true}"
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
    except RuntimeError as exc:  # PyTorch's lines after the first name the keys at fault
        detail = "; ".join(line.strip() for line in str(exc).splitlines()[1:] if line.strip())
        detail = detail if len(detail) <= 400 else detail[:400] + " ..."
        raise CheckpointMismatchError(
            f"checkpoint weights do not fit the model ({detail or str(exc)}); "
            "use load_backbone(model, ckpt, exclude=...) to load a backbone only"
        ) from None


def load_backbone(
    model: nn.Module,
    ckpt: str | os.PathLike | Mapping[str, Any],
    exclude: Iterable[str] | None = None,
) -> LoadReport:
    """Initialise ``model`` from a checkpoint of possibly another task, skipping the head.

    Every parameter/buffer whose name starts with one of ``exclude`` keeps its fresh value (so a
    400-class Kinetics model can initialise a 157-class Charades model, Section 5.2).  All other
    tensors must exist with the same shape, otherwise a :class:`CheckpointMismatchError` names
    them.

    Args:
        model: the network to initialise (DDP wrappers are unwrapped).
        ckpt: a checkpoint path or an already loaded checkpoint.
        exclude: parameter-name prefixes left untouched (the classifier); ``None``: ``fc``, the
            classifier of a network that is not registered (``model_cfg.DEFAULT_CLASSIFIER``).

    Returns:
        The :class:`~nlnet.models.loading.LoadReport` (``kept``: the excluded keys).
    """
    from nlnet.models.model_cfg import DEFAULT_CLASSIFIER

    exclude = tuple(DEFAULT_CLASSIFIER if exclude is None else exclude)
    target = unwrap_model(model)
    state = load_checkpoint(ckpt)["model"]

    def excluded(name: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in exclude)

    state = {k: v for k, v in state.items() if not excluded(k)}  # the head stays fresh
    try:
        return load_partial(target, state, exclude, what="checkpoint", extra_ok=True)
    except ValueError as exc:
        raise CheckpointMismatchError(
            f"load_backbone: {exc}; outside {exclude} the checkpoint must fit"
        ) from None
