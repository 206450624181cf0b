"""Facts of a registered model that the engine, fine-tuning and export read (timm's
``pretrained_cfg`` and torchvision's ``Weights.meta`` are the examples).

One :class:`ModelFacts` per registered name, filled per family (:data:`FAMILY_FACTS`) and
refined by the entry's ``default_cfg`` (a key of the same name wins).  So a config never has to
say where the classifier is (``model.reset_head``), what the model takes (an image or a clip,
Section 4 of "Non-local Neural Networks", Wang et al., CVPR 2018, arXiv:1711.07971) or which
torchvision weights its names (``"IMAGENET1K_V1"``, Section 4.1) refer to.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ModelFacts", "FAMILY_FACTS", "facts_from_cfg", "IMAGENET_MEAN", "IMAGENET_STD"]

IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class ModelFacts:
    """What is true of a model whatever the config says.

    Attributes:
        name: the registry name.
        task: ``video_classification``, ``image_classification``, ``segmentation``,
            ``instance_segmentation`` or ``keypoints``.
        input_kind: ``"clip"`` (B, 3, T, H, W) or ``"image"`` (B, 3, H, W).
        classifier: module paths of the class-count-dependent layers (a fresh head is built
            there when fine-tuning to another number of classes).
        num_classes: the builder's default class count.
        input_size: one sample (``(3, T, H, W)`` or ``(3, H, W)``).
        mean, std: the default input normalisation (ImageNet statistics for every family).
        weights_arch: the torchvision model whose weights names (``"IMAGENET1K_V1"``) this model
            takes, or ``None``.
        weights_format: how torchvision weights reach the model: ``"inflate"`` (2D ResNet, copied
            or inflated to 3D, Section 4.1), ``"vit"``/``"swin"`` (renamed), ``"backbone"`` (the
            builder takes them as its backbone, detectors) or ``"native"`` (only state dicts of
            this very model: a file or a mapping).
        dynamic_time: the clip length may change at run time (export's dynamic axis).
        takes_dropout: the builder takes ``dropout`` (before the classifier; ``train.dropout``).
        new_keys: state-dict key fragments with no ImageNet counterpart besides the non-local
            blocks (kept as initialised when loading torchvision weights).
    """

    name: str
    task: str
    input_kind: str
    classifier: tuple[str, ...]
    num_classes: int
    input_size: tuple[int, ...]
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    weights_arch: str | None = None
    weights_format: str = "native"
    dynamic_time: bool = True
    takes_dropout: bool = True
    new_keys: tuple[str, ...] = ()

    def weights_meta(self, weights: Any = "DEFAULT") -> dict[str, Any]:
        """torchvision's ``meta`` of a weights name for this model (categories, recipe, ...),
        plus ``url``; an empty dict when the model takes no torchvision weights."""
        if self.weights_arch is None:
            return {}
        from nlnet.models.weights import resolve_weights

        enum = resolve_weights(weights, self.weights_arch, what="weights")
        return {**dict(getattr(enum, "meta", {})), "url": getattr(enum, "url", None)}


#: Per family: the facts shared by every model of the family (see :class:`ModelFacts`).
FAMILY_FACTS: dict[str, dict[str, Any]] = {
    "resnet3d": {"input_kind": "clip", "classifier": ("fc",), "weights_format": "inflate"},
    "tiny": {"input_kind": "clip", "classifier": ("fc",)},
    "video_transformer": {"input_kind": "clip", "classifier": ("head",), "dynamic_time": False},
    "resnet2d": {
        "input_kind": "image",
        "classifier": ("fc",),
        "weights_format": "inflate",
        "takes_dropout": False,
    },  # fmt: skip
    "vit": {"input_kind": "image", "classifier": ("head",), "weights_format": "vit"},
    "swin": {
        "input_kind": "image",
        "classifier": ("head",),
        "weights_format": "swin",
        "takes_dropout": False,
    },  # fmt: skip
    "segmentation": {
        "input_kind": "image",
        "classifier": ("head.classifier",),
        "takes_dropout": False,
    },  # fmt: skip
    "detection": {
        "input_kind": "image",
        "classifier": ("roi_heads.box_predictor", "roi_heads.mask_predictor.mask_fcn_logits"),
        "weights_format": "backbone",
        "takes_dropout": False,
    },
}


def _weights_arch(name: str, family: str, cfg: Mapping[str, Any]) -> str | None:
    if cfg.get("torchvision_arch"):
        return str(cfg["torchvision_arch"])
    if family in ("vit", "swin"):
        return None if name.endswith("_tiny") else name
    depth = cfg.get("depth")
    if family in ("resnet3d", "resnet2d", "detection", "segmentation") and depth in (50, 101):
        return f"resnet{depth}"
    return None


def facts_from_cfg(name: str, cfg: Mapping[str, Any]) -> ModelFacts:
    """The :class:`ModelFacts` of a registry entry from its family and ``default_cfg``."""
    family = str(cfg.get("family", ""))
    base = dict(FAMILY_FACTS.get(family, {}))
    size = tuple(cfg.get("input_size", (3, 224, 224)))
    base.setdefault("input_kind", "clip" if len(size) == 4 else "image")
    base.setdefault("classifier", ("fc",))
    arch = _weights_arch(name, family, cfg)
    if arch is None and base.get("weights_format") == "inflate":
        base["weights_format"] = "native"  # no torchvision counterpart
    if family == "detection" and cfg.get("task") == "keypoints":  # no mask head
        base["classifier"] = ("roi_heads.box_predictor",)
    if family == "segmentation" and arch is not None:
        base["weights_format"] = "inflate"  # the dilated ResNet backbone (head keys are new)
    fields = {f.name for f in dataclasses.fields(ModelFacts)}
    given = {k: cfg[k] for k in fields if k in cfg and k not in ("name",)}
    facts = {
        "name": name,
        "task": str(cfg.get("task", "video_classification")),
        "num_classes": int(cfg.get("num_classes", 1000)),
        "input_size": size,
        "weights_arch": arch,
        "mean": IMAGENET_MEAN,
        "std": IMAGENET_STD,
        **base,
        **given,
    }
    facts["classifier"] = tuple(facts["classifier"])
    facts["new_keys"] = tuple(facts.get("new_keys", ()))
    facts["mean"], facts["std"] = tuple(facts["mean"]), tuple(facts["std"])
    return ModelFacts(**facts)
