"""The network of a run: built from ``cfg.model``, initialised, BatchNorm frozen if asked.

Frozen BN and non-local blocks (Section 5.1 fine-tunes the 128-frame models and Section 5.2 the
Charades models with "all BN layers frozen").  A *new* non-local block starts as the identity
because the BN after ``W_z`` has its scale ``gamma = 0`` (Section 3.3, Eq. 6: ``z = W_z y + x``);
a frozen BN never changes that ``gamma``, so such a block would stay the identity forever.
:func:`freeze_batchnorm` therefore keeps the norms of freshly inserted blocks trainable (and in
train mode) and says so, while a block that starts from trained weights (``model.init``
holds its keys, e.g. the 32-frame model initialising the 128-frame one) is frozen like every
other BN layer, as in the paper.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from nlnet.data.seeding import seed_all
from nlnet.engine import distributed as du
from nlnet.engine.checkpoint.file_io import load_checkpoint
from nlnet.engine.checkpoint.model_loading import (
    USER_MODEL_PREFIX,
    CheckpointMismatchError,
    load_backbone,
    load_model_weights,
    takes_dropout,
)

__all__ = [
    "USER_MODEL_PREFIX",
    "build_model",
    "build_train_model",
    "head_names",
    "model_options",
    "input_channels_from_data",
    "trained_model_name",
    "init_from_pretrained",
    "freeze_batchnorm",
    "freeze_parameters",
    "set_train_mode",
    "non_local_norms",
    "trained_non_local",
    "pretrained_keys",
]


def model_options(cfg: Any) -> dict[str, Any]:
    """``create_model`` keyword arguments besides ``num_classes`` (stored in checkpoints);
    ``model.dropout`` is one of them except for dense models (:func:`takes_dropout`)."""
    kwargs = dict(cfg.model.overrides)
    if takes_dropout(cfg.model.name):
        kwargs.setdefault("dropout", cfg.model.dropout)
    return kwargs


def init_source(cfg: Any) -> tuple[str | None, bool]:
    """``model.init`` as ``(source, reset_head)`` (``(None, False)`` without one)."""
    init = cfg.model.init
    if isinstance(init, Mapping):
        return init.get("from"), bool(init.get("reset_head", False))
    return init, False


def init_checkpoint(cfg: Any) -> dict[str, Any] | None:
    """The checkpoint ``model.init`` names when it is one written by nlnet (``None`` for a
    torchvision weights name or a file of bare weights, which ``create_model(weights=)``
    reads)."""
    from nlnet.engine.checkpoint.file_io import FORMAT
    from nlnet.engine.config.loading import looks_like_path

    source, reset = init_source(cfg)
    if not source or not (looks_like_path(str(source)) or reset) or str(source).endswith(".pkl"):
        return None  # a weights name, or the released Caffe2 ImageNet ResNet
    ckpt = load_checkpoint(source)
    return ckpt if ckpt.get("format") == FORMAT or reset else None


def build_model(cfg: Any) -> nn.Module:
    """``create_model(cfg.model.name, num_classes, dropout, **overrides)`` started from
    ``model.init``: a checkpoint of nlnet through :func:`init_from_pretrained`, any other
    source (torchvision weights, a file of weights) through ``create_model(weights=)``."""
    from nlnet.models.registry import create_model

    ckpt = init_checkpoint(cfg)
    source, _ = init_source(cfg)
    model = create_model(
        cfg.model.name,
        num_classes=cfg.model.num_classes,
        weights=source if ckpt is None else None,
        **model_options(cfg),
    )
    if ckpt is not None:
        init_from_pretrained(model, cfg, ckpt)
    return model


def trained_model_name(cfg: Any, model: nn.Module) -> str:
    """The name a checkpoint records for ``model``: ``cfg.model.name`` when ``model`` is that
    registered model (the class and the state-dict keys and shapes that ``create_model`` gives
    with the config's options, built on the meta device), else ``user:<module>.<class>``, so
    that nothing rebuilds another network from the checkpoint."""
    from nlnet.models.registry import create_model

    ref = None
    for device in ("meta", "cpu"):  # the meta device first: no memory, no initialisation
        try:
            with torch.device(device):
                ref = create_model(cfg.model.name, num_classes=cfg.model.num_classes,
                                   **model_options(cfg))  # fmt: skip
            break
        except Exception:  # not registered, or the options do not build it
            continue
    if ref is not None and type(ref) is type(model):
        mine, theirs = model.state_dict(), ref.state_dict()
        if mine.keys() == theirs.keys() and all(
            tuple(mine[k].shape) == tuple(theirs[k].shape) for k in mine
        ):
            return cfg.model.name
    cls = type(model)
    return f"{USER_MODEL_PREFIX}{cls.__module__}.{cls.__qualname__}"


def input_channels_from_data(cfg: Any, task: Any, dataset: Any) -> Any:
    """``cfg`` with ``model.overrides.in_channels`` from the data when the task can tell
    (``task.in_channels(dataset)``: segmentation images and volumes) and the registered model
    takes another count by default, as ``model.num_classes`` comes from the classes; an
    explicit ``in_channels`` that the data contradicts is one line naming the key."""
    from nlnet.engine.config import replace as replace_config
    from nlnet.engine.errors import DataError
    from nlnet.models.registry import model_facts

    probe = getattr(task, "in_channels", None)
    have = probe(dataset) if probe is not None and dataset is not None else None
    if have is None:
        return cfg
    given = cfg.model.overrides.get("in_channels")
    if given is not None:
        if int(given) != have:
            raise DataError(
                f"model.overrides.in_channels={given} but the training data has {have} "
                f"channel(s); remove it (taken from the data) or set it to {have}"
            )
        return cfg
    try:
        default = model_facts(cfg.model.name).input_size[0]
    except (ValueError, IndexError):  # not registered (a network of your own): yours to set
        return cfg
    if default == have:
        return cfg
    return replace_config(cfg, **{"model.overrides": {**cfg.model.overrides, "in_channels": have}})


def head_names(cfg: Any) -> tuple[str, ...]:
    """The classifier's parameter prefixes: ``model.head_names`` if given, else the model's own
    (``ModelCfg.classifier`` in the registry); ``("fc",)`` for a network not registered."""
    if cfg.model.head_names:
        return tuple(cfg.model.head_names)
    from nlnet.models.model_cfg import DEFAULT_CLASSIFIER
    from nlnet.models.registry import model_facts

    try:
        return model_facts(cfg.model.name).classifier
    except ValueError:
        return DEFAULT_CLASSIFIER


def init_from_pretrained(model: nn.Module, cfg: Any, ckpt: Mapping[str, Any] | None = None) -> None:
    """Start a freshly built model from the checkpoint of ``model.init`` (``ckpt``: already
    read) with its classifier kept fresh under ``reset_head``; nothing without one."""
    ckpt = ckpt if ckpt is not None else init_checkpoint(cfg)
    if ckpt is None:
        return
    source, reset = init_source(cfg)
    heads = head_names(cfg)
    if reset:
        load_backbone(model, ckpt, exclude=heads)
        return
    try:
        load_model_weights(model, ckpt)
    except CheckpointMismatchError as exc:
        raise CheckpointMismatchError(
            f"model.init={source!r}: {exc}; set model.init={{from: {source}, reset_head: true}} "
            f"to keep a fresh classifier ({', '.join(heads)})"
        ) from exc


def non_local_norms(model: nn.Module, skip: Iterable[str] = ()) -> set[int]:
    """``id``s of the normalisation layers inside non-local blocks (except blocks in ``skip``)."""
    from nlnet.layers.nonlocal_block import NonLocalNd

    skip = set(skip)
    return {
        id(m)
        for path, block in model.named_modules()
        if isinstance(block, NonLocalNd) and path not in skip
        for m in block.modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm)
    }


def trained_non_local(model: nn.Module, keys: Iterable[str]) -> set[str]:
    """Paths of the non-local blocks whose every weight is among ``keys`` (a loaded state dict):
    blocks that start from trained weights rather than from their identity initialisation."""
    from nlnet.layers.nonlocal_block import NonLocalNd

    keys = set(keys)
    out = set()
    for path, block in model.named_modules():
        if isinstance(block, NonLocalNd):
            own = [f"{path}.{k}" for k in block.state_dict()]
            if own and all(k in keys for k in own):
                out.add(path)
    return out


def pretrained_keys(cfg: Any) -> set[str]:
    """State-dict keys that the checkpoint of ``model.init`` initialises (empty without one)."""
    ckpt = init_checkpoint(cfg)
    if ckpt is None:
        return set()
    keys = set(ckpt["model"])
    if init_source(cfg)[1]:
        heads = head_names(cfg)
        keys = {k for k in keys if not any(k == h or k.startswith(h + ".") for h in heads)}
    return keys


def freeze_batchnorm(model: nn.Module, trained: Iterable[str] = ()) -> int:
    """Freeze BatchNorm layers: eval mode (running statistics) and no gradient for their
    scale/shift (Sections 5.1, 5.2).  Returns the number frozen.

    Args:
        model: the network.
        trained: paths of non-local blocks that start from trained weights
            (:func:`trained_non_local`); their norms are frozen too. The norms of the other
            (fresh) blocks stay trainable: their ``gamma = 0`` start would otherwise keep them
            the identity forever; a warning says how many were kept.
    """
    keep = non_local_norms(model, skip=trained)
    n = 0
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and id(m) not in keep:
            m.eval()
            for p in m.parameters(recurse=False):
                p.requires_grad_(False)
            n += 1
    if keep:
        warnings.warn(
            f"train.freeze_bn: {len(keep)} BatchNorm layer(s) inside non-local blocks stay "
            "trainable (blocks not initialised from model.init start as the identity with "
            "BN gamma = 0, and would stay so if frozen)",
            RuntimeWarning,
            stacklevel=2,
        )
    return n


def freeze_parameters(
    model: nn.Module, prefixes: Iterable[str], trained: Iterable[str] = ()
) -> int:
    """``requires_grad=False`` on the parameters whose names start with one of ``prefixes``
    (``train.freeze``), except those of non-local blocks not in ``trained``
    (:func:`trained_non_local`): a fresh block starts as the identity and must learn. The
    BatchNorm layers among them keep normalising as in training mode (``train.freeze_bn`` fixes
    their statistics too). Returns the number of tensors frozen.

    Raises:
        UserError: a prefix that names no parameter of the model.
    """
    from nlnet.engine.errors import UserError
    from nlnet.layers.nonlocal_block import NonLocalNd

    prefixes, trained = tuple(prefixes), set(trained)
    names = [n for n, _ in model.named_parameters()]
    unknown = [p for p in prefixes if not any(n.startswith(p) for n in names)]
    if unknown:
        raise UserError(f"train.freeze: {unknown} name no parameter of the model (e.g. {names[0]})")
    fresh = tuple(f"{path}." for path, m in model.named_modules()
                  if isinstance(m, NonLocalNd) and path not in trained)  # fmt: skip
    frozen = [p for n, p in model.named_parameters()
              if n.startswith(prefixes) and not n.startswith(fresh)]  # fmt: skip
    for p in frozen:
        p.requires_grad_(False)
    return len(frozen)


def set_train_mode(model: nn.Module, freeze_bn: bool = False) -> None:
    """``model.train()``, keeping the BatchNorm layers frozen by :func:`freeze_batchnorm` (those
    without trainable scale/shift) in eval mode."""
    model.train()
    if freeze_bn:
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and not any(
                p.requires_grad for p in m.parameters(recurse=False)
            ):
                m.eval()


def channels_last_format(model: nn.Module) -> torch.memory_format:
    """``torch.channels_last_3d`` for a model with 3D convolutions (a video model), else
    ``torch.channels_last``."""
    has_3d = any(isinstance(m, nn.Conv3d) for m in model.modules())
    return torch.channels_last_3d if has_3d else torch.channels_last


def compiled_for_training(model: nn.Module, backend: str) -> nn.Module:
    """``model`` (the DDP wrapper included) through ``torch.compile(backend=...)`` for the
    training forward; ``backend="none"``: as it is. The checkpoints keep the plain model."""
    if backend == "none":
        return model
    return torch.compile(model, backend=backend)


def build_train_model(cfg: Any, device: torch.device, model: nn.Module | None = None) -> nn.Module:
    """The network of a training run on ``device``: ``cfg.model`` (or ``model``, initialised
    from ``model.init``) built after seeding with ``train.seed`` (the same initial weights
    on every rank); BatchNorm frozen (``train.freeze_bn``, Sec. 5.1 of Wang et al., CVPR 2018;
    blocks initialised from ``model.init`` freeze too) or synchronised (``train.sync_bn``).
    """
    tc = cfg.train
    if tc.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    elif device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed clip sizes: let cuDNN pick kernels
    seed_all(tc.seed)
    if model is None:
        model = build_model(cfg)
    else:
        init_from_pretrained(model, cfg)
    model.to(device)
    if tc.channels_last:
        model.to(memory_format=channels_last_format(model))
    if tc.freeze or tc.freeze_bn:
        trained = trained_non_local(model, pretrained_keys(cfg))
        if tc.freeze:
            freeze_parameters(model, tc.freeze, trained)
        if tc.freeze_bn:
            freeze_batchnorm(model, trained)
    elif tc.sync_bn:
        model = du.convert_sync_batchnorm(model, device)
    return model
