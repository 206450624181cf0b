"""The typed per-model default config of the registry (timm's ``PretrainedCfg`` is the example).

Every registered name carries one :class:`ModelCfg`, the single home of the facts about the
model that the rest of nlnet reads instead of guessing -- which task it serves, the size and
normalisation of one input sample (an image or a clip, Section 4 of "Non-local Neural
Networks", Wang et al., CVPR 2018, arXiv:1711.07971), where its first convolution and its
classifier are, which torchvision weights it takes and how (Section 4.1), and how the
registry-wide tests build a narrow copy of it.  Each architecture file fills the fields of its
family where it registers its names; the derived ones are set once in ``__post_init__``.  It is
also ``model.pretrained_cfg`` (timm's attribute name) of every model ``create_model`` builds.  A plain ``dict`` given to ``register_model(default_cfg=...)``
is turned into a :class:`ModelCfg`; an unknown key is a ``TypeError`` at registration.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from nlnet.functional.stats import IMAGENET_MEAN, IMAGENET_STD

__all__ = [
    "ModelCfg",
    "INPUT_KINDS",
    "WEIGHTS_FORMATS",
    "DENSE_TASKS",
    "DETECTION_OUTPUTS",
    "TASKS",
    "DEFAULT_CLASSIFIER",
]


#: What a model's output means: one vocabulary with the training engine's ``task:``
#: (:mod:`nlnet.engine.tasks` registers a task of each name).
TASKS: tuple[str, ...] = (
    "video_classification",
    "image_classification",
    "segmentation",
    "detection",
    "super_resolution",
)

#: Tasks whose models have no dropout before a classifier (per-pixel and R-CNN heads): their
#: :attr:`ModelCfg.takes_dropout` is false.
DENSE_TASKS: tuple[str, ...] = ("segmentation", "detection", "super_resolution")

#: What a detector predicts (:attr:`ModelCfg.outputs`), in COCO's evaluation words.
DETECTION_OUTPUTS: tuple[str, ...] = ("bbox", "segm", "keypoints")

#: ``ModelCfg.task`` words of earlier releases, read as ``"detection"`` with these outputs.
OLD_DETECTION_TASKS: dict[str, tuple[str, ...]] = {
    "instance_segmentation": ("bbox", "segm"),
    "keypoints": ("bbox", "keypoints"),
    "object_detection": ("bbox",),
}

#: The classifier's module path in a network that is not registered (torchvision's ``fc``).
DEFAULT_CLASSIFIER: tuple[str, ...] = ("fc",)

#: What one input sample is: ``(C, T, H, W)`` clips or ``(C, H, W)`` images.
INPUT_KINDS: tuple[str, ...] = ("clip", "image", "volume")

#: How torchvision weights reach a model (:attr:`ModelCfg.weights_format`).
WEIGHTS_FORMATS: tuple[str, ...] = ("inflate", "vit", "swin", "r3d", "backbone", "native")


def _frozen_map(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(value or {}))


@dataclass(frozen=True)
class ModelCfg:
    """Default config of one registered model.

    Attributes:
        task: what the model's output means, one of :data:`TASKS` (the engine's ``task:``
            names): ``"video_classification"``, ``"image_classification"``,
            ``"segmentation"``, ``"detection"``, ``"super_resolution"``; a plugin that
            registers a task of its own (``nlnet.engine.tasks.register_task``) uses its name.
        outputs: what a detector predicts, in COCO's words (:data:`DETECTION_OUTPUTS`):
            ``("bbox", "segm")`` for Mask R-CNN, ``("bbox", "keypoints")`` for Keypoint
            R-CNN, ``("bbox",)`` for Faster R-CNN; ``()`` for the other tasks.
        num_classes: classifier outputs when ``create_model`` is not given ``num_classes``.
        input_size: one sample, ``(C, T, H, W)`` for video or ``(C, H, W)`` for images.
        input_kind: ``"clip"``, ``"image"`` or ``"volume"`` (a 3D scan, e.g. MRI); derived from ``len(input_size)`` when empty.
        mean: per-channel mean on the [0, 1] scale the weights expect.
        std: per-channel standard deviation on the [0, 1] scale.
        first_conv: module path of the first convolution (``"conv1"``, ``"patch_embed.proj"``),
            ``""`` when the model has none worth naming.
        classifier: module paths of the class-count-dependent layers (``("fc",)``,
            ``("head",)``; a detector's box and mask predictors), ``()`` if none.
        family: architecture family (``"resnet3d"``, ``"resnet2d"``, ``"vit"``, ``"swin"``,
            ``"segmentation"``, ``"detection"``, ``"tiny"``, ...).
        arch: variant inside the family (``"c2d"``, ``"i3d"``, ``"i3d311"``), ``None`` if none.
        depth: ResNet depth (50, 101, ...), ``None`` for other families.
        blocks: non-local placement preset (``"nl5"``, ``"res4"``...), ``None``: no block.
        new_keys: state-dict key fragments with no 2D counterpart (kept at their
            initialisation when 2D weights are loaded).
        torchvision_arch: the torchvision model whose weights a name (``model.init``,
            ``weights=``) refers to; ``None``: ``resnet{depth}`` for the ResNet families with 2D
            weights (``weights_format`` ``inflate`` / ``backbone``), else no torchvision weights.
            The one rule: ``weights_arch`` holds the result.
        pretrained_2d_arg: builder keyword that takes the 2D weights itself (a detector's
            backbone), ``None``: ``create_model`` inflates them after building.
        supports_pretrained: the builder accepts ``pretrained=`` (whole-model weights).
        weight_meta: facts about loadable weights (tags, source, license); free-form.
        test_overrides: builder options that make a narrow copy of the same topology for
            CPU tests (e.g. ``{"width": 4}``).
        test_input_size: one sample's size for those tests; ``None``: ``input_size``.
        upscale: output/input size ratio of a super-resolution model, ``None`` for others.
        name: the registry name (set by ``register_model``).
        weights_arch: the torchvision model whose weights names (``"IMAGENET1K_V1"``) this model
            takes as a whole (fine-tuning, ``create_model(weights=...)``), ``None`` if none;
            derived once here: ``torchvision_arch`` if set, else ``resnet{depth}`` (50/101) for
            the ``"inflate"``/``"backbone"`` formats.
        weights_format: how torchvision weights reach the model: ``"inflate"`` (2D ResNet, copied
            or inflated to 3D, Section 4.1), ``"vit"``/``"swin"``/``"r3d"`` (renamed), ``"backbone"`` (the
            builder takes them as its backbone, detectors) or ``"native"`` (only state dicts of
            this very model); ``"inflate"`` without a ``weights_arch`` becomes ``"native"``.
        dynamic_time: the clip length may change at run time (export's dynamic axis).
        takes_dropout: the builder takes ``dropout`` (before the classifier; ``train.dropout``);
            never for the tasks of :data:`DENSE_TASKS`.
    """

    task: str
    num_classes: int
    input_size: tuple[int, ...]
    outputs: tuple[str, ...] = ()
    input_kind: str = ""
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    first_conv: str = ""
    classifier: tuple[str, ...] = ()
    family: str = ""
    arch: str | None = None
    depth: int | None = None
    blocks: str | None = None
    new_keys: tuple[str, ...] = ()
    torchvision_arch: str | None = None
    pretrained_2d_arg: str | None = None
    supports_pretrained: bool = False
    weight_meta: Mapping[str, Any] = field(default_factory=dict)
    test_overrides: Mapping[str, Any] = field(default_factory=dict)
    test_input_size: tuple[int, ...] | None = None
    upscale: int | None = None
    name: str = ""
    weights_arch: str | None = None
    weights_format: str = "native"
    dynamic_time: bool = True
    takes_dropout: bool = True

    def __post_init__(self) -> None:
        if self.task in OLD_DETECTION_TASKS:  # a word of earlier releases: detection + outputs
            import warnings

            outputs = OLD_DETECTION_TASKS[self.task]
            warnings.warn(f"ModelCfg.task {self.task!r} is deprecated; use task='detection', "
                          f"outputs={outputs!r}", DeprecationWarning, stacklevel=3)  # fmt: skip
            object.__setattr__(self, "task", "detection")
            object.__setattr__(self, "outputs", tuple(self.outputs) or outputs)
        object.__setattr__(self, "outputs", tuple(self.outputs))  # a list of a dict default_cfg
        if not isinstance(self.task, str) or not self.task:
            raise ValueError(
                f"ModelCfg.task: expected one of {', '.join(TASKS)} (or a plugin task's word), "
                f"got {self.task!r}"
            )
        bad = [o for o in self.outputs if o not in DETECTION_OUTPUTS]
        if bad or bool(self.outputs) != (self.task == "detection"):
            raise ValueError(
                f"ModelCfg.outputs: a detector's, some of {', '.join(DETECTION_OUTPUTS)}; "
                f"got {self.outputs!r} for task {self.task!r}"
            )
        if not isinstance(self.num_classes, int) or self.num_classes < 1:
            raise ValueError(
                f"ModelCfg.num_classes: expected a positive int, got {self.num_classes!r}"
            )
        size = tuple(int(s) for s in self.input_size)
        if len(size) not in (3, 4) or min(size) < 1:
            raise ValueError(
                f"ModelCfg.input_size: expected (C, H, W) or (C, T, H, W), got {self.input_size!r}"
            )
        kind = self.input_kind or ("clip" if len(size) == 4 else "image")
        if kind not in INPUT_KINDS:
            raise ValueError(f"ModelCfg.input_kind: expected one of {INPUT_KINDS}, got {kind!r}")
        if len(self.mean) != size[0] or len(self.std) != size[0]:
            raise ValueError(
                f"ModelCfg.mean/std: expected {size[0]} values (one per input channel), "
                f"got {self.mean!r}, {self.std!r}"
            )
        if self.weights_format not in WEIGHTS_FORMATS:
            raise ValueError(
                f"ModelCfg.weights_format: expected one of {WEIGHTS_FORMATS}, "
                f"got {self.weights_format!r}"
            )
        test_size = None if self.test_input_size is None else tuple(self.test_input_size)
        set_ = object.__setattr__  # frozen: normalise once, here
        set_(self, "input_size", size)
        set_(self, "input_kind", kind)
        set_(self, "mean", tuple(float(m) for m in self.mean))
        set_(self, "std", tuple(float(s) for s in self.std))
        set_(self, "new_keys", tuple(self.new_keys))
        classifier = (self.classifier,) if isinstance(self.classifier, str) else self.classifier
        set_(self, "classifier", tuple(classifier))
        set_(self, "weight_meta", _frozen_map(self.weight_meta))
        set_(self, "test_overrides", _frozen_map(self.test_overrides))
        set_(self, "test_input_size", test_size)
        arch = self.weights_arch or self.torchvision_arch
        if arch is None and self.weights_format in ("inflate", "backbone"):
            arch = f"resnet{self.depth}" if self.depth in (50, 101) else None
        set_(self, "weights_arch", arch)
        if self.weights_format == "inflate" and arch is None:
            set_(self, "weights_format", "native")  # no torchvision counterpart
        set_(self, "takes_dropout", bool(self.takes_dropout) and self.task not in DENSE_TASKS)

    def weights_meta(self, weights: Any = "DEFAULT") -> dict[str, Any]:
        """torchvision's ``meta`` of a weights name for this model (categories, recipe, ...),
        plus ``url``; an empty dict when the model takes no torchvision weights."""
        if self.weights_arch is None:
            return {}
        from nlnet.models.weights import resolve_weights

        enum = resolve_weights(weights, self.weights_arch, what="weights")
        return {**dict(getattr(enum, "meta", {})), "url": getattr(enum, "url", None)}

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | ModelCfg) -> ModelCfg:
        """A :class:`ModelCfg` from a dict (``TypeError`` naming unknown keys) or itself."""
        if isinstance(values, ModelCfg):
            return values
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise TypeError(f"default_cfg: unknown key(s) {unknown}; valid keys: {sorted(known)}")
        return cls(**dict(values))

    # immutable, so a copy is itself; pickled as plain keyword arguments (a model deep-copied
    # for EMA or saved whole carries its ``pretrained_cfg``; mapping proxies do not pickle)
    def __copy__(self) -> ModelCfg:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ModelCfg:
        return self

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        values = {k: getattr(self, k) for k in _FIELDS}
        plain = {k: dict(v) if isinstance(v, MappingProxyType) else v for k, v in values.items()}
        return _rebuild, (plain,)

    def replace(self, **changes: Any) -> ModelCfg:
        """A copy with ``changes`` applied (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    # read-only mapping access, for code written against the former ``default_cfg`` dicts
    def __getitem__(self, key: str) -> Any:
        if key not in _FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in _FIELDS

    def get(self, key: str, default: Any = None) -> Any:
        """``cfg.get("task")`` as on the former dicts (prefer ``cfg.task``)."""
        return getattr(self, key) if key in _FIELDS else default

    def keys(self) -> tuple[str, ...]:
        return _FIELDS


_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ModelCfg))


def _rebuild(values: dict[str, Any]) -> ModelCfg:
    """A :class:`ModelCfg` from its pickled fields (:meth:`ModelCfg.__reduce__`)."""
    return ModelCfg(**values)
