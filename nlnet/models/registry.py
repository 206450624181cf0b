"""The model registry (timm style): ``register_model``, ``create_model``, ``list_models``.

Each architecture module registers its names itself, one decorated builder per name, next to
the architecture (``video/resnets.py``: C2D/I3D; ``image.py``: the COCO/guide ResNets and the
segmentation nets; ``vit.py``, ``swin.py``, ``video/transformer.py``, ``detection.py``,
``segmentation.py``), so every name can be found with ``grep``.  Importing :mod:`nlnet.models`
imports all of them; this module imports none.  Other packages register more models through
entry points (group :data:`ENTRY_POINT_GROUP`, ``"nlnet.models"``), read on the first lookup
(:func:`load_plugins`), declared in their own ``pyproject.toml``::

    [project.entry-points."nlnet.models"]
    my_models = "my_package.models"

Register a new model with its typed default config (:class:`~nlnet.models.model_cfg.ModelCfg`)::

    @register_model(default_cfg=ModelCfg(task="video_classification", num_classes=400,
                                         input_size=(3, 8, 112, 112)))
    def my_model(**kwargs) -> nn.Module:
        ...  # the docstring's first line is the description shown by ``nlnet models``
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib.metadata
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from nlnet.models.model_cfg import ModelCfg

__all__ = [
    "ENTRY_POINT_GROUP",
    "ModelEntry",
    "register_model",
    "create_model",
    "list_models",
    "find_models",
    "load_plugins",
    "name_matches",
    "get_model_entry",
    "model_facts",
]


@dataclass(frozen=True)
class ModelEntry:
    """One registered model: its builder, a one-line description and its default config
    (:class:`~nlnet.models.model_cfg.ModelCfg`)."""

    name: str
    builder: Callable[..., nn.Module]
    description: str
    default_cfg: ModelCfg

    @property
    def facts(self) -> ModelCfg:
        """The model's facts: the same object as :attr:`default_cfg` (one home, ModelCfg)."""
        return self.default_cfg


_REGISTRY: dict[str, ModelEntry] = {}

#: Entry-point group of the plugins: packages that register more models declare their module
#: under ``[project.entry-points."nlnet.models"]``.
ENTRY_POINT_GROUP = "nlnet.models"
_plugins_loaded = False


def load_plugins() -> None:
    """Import every module of the ``nlnet.models`` entry points once (their ``@register_model``
    calls run then); :func:`list_models` and :func:`get_model_entry` call it on first use.

    A plugin that fails to import is skipped with one warning naming it and the error, so one
    broken package does not hide every other model.
    """
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as exc:  # a third-party module: any error is its own
            warnings.warn(
                f"model plugin {ep.name!r} ({ep.value}, entry point group {ENTRY_POINT_GROUP!r}) "
                f"failed to load and registers no model: {type(exc).__name__}: {exc}",
                RuntimeWarning,
                stacklevel=2,
            )


def register_model(
    fn: Callable[..., nn.Module] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    default_cfg: ModelCfg | Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> Any:
    """Register a builder ``fn(**kwargs) -> nn.Module`` under ``name`` (default ``fn.__name__``).

    Used as ``@register_model(default_cfg=...)``: every name needs its
    :class:`~nlnet.models.model_cfg.ModelCfg` (a dict is converted; unknown keys are a
    ``TypeError``). The description defaults to the first paragraph of the builder's docstring.
    """

    def deco(f: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        if not callable(f):
            raise TypeError(f"register_model: expected a callable builder, got {f!r}")
        key = name or f.__name__
        if key in _REGISTRY and not overwrite:
            raise ValueError(f"register_model: a model named {key!r} is already registered")
        first = (f.__doc__ or "").strip().split("\n\n")[0]  # the first paragraph
        desc = description or " ".join(line.strip() for line in first.splitlines()) or key
        if default_cfg is None:
            raise TypeError(f"register_model: {key!r} needs a default_cfg (a ModelCfg)")
        cfg = ModelCfg.from_mapping(default_cfg)
        _REGISTRY[key] = ModelEntry(key, f, desc, cfg if cfg.name == key else cfg.replace(name=key))
        return f

    return deco(fn) if fn is not None else deco


def name_matches(name: str, patterns: str | Sequence[str], *, contains: bool = False) -> bool:
    """Whether ``name`` matches any of ``patterns``: shell-style wildcards (:mod:`fnmatch`,
    case-sensitive); a pattern without a wildcard (``*``, ``?``, ``[``) is the exact name, as
    in timm's ``list_models``, or with ``contains=True`` any name containing it
    (:func:`find_models`, ``nlnet models --filter``)."""
    pats = [patterns] if isinstance(patterns, str) else list(patterns)
    wild = ("*", "?", "[")
    return any(
        fnmatch.fnmatchcase(name, f"*{p}*" if contains and not any(c in p for c in wild) else p)
        for p in pats
    )


def list_models(
    pattern: str | Sequence[str] | None = None, exclude: str | Sequence[str] | None = None
) -> list[str]:
    """Sorted names of the registered models (timm's ``list_models``).

    Args:
        pattern: shell-style wildcard(s) (:mod:`fnmatch`), e.g. ``"c2d_r50_nl*"``,
            ``"*_r101*"``; a pattern without a wildcard is an exact name, as in timm (names
            containing a text: :func:`find_models`). A name matching any of them is kept.
            ``None``: all names.
        exclude: pattern(s) of names to drop, read the same way.
    """
    return _matching(pattern, exclude, contains=False)


def find_models(
    text: str | Sequence[str] | None = None, exclude: str | Sequence[str] | None = None
) -> list[str]:
    """Like :func:`list_models`, but a text without a wildcard keeps every name containing it
    (``find_models("r101")``: all the ResNet-101 models); ``nlnet models --filter``."""
    return _matching(text, exclude, contains=True)


def _matching(pattern, exclude, *, contains: bool) -> list[str]:
    load_plugins()
    names = sorted(_REGISTRY)
    if pattern is not None:
        names = [n for n in names if name_matches(n, pattern, contains=contains)]
    if exclude is not None:
        names = [n for n in names if not name_matches(n, exclude, contains=contains)]
    return names


def get_model_entry(name: str) -> ModelEntry:
    """The :class:`ModelEntry` of ``name`` (``ValueError`` with suggestions if unknown)."""
    if not isinstance(name, str) or name not in _REGISTRY:
        load_plugins()
    if not isinstance(name, str) or name not in _REGISTRY:
        close = difflib.get_close_matches(str(name), list(_REGISTRY), n=4)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see `nlnet models`"
        raise ValueError(f"name: unknown model {name!r}{hint}")
    return _REGISTRY[name]


def model_facts(name: str) -> ModelCfg:
    """The :class:`~nlnet.models.model_cfg.ModelCfg` of a registered model (``ValueError`` if
    unknown): classifier name, input kind, default preprocessing, torchvision weights."""
    return get_model_entry(name).default_cfg


def _pretrained_advice(facts: ModelCfg) -> str:
    name = facts.name
    if facts.weights_format == "inflate" and facts.input_kind == "clip":
        return (
            f"pretrained: {name!r} has no downloadable whole-model weights; use "
            "weights='IMAGENET1K_V1' (ImageNet initialisation, Section 4.1; pretrained_2d= is "
            "the same), a checkpoint via the config key model.init, or `nlnet import-caffe2` for "
            "the released Caffe2 models"
        )
    if facts.weights_arch is not None and facts.weights_format != "backbone":
        return (
            f"pretrained: {name!r} takes torchvision {facts.weights_arch} weights by name: use "
            f"weights='IMAGENET1K_V1' (config: model.init) and num_classes=K for a fresh "
            "classifier of K outputs"
        )
    if facts.weights_format == "backbone":
        return (
            f"pretrained: {name!r} initialises its backbone from ImageNet: use "
            "pretrained_2d='IMAGENET1K_V1' (Section 6), or weights=<a state dict or file of "
            "this model>"
        )
    return (
        f"pretrained: {name!r} has no published weights; use weights=<a state dict or a file of "
        "this model> (e.g. a checkpoint of nlnet train) or the config key model.init"
    )


def _backbone_only(weights: Any) -> bool:
    """Whether a detector's ``weights`` are its backbone's (a torchvision name, or a ResNet
    state dict or file without the detector's ``backbone.`` keys), not the whole detector's."""
    if isinstance(weights, str) and not os.path.isfile(weights):
        return True
    if isinstance(weights, (str, os.PathLike)):
        from nlnet.models.weights import load_weights

        weights = load_weights(weights, None)
    state = weights.get("model", weights) if isinstance(weights, Mapping) else {}
    return not any(str(k).startswith(("backbone.", "module.backbone.")) for k in state)


def create_model(
    name: str,
    num_classes: int | None = None,
    pretrained_2d: Any = None,
    *,
    weights: Any = None,
    **overrides: Any,
) -> nn.Module:
    """Build a registered model.

    Args:
        name: a name from :func:`list_models`.
        num_classes: classifier outputs; ``None`` keeps the entry's default (400 for the video
            models, Kinetics; 1000 for image classifiers).
        pretrained_2d: ImageNet 2D weights (Section 4.1): a torchvision-layout state dict, a
            path to one, or torchvision weights (``"IMAGENET1K_V1"``, ``"DEFAULT"``,
            ``"ResNet50_Weights.IMAGENET1K_V2"`` or the enum member), loaded through
            torchvision (:mod:`nlnet.models.weights`) for the model's depth. Kernels are
            inflated to the model (:func:`nlnet.models.inflate.load_pretrained_2d`). Non-local
            blocks and a classifier of another size keep their initialisation.
        weights: whole-model initialisation for fine-tuning: a torchvision weights name
            (``"IMAGENET1K_V1"``, models with ``facts.weights_arch``), a file or a state dict
            (torchvision layout, or this model's own, e.g. a checkpoint). Every tensor is loaded
            except a classifier (``facts.classifier``) of another size, which stays fresh with
            ``num_classes`` outputs (:func:`nlnet.models.finetune.load_finetune_weights`).
        **overrides: builder options (see the module docstring). ``pretrained=`` is accepted
            only by models whose ``default_cfg.supports_pretrained`` is true; for the others
            it is a ``ValueError`` pointing to ``pretrained_2d`` and ``nlnet import-caffe2``.

    Returns:
        The model (on the default device, in training mode).
    """
    entry = get_model_entry(name)
    facts = entry.facts
    kwargs = dict(overrides)
    if "pretrained" in kwargs and not entry.default_cfg.supports_pretrained:
        raise ValueError(_pretrained_advice(facts))
    if weights is not None and facts.weights_format == "backbone" and _backbone_only(weights):
        pretrained_2d, weights = weights, None  # a detector: ImageNet weights of its backbone
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    if pretrained_2d is not None and entry.default_cfg.pretrained_2d_arg:
        # the builder loads them itself (e.g. a detector's backbone: frozen BN goes with them)
        kwargs[entry.default_cfg.pretrained_2d_arg] = pretrained_2d
        pretrained_2d = None
    model = entry.builder(**kwargs)
    if pretrained_2d is not None:
        from nlnet.models.inflate import DEFAULT_NEW_KEYS, load_pretrained_2d

        new_keys = tuple(DEFAULT_NEW_KEYS) + entry.default_cfg.new_keys
        load_pretrained_2d(model, pretrained_2d, arch=facts.weights_arch, new_keys=new_keys)
    if weights is not None:
        from nlnet.models.finetune import load_finetune_weights

        load_finetune_weights(model, facts, weights)
    model.pretrained_cfg = facts  # timm's attribute name: the ModelCfg travels with the model
    return model
