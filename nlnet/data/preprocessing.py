"""The test-time record of every task: how an input is prepared for a trained network.

A checkpoint stores one :class:`Preprocessing` (``to_dict()``, versioned) that its task wrote
when training finished; :func:`nlnet.load_model`, :func:`nlnet.predict`, :func:`nlnet.segment`,
:func:`nlnet.export_model` and the commands read it back with :meth:`Preprocessing.from_dict`
and nothing else. One record for five kinds of input:

=====================  ==============================================================
``kind``               fields that matter
=====================  ==============================================================
``clip``               ``num_frames`` frames ``stride`` apart (``sampling``), shorter side
                       ``size``, centre ``crop``, ``mean`` / ``std`` ("Non-local Neural
                       Networks", Wang et al., CVPR 2018, arXiv:1711.07971, Sec. 4.1,
                       *Inference*)
``image``              shorter side ``size``, centre ``crop`` (a classifier; the ImageNet
                       recipe), or the whole image with a ``window`` (segmentation),
                       ``mean`` / ``std``
``volume``             per-case z-score over non-zero voxels (``normalize``), input
                       ``modalities``, ``label_map`` (dataset label -> class), ``window``
``super_resolution``   low-resolution image in [0, 1], ``upscale``
``boxes``              image in [0, 1] (the detector normalises inside), ``iou_types``
=====================  ==============================================================

``window`` / ``sliding_window`` / ``window_overlap`` say how evaluation ran a dense network (a
sliding window of that size, or the whole input). Dictionaries written before the record was
versioned (five shapes, one per task) are read by :meth:`Preprocessing.from_dict` too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nlnet.functional.stats import IMAGENET_MEAN, IMAGENET_STD

__all__ = ["PREPROCESSING_VERSION", "PREPROCESSING_KINDS", "Preprocessing"]

#: The version :meth:`Preprocessing.to_dict` writes (a dict without ``version`` is older).
PREPROCESSING_VERSION: int = 2
PREPROCESSING_KINDS: tuple[str, ...] = ("clip", "image", "volume", "super_resolution", "boxes")
_SAMPLINGS = ("window", "segments")
_NORMALIZE = {"volume": "zscore_nonzero"}  # every other kind: (x - mean) / std on [0, 1]
_UNIT = {"super_resolution", "boxes"}  # fed [0, 1] pixels as they are


@dataclass(frozen=True)
class Preprocessing:
    """How an input is prepared at test time (the module's table lists the kinds' fields).

    Attributes:
        kind: one of :data:`PREPROCESSING_KINDS`.
        mean, std: per-channel normalisation on the [0, 1] scale (``None`` for a volume).
        num_frames, stride, sampling: a clip's frames (``sampling``: ``window`` or
            ``segments``).
        size: the shorter side the frames or the image are resized to (``None``: kept).
        crop: the centre crop (``None``: the whole resized frame).
        window, sliding_window, window_overlap: how a dense network ran at evaluation.
        normalize: ``"mean_std"`` or ``"zscore_nonzero"`` (volumes).
        modalities, label_map: a volume's input channels and label mapping.
        upscale: the super-resolution factor.
        iou_types: a detector's outputs (``bbox``, ``segm``, ``keypoints``).
        channel_order: ``"RGB"`` (what nlnet's decoders and image readers give).
    """

    kind: str = "image"
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    num_frames: int | None = None
    stride: int | None = None
    sampling: str = "window"
    size: int | None = None
    crop: int | tuple[int, ...] | None = None
    window: tuple[int, ...] | None = None
    sliding_window: bool = False
    window_overlap: float = 0.25
    normalize: str = "mean_std"
    modalities: tuple[str, ...] = ()
    label_map: Mapping[int, int] = field(default_factory=dict, hash=False)  # a dict: not hashed
    upscale: int | None = None
    iou_types: tuple[str, ...] = ()
    channel_order: str = "RGB"

    def __post_init__(self) -> None:
        if self.kind not in PREPROCESSING_KINDS:
            raise ValueError(
                f"preprocessing.kind: expected one of {list(PREPROCESSING_KINDS)}, got {self.kind!r}"
            )
        if self.sampling not in _SAMPLINGS:
            raise ValueError(f"preprocessing.sampling: expected one of {list(_SAMPLINGS)}, got "
                             f"{self.sampling!r}")  # fmt: skip
        if self.kind == "clip" and not self.num_frames:
            raise ValueError("preprocessing: a clip needs num_frames")
        unit = (0.0,) * 3, (1.0,) * 3
        defaults = (None, None) if self.kind == "volume" else unit if self.kind in _UNIT else (
            IMAGENET_MEAN, IMAGENET_STD)  # fmt: skip
        for name, default in zip(("mean", "std"), defaults):
            value = getattr(self, name)
            object.__setattr__(self, name, default if value is None else _floats(value))
        object.__setattr__(self, "normalize", _NORMALIZE.get(self.kind, "mean_std"))
        if self.window is not None:
            object.__setattr__(self, "window", tuple(int(v) for v in self.window))
        if isinstance(self.crop, Sequence):
            object.__setattr__(self, "crop", tuple(int(v) for v in self.crop))
        label_map = {int(k): int(v) for k, v in dict(self.label_map).items()}
        object.__setattr__(self, "label_map", label_map)
        object.__setattr__(self, "modalities", tuple(str(m) for m in self.modalities))
        object.__setattr__(self, "iou_types", tuple(str(t) for t in self.iou_types))

    @classmethod
    def of(cls, value: Preprocessing | Mapping[str, Any] | None) -> Preprocessing | None:
        """A record from a record, a stored dict (:meth:`from_dict`) or ``None``."""
        return value if isinstance(value, Preprocessing) or value is None else cls.from_dict(value)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> Preprocessing | None:
        """The record of a checkpoint's ``preprocessing`` dict, of this version or an older
        shape; ``None`` for an empty one (a checkpoint that stores none).

        Raises:
            ValueError: a field's value the record refuses, or a newer version.
        """
        values = dict(values or {})
        if not values:
            return None
        version = int(values.pop("version", 1))
        if version > PREPROCESSING_VERSION:
            raise ValueError(f"preprocessing: version {version} is newer than this nlnet reads "
                             f"({PREPROCESSING_VERSION}); update nlnet")  # fmt: skip
        if version == 1:
            values = _from_v1(values)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known and v is not None})

    def to_dict(self) -> dict[str, Any]:
        """Plain lists and numbers (``torch.load(weights_only=True)``-safe): ``version``,
        ``kind``, and every field that differs from its default."""
        out: dict[str, Any] = {"version": PREPROCESSING_VERSION, "kind": self.kind}
        blank = {f.name: f for f in dataclasses.fields(self)}
        for name, f in blank.items():
            value = getattr(self, name)
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else (
                f.default)  # fmt: skip
            if name in ("kind", "normalize") or value is None or (
                value == default and name not in ("mean", "std")):  # fmt: skip
                continue
            out[name] = _plain(value)
        if self.kind == "volume":
            out["normalize"] = self.normalize
        return out

    @property
    def is_video(self) -> bool:
        """Whether this prepares clips (a video model)."""
        return self.kind == "clip"

    def crop_hw(self) -> tuple[int, int] | None:
        """The model input's ``(H, W)`` when it is fixed (a crop), else ``None``."""
        if self.crop is None:
            return None
        if isinstance(self.crop, tuple):
            return (self.crop[0], self.crop[-1])
        return (int(self.crop), int(self.crop))

    def replace(self, **changes: Any) -> Preprocessing:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)


def _floats(values: Sequence[float]) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    return value


def _from_v1(values: dict[str, Any]) -> dict[str, Any]:
    """The five shapes written before the record was versioned, as this version's fields."""
    if "iou_types" in values:
        return {**values, "kind": "boxes"}
    if "upscale" in values:
        return {**values, "kind": "super_resolution"}
    if values.get("kind") == "volume":
        return {**values, "window": values.get("window") or values.get("patch")}
    values.pop("kind", None)
    if values.get("num_frames"):
        return {**values, "kind": "clip"}
    if values.get("input_kind") == "image" or "resize" in values:
        crop = values.get("size") or 224  # an image classifier's crop was called ``size``
        return {**values, "kind": "image", "size": values.get("resize") or -(-crop * 8 // 7),
                "crop": crop}  # fmt: skip
    return {**values, "kind": "image"}
