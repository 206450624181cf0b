"""List the registered models: the model registry and the ``nlnet models`` command.

Name scheme (``docs/models.md``)::

    {arch}_{depth}[_{blocks}]

* ``arch``: ``c2d`` (Table 1, 2D kernels only), ``i3d`` (I3D 3x3x3: the 3x3 kernel of one block
  in two inflated to 3x3x3, conv1 5x7x7), ``i3d311`` (I3D 3x1x1: the first 1x1 kernel inflated to
  3x1x1) -- "Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971) Section 4.
* ``depth``: ``r50`` (res2..res5 with 3, 4, 6, 3 blocks) or ``r101`` (3, 4, 23, 3).
* ``blocks``: none (baseline), ``nl1`` (1 block, res4, right before its last residual block),
  ``nl5`` (2 in res3 + 3 in res4), ``nl10`` (4 in res3 + 6 in res4) -- Table 2c, or
  ``nl_res2`` .. ``nl_res5`` (1 block right before the last residual block of that stage) --
  Table 2b. Exact block indices: :mod:`nlnet.models.surgery`.

Image models: ``resnet50_nl_coco`` / ``resnet101_nl_coco`` (Section 6, one 2D block in res4),
``resnet50_nl_guide`` (the practitioner's guide "Self-Attention for Images: Non-Local Networks"'s ``ResNet50NonLocal``, a block after
layer4), ``seg_r50`` / ``seg_r50_nl`` (the guide's segmentation head without/with attention).

Every builder accepts ``num_classes`` and the model's keyword options; video builders also take
``nl_at`` (a preset or module paths, replaces the default placement), ``nl_options`` (a dict of
block options) and any block option directly (``instantiation=``, ``mode=``, ``reduction=``,
``sub_sample=``, ...), e.g. ``create_model("c2d_r50_nl5", mode="space")`` for Table 2d.

Register a new family with the decorator (timm style)::

    @register_model(description="my model", default_cfg={"input_size": (3, 8, 112, 112)})
    def my_model(**kwargs) -> nn.Module: ...
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from nlnet.models.facts import ModelFacts, facts_from_cfg

__all__ = [
    "ModelEntry",
    "register_model",
    "create_model",
    "list_models",
    "get_model_entry",
    "BLOCK_OPTIONS",
    "ModelFacts",
    "model_facts",
]

#: Keyword arguments of the non-local block that builders accept directly.
BLOCK_OPTIONS: tuple[str, ...] = (
    "inter_channels",
    "reduction",
    "instantiation",
    "sub_sample",
    "pool_position",
    "norm",
    "mode",
    "scale",
    "impl",
    "bias",
    "norm_eps",
    "norm_momentum",
    "norm_groups",
    "temporal_groups",
)


@dataclass(frozen=True)
class ModelEntry:
    """One registered model: its builder, a one-line description and its default config.

    ``default_cfg`` keys used by the library: ``num_classes``, ``input_size`` (one sample,
    e.g. ``(3, 32, 224, 224)``), ``task`` (``"video_classification"``,
    ``"image_classification"`` or ``"segmentation"``) and, for weight loading,
    ``new_keys`` (state-dict key fragments that have no 2D counterpart) and, for the
    registry-wide tests, ``test_overrides`` (builder options that make a narrow copy of the
    same topology, e.g. ``{"width": 4}``, so forward/backward runs fast on a CPU).
    """

    name: str
    builder: Callable[..., nn.Module]
    description: str
    default_cfg: Mapping[str, Any] = field(default_factory=dict)

    @property
    def facts(self) -> ModelFacts:
        """The model's facts (classifier, input kind, preprocessing, weights): see
        :mod:`nlnet.models.facts`."""
        return facts_from_cfg(self.name, self.default_cfg)


_REGISTRY: dict[str, ModelEntry] = {}


def register_model(
    fn: Callable[..., nn.Module] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    default_cfg: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> Any:
    """Register a builder ``fn(**kwargs) -> nn.Module`` under ``name`` (default ``fn.__name__``).

    Usable bare (``@register_model``) or with arguments (``@register_model(description=...)``).
    The description defaults to the first line of the builder's docstring.
    """

    def deco(f: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        if not callable(f):
            raise TypeError(f"register_model: expected a callable builder, got {f!r}")
        key = name or f.__name__
        if key in _REGISTRY and not overwrite:
            raise ValueError(f"register_model: a model named {key!r} is already registered")
        doc = (f.__doc__ or "").strip().splitlines()
        desc = description or (doc[0].strip() if doc else key)
        _REGISTRY[key] = ModelEntry(key, f, desc, dict(default_cfg or {}))
        return f

    return deco(fn) if fn is not None else deco


def _ensure_builtin() -> None:
    # Importing the package registers every family listed in nlnet/models/__init__.py.
    import nlnet.models  # noqa: F401


def list_models(pattern: str | None = None) -> list[str]:
    """Sorted names of the registered models, optionally only those containing ``pattern``."""
    _ensure_builtin()
    names = sorted(_REGISTRY)
    return [n for n in names if pattern is None or pattern in n]


def get_model_entry(name: str) -> ModelEntry:
    """The :class:`ModelEntry` of ``name`` (``ValueError`` with suggestions if unknown)."""
    _ensure_builtin()
    if not isinstance(name, str) or name not in _REGISTRY:
        close = difflib.get_close_matches(str(name), list(_REGISTRY), n=4)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see `nlnet models`"
        raise ValueError(f"name: unknown model {name!r}{hint}")
    return _REGISTRY[name]


def model_facts(name: str) -> ModelFacts:
    """The :class:`~nlnet.models.facts.ModelFacts` of a registered model (``ValueError`` if
    unknown): classifier name, input kind, default preprocessing, torchvision weights."""
    return get_model_entry(name).facts


def _pretrained_advice(facts: ModelFacts) -> str:
    name = facts.name
    if facts.weights_format == "inflate" and facts.input_kind == "clip":
        return (
            f"pretrained: {name!r} has no downloadable whole-model weights; use "
            "pretrained_2d='IMAGENET1K_V1' (ImageNet initialisation, Section 4.1), a checkpoint "
            "via the config key model.pretrained, or `nlnet import-caffe2` for the released "
            "Caffe2 models"
        )
    if facts.weights_arch is not None and facts.weights_format != "backbone":
        return (
            f"pretrained: {name!r} takes torchvision {facts.weights_arch} weights by name: use "
            f"weights='IMAGENET1K_V1' (config: model.weights) and num_classes=K for a fresh "
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
        "this model> (e.g. a checkpoint of nlnet train) or the config key model.pretrained"
    )


def torchvision_arch(entry: ModelEntry) -> str | None:
    """The torchvision model whose weights ``pretrained_2d`` names refer to (``"resnet50"``).

    ``default_cfg["torchvision_arch"]`` if set, else ``resnet{depth}`` for the ResNet families.
    """
    cfg = entry.default_cfg
    if cfg.get("torchvision_arch"):
        return str(cfg["torchvision_arch"])
    return f"resnet{cfg['depth']}" if cfg.get("depth") in (18, 34, 50, 101, 152) else None


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
            only by models whose ``default_cfg["supports_pretrained"]`` is true; for the others
            it is a ``ValueError`` pointing to ``pretrained_2d`` and ``nlnet import-caffe2``.

    Returns:
        The model (on the default device, in training mode).
    """
    entry = get_model_entry(name)
    facts = entry.facts
    kwargs = dict(overrides)
    if "pretrained" in kwargs and not entry.default_cfg.get("supports_pretrained"):
        raise ValueError(_pretrained_advice(facts))
    named = isinstance(weights, str) and not os.path.isfile(weights)
    if weights is not None and facts.weights_format == "backbone" and named:
        pretrained_2d, weights = weights, None  # a detector: torchvision names its backbone
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    if pretrained_2d is not None and entry.default_cfg.get("pretrained_2d_arg"):
        # the builder loads them itself (e.g. a detector's backbone: frozen BN goes with them)
        kwargs[entry.default_cfg["pretrained_2d_arg"]] = pretrained_2d
        pretrained_2d = None
    model = entry.builder(**kwargs)
    if pretrained_2d is not None:
        from nlnet.models.inflate import DEFAULT_NEW_KEYS, load_pretrained_2d

        new_keys = tuple(DEFAULT_NEW_KEYS) + tuple(entry.default_cfg.get("new_keys", ()))
        load_pretrained_2d(model, pretrained_2d, arch=torchvision_arch(entry), new_keys=new_keys)
    if weights is not None:
        from nlnet.models.finetune import load_finetune_weights

        load_finetune_weights(model, facts, weights)
    model.pretrained_cfg = facts  # timm's attribute name: the facts travel with the model
    return model


# --------------------------------------------------------------------------- built-in models
_VIDEO_ARCHS = {
    "c2d": (None, "C2D"),
    "i3d": ("3x3x3", "I3D 3x3x3"),
    "i3d311": ("3x1x1", "I3D 3x1x1"),
}
_DEPTH_LAYERS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}
_BLOCKS_DESC = {
    None: "",
    "nl1": ", 1 non-local block (res4)",
    "nl5": ", 5 non-local blocks (2 res3 + 3 res4)",
    "nl10": ", 10 non-local blocks (4 res3 + 6 res4)",
    "res2": ", 1 non-local block in res2",
    "res3": ", 1 non-local block in res3",
    "res4": ", 1 non-local block in res4",
    "res5": ", 1 non-local block in res5",
}


def _split_block_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    opts = dict(kwargs.pop("nl_options", None) or {})
    for k in BLOCK_OPTIONS:
        if k in kwargs:
            opts[k] = kwargs.pop(k)
    return opts


def build_video_resnet(
    depth: int = 50,
    arch: str = "c2d",
    blocks: str | None = None,
    **kwargs: Any,
) -> nn.Module:
    """Build a C2D/I3D ResNet (Table 1, Section 4) with non-local blocks at a preset.

    Args:
        depth: 50 or 101.
        arch: ``"c2d"``, ``"i3d"`` (3x3x3) or ``"i3d311"`` (3x1x1).
        blocks: ``None`` or a placement preset (``"nl1"``, ``"nl5"``, ``"nl10"``,
            ``"res2"``..``"res5"``).
        **kwargs: :class:`~nlnet.models.resnet3d.ResNet3d` options, ``nl_at`` (paths or a preset,
            overriding ``blocks``), ``nl_options`` and block options.
    """
    from nlnet.models.resnet3d import ResNet3d

    if depth not in _DEPTH_LAYERS:
        raise ValueError(f"depth: expected one of {sorted(_DEPTH_LAYERS)}, got {depth!r}")
    if arch not in _VIDEO_ARCHS:
        raise ValueError(f"arch: expected one of {sorted(_VIDEO_ARCHS)}, got {arch!r}")
    at = kwargs.pop("nl_at", blocks)
    opts = _split_block_options(kwargs)
    layers = kwargs.pop("layers", _DEPTH_LAYERS[depth])
    return place_non_local(ResNet3d(layers, inflate=_VIDEO_ARCHS[arch][0], **kwargs), at, opts)


def place_non_local(model: nn.Module, at: Any, opts: dict[str, Any]) -> nn.Module:
    """Insert blocks with ``opts`` at ``at`` (a preset or module paths); options without a
    placement are an error rather than silently ignored."""
    from nlnet.models.surgery import insert_non_local

    if at:
        insert_non_local(model, at, **opts)
    elif opts:
        raise ValueError(
            f"block options {sorted(opts)} given to a model without non-local blocks; "
            "pass nl_at= to place blocks"
        )
    return model


def _video_cfg(depth: int, arch: str, blocks: str | None) -> dict[str, Any]:
    return {
        "num_classes": 400,
        "input_size": (3, 32, 224, 224),
        "task": "video_classification",
        "family": "resnet3d",
        "arch": arch,
        "depth": depth,
        "blocks": blocks,
        "test_overrides": {"width": 4},
    }


def _register_video(depth: int, arch: str, blocks: str | None) -> None:
    suffix = "" if blocks is None else "_" + (blocks if blocks.startswith("nl") else f"nl_{blocks}")
    name = f"{arch}_r{depth}{suffix}"

    def builder(**kwargs: Any) -> nn.Module:
        return build_video_resnet(depth, arch, blocks, **kwargs)

    builder.__name__ = name
    builder.__qualname__ = name
    desc = f"{_VIDEO_ARCHS[arch][1]} ResNet-{depth}{_BLOCKS_DESC[blocks]}"
    register_model(
        builder, name=name, description=desc, default_cfg=_video_cfg(depth, arch, blocks)
    )


for _blocks in (None, "nl1", "nl5", "nl10", "res2", "res3", "res4", "res5"):
    _register_video(50, "c2d", _blocks)
for _blocks in (None, "nl1", "nl5", "nl10"):
    _register_video(101, "c2d", _blocks)
for _arch in ("i3d", "i3d311"):
    for _depth in (50, 101):
        for _blocks in (None, "nl5", "nl10"):
            _register_video(_depth, _arch, _blocks)


_IMAGE_CFG = {
    "num_classes": 1000,
    "input_size": (3, 224, 224),
    "task": "image_classification",
    "family": "resnet2d",
    "test_overrides": {"width_per_group": 4},
}


@register_model(
    description="ResNet-50 (image), 1 non-local block right before the last block of res4 (COCO)",
    default_cfg={**_IMAGE_CFG, "depth": 50, "blocks": "res4"},
)
def resnet50_nl_coco(**kwargs: Any) -> nn.Module:
    """ResNet-50 with one 2D block after ``layer3.4`` (Section 6 of the paper)."""
    from nlnet.models.image import resnet_non_local

    opts = _split_block_options(kwargs)
    return resnet_non_local(50, at=kwargs.pop("nl_at", "res4"), **kwargs, **opts)


@register_model(
    description="ResNet-101 (image), 1 non-local block right before the last block of res4 (COCO)",
    default_cfg={**_IMAGE_CFG, "depth": 101, "blocks": "res4"},
)
def resnet101_nl_coco(**kwargs: Any) -> nn.Module:
    """ResNet-101 with one 2D block after ``layer3.21`` (Section 6 of the paper)."""
    from nlnet.models.image import resnet_non_local

    opts = _split_block_options(kwargs)
    return resnet_non_local(101, at=kwargs.pop("nl_at", "res4"), **kwargs, **opts)


@register_model(
    description="ResNet-50 (image), 1 non-local block after layer4 (the guide's ResNet50NonLocal)",
    default_cfg={**_IMAGE_CFG, "depth": 50, "blocks": "after_layer4"},
)
def resnet50_nl_guide(**kwargs: Any) -> nn.Module:
    """The guide's ``ResNet50NonLocal``: reduction 2, no subsampling, after stage 4."""
    from nlnet.models.image import resnet_non_local

    opts = {"reduction": 2, "sub_sample": False, **_split_block_options(kwargs)}
    at = kwargs.pop("nl_at", "after_layer4")
    return resnet_non_local(50, at=at, **kwargs, **opts)


_SEG_CFG = {
    "num_classes": 19,
    "input_size": (3, 512, 1024),
    "task": "segmentation",
    "family": "segmentation",
    "new_keys": ("head.",),
    "test_overrides": {"width_per_group": 4, "mid_channels": 16},
}


@register_model(
    description="Dilated ResNet-50 + the guide's segmentation head, no attention",
    default_cfg={**_SEG_CFG, "depth": 50},
)
def seg_r50(**kwargs: Any) -> nn.Module:
    """Segmentation baseline of the guide (``use_attention=False``)."""
    from nlnet.models.image import SegmentationNet

    return SegmentationNet(50, use_attention=False, **kwargs)


@register_model(
    description="Dilated ResNet-50 + the guide's segmentation head with a non-local block",
    default_cfg={**_SEG_CFG, "depth": 50},
)
def seg_r50_nl(**kwargs: Any) -> nn.Module:
    """Segmentation head of the guide with attention (reduction 2, sub_sample 2)."""
    from nlnet.models.image import SegmentationNet

    return SegmentationNet(50, use_attention=True, **kwargs)
