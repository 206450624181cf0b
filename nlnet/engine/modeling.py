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
from nlnet.engine.checkpoint.file_io import load_checkpoint, unwrap_model
from nlnet.engine.checkpoint.model_loading import (
    USER_MODEL_PREFIX,
    CheckpointMismatchError,
    load_backbone,
    takes_dropout,
)
from nlnet.engine.runlog import say
from nlnet.models.inflate import inflate_temporal_kernels
from nlnet.models.loading import load_partial

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


def init_state(cfg: Any) -> dict[str, Any] | None:
    """The file ``model.init`` names, read (``{"model": state, ...}``: an nlnet checkpoint, a
    ``save_pretrained`` folder or a bare state dict); ``None`` for a torchvision weights name
    and for the released Caffe2 ``.pkl``, which ``create_model(weights=)`` reads."""
    from nlnet.engine.config.files import looks_like_path

    source, _ = init_source(cfg)
    if not source or str(source).endswith(".pkl") or not looks_like_path(str(source)):
        return None
    return load_checkpoint(source)


def _of_nlnet(ckpt: Mapping[str, Any]) -> bool:
    """Written by nlnet (a checkpoint or a ``save_pretrained`` folder): this model's layout."""
    from nlnet.engine.checkpoint.file_io import FORMAT

    return ckpt.get("format") == FORMAT or "model_name" in ckpt


def build_model(cfg: Any) -> nn.Module:
    """``create_model(cfg.model.name, num_classes, dropout, **overrides)`` started from
    ``model.init``: a checkpoint of nlnet (or any file with ``reset_head``) through
    :func:`init_from_pretrained`, any other source (torchvision weights, a file of weights in
    torchvision's or the model's layout) through ``create_model(weights=)``."""
    from nlnet.models.registry import create_model

    source, reset = init_source(cfg)
    ckpt = init_state(cfg)
    own = ckpt is not None and (reset or _of_nlnet(ckpt))
    model = create_model(
        cfg.model.name,
        num_classes=cfg.model.num_classes,
        weights=None if own else source,
        **model_options(cfg),
    )
    if own:
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


def input_channels_from_data(cfg: Any, task: Any, dataset: Any, val_dataset: Any = None) -> Any:
    """``cfg`` with ``model.overrides.in_channels`` from the data when the task can tell
    (``task.in_channels(dataset)``: segmentation images and volumes) and the registered model
    takes another count by default, as ``model.num_classes`` comes from the classes; an
    explicit ``in_channels`` that the data contradicts, or a validation set of other channels,
    is one line naming the key."""
    from nlnet.engine.config import replace as replace_config
    from nlnet.engine.errors import DataError
    from nlnet.models.registry import model_facts

    probe = getattr(task, "in_channels", None)
    have = probe(dataset) if probe is not None and dataset is not None else None
    if have is None:
        return cfg
    val = probe(val_dataset) if val_dataset is not None else None
    if val is not None and val != have:
        raise DataError(
            f"data.root: the validation data has {val} channel(s) but the training data "
            f"{have}; give both splits the same modalities"
        )
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


def head_names(cfg: Any, model: nn.Module | None = None) -> tuple[str, ...]:
    """The classifier's parameter prefixes: ``model.head_names`` if given, else the model's own
    (``ModelCfg.classifier`` in the registry); for a network of one's own (``model``), the
    module its ``get_classifier()`` returns (timm's convention), else its last ``nn.Linear``;
    ``("fc",)`` when none is known."""
    if cfg.model.head_names:
        return tuple(cfg.model.head_names)
    from nlnet.models.model_cfg import DEFAULT_CLASSIFIER
    from nlnet.models.registry import model_facts

    try:
        return model_facts(cfg.model.name).classifier
    except ValueError:
        pass
    found = None
    if model is not None:
        found = classifier_name(unwrap_model(model), cfg.model.num_classes)
    return (found,) if found else DEFAULT_CLASSIFIER


def classifier_name(model: nn.Module, num_classes: int | None = None) -> str | None:
    """The path of a network's classifier: the module ``model.get_classifier()`` returns, else
    the last ``nn.Linear`` with ``num_classes`` outputs, else the last ``nn.Linear`` it
    registers (``None``: none)."""
    get = getattr(model, "get_classifier", None)
    head = get() if callable(get) else None
    names = {id(m): n for n, m in model.named_modules()}
    if isinstance(head, nn.Module) and names.get(id(head)):
        return names[id(head)]
    linear = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    fits = [n for n, m in linear if m.out_features == num_classes]
    return fits[-1] if fits else linear[-1][0] if linear else None


def init_from_pretrained(model: nn.Module, cfg: Any, ckpt: Mapping[str, Any] | None = None) -> None:
    """Start ``model`` from the file of ``model.init`` (``ckpt``: already read): every tensor
    but the classifier, which stays fresh where its size differs or with ``reset_head``
    (:func:`nlnet.models.loading.load_partial`), a C2D's ``1 x k x k`` kernel inflated where
    the model has a temporal one (:func:`nlnet.models.inflate.inflate_temporal_kernels`); nothing without ``model.init`` or for a
    weights name, which ``create_model`` applies when it builds the model (a network passed to
    ``train(model=...)`` is used as it is)."""
    source, reset = init_source(cfg)
    if not source:
        return
    ckpt = ckpt if ckpt is not None else init_state(cfg)
    if ckpt is None:  # a weights name: create_model applied it (a network passed in is as given)
        return
    state, inflated = inflate_temporal_kernels(ckpt["model"], unwrap_model(model))
    if inflated:  # a C2D's 1 x k x k kernels where this model has t x k x k ones (Sec. 4)
        say(f"model.init: {len(inflated)} kernel(s) inflated in time, e.g. {inflated[0]}")
        ckpt = {**ckpt, "model": state}
    heads = head_names(cfg, model)
    if reset:
        if heads != head_names(cfg):  # found on a network of one's own: say which
            say(f"model.init: reset_head keeps {', '.join(heads)} fresh (model.head_names "
                "names another classifier)")  # fmt: skip
        load_backbone(model, ckpt, exclude=heads)
        return
    try:
        load_partial(unwrap_model(model), ckpt["model"], heads, what=f"model.init={source!r}")
    except ValueError as exc:
        raise CheckpointMismatchError(
            f"{exc}; outside the classifier ({', '.join(heads)}) the weights must fit"
        ) from None


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


def pretrained_keys(cfg: Any, model: nn.Module | None = None) -> set[str]:
    """State-dict keys that the file of ``model.init`` initialises (empty without one, or for a
    weights name); ``model``: the network, whose classifier :func:`head_names` finds."""
    ckpt = init_state(cfg)
    if ckpt is None:
        return set()
    keys = set(ckpt["model"])
    if init_source(cfg)[1]:
        heads = head_names(cfg, model)
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


def to_channels_last(model: nn.Module) -> nn.Module:
    """Every 5D weight (3D convolutions) in ``torch.channels_last_3d`` and every 4D one in
    ``torch.channels_last`` (in place; a model may mix both); activations follow the weights."""
    formats = {4: torch.channels_last, 5: torch.channels_last_3d}
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() in formats:
                p.data = p.data.contiguous(memory_format=formats[p.dim()])
    return model


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
    blocks initialised from ``model.init`` freeze too) or synchronised (``train.sync_bn``); the
    speed options ``train.channels_last``, ``fold_frozen_bn`` and ``subsample_1x1`` applied.
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
        to_channels_last(model)
    if tc.freeze or tc.freeze_bn:
        trained = trained_non_local(model, pretrained_keys(cfg, model))
        if tc.freeze:
            freeze_parameters(model, tc.freeze, trained)
        if tc.freeze_bn:
            freeze_batchnorm(model, trained)
        if tc.fold_frozen_bn:
            from nlnet.engine.folding import fold_frozen_batchnorm

            fold_frozen_batchnorm(model)
    elif tc.sync_bn:
        model = du.convert_sync_batchnorm(model, device)
    if tc.subsample_1x1:
        from nlnet.engine.subsampling import subsample_strided_pointwise

        subsample_strided_pointwise(model)
    return model
