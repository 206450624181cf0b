"""The typed ``data`` section of ``task: segmentation`` and its key checks, beside the datasets
it configures: 2D image/mask folders (:mod:`nlnet.data.segmentation.images`, the Cityscapes
layout :mod:`nlnet.data.segmentation.cityscapes`, training transforms
:mod:`nlnet.data.segmentation.transforms`) and 3D volumes (:mod:`nlnet.data.segmentation.volumes`).

A bad value is a ``ValueError`` naming the key (``data.<key>: expected ..., got ...``); the
engine reports it as its one-line config error.  What the engine builds from these keys (the
sliding-window forward, the region evaluators) is in :mod:`nlnet.engine.tasks.segmentation.options`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["LAYOUTS", "SegmentationDataConfig"]

#: The 2D folder layouts ``data.layout`` may name.
LAYOUTS = ("folder", "cityscapes")


@dataclass(frozen=True)
class SegmentationDataConfig:
    """The ``data`` section of ``task: segmentation``.

    Attributes:
        root: dataset folder holding ``<split>/images`` and ``<split>/masks``.
        train_split: split trained on (``SegmentationTask.build_datasets`` of the engine).
        val_split: split validated on (``SegmentationTask.build_datasets`` of the engine).
        ignore_index: mask value excluded from the loss and the metrics.
        mean: per-channel normalisation mean on the [0, 1] scale (``kind: image``).
        std: per-channel normalisation standard deviation on the [0, 1] scale (``kind: image``).
        kind: ``image`` (2D PNG/JPEG folders, :class:`~nlnet.data.segmentation.images.SegmentationFolder`)
            or ``volume`` (3D ``.npy``/NIfTI folders, :class:`~nlnet.data.segmentation.volumes.VolumeFolder`:
            per-case z-score over the nonzero voxels instead of ``mean``/``std``).
        patch: ``kind: volume`` training patch ``(d, h, w)``, cropped at random (sizes multiples
            of the network's stride, e.g. 8 for ``unet3d``); empty: whole volumes.
        flip: training: for volumes the probability of mirroring each spatial axis (default
            0.5), for images of a horizontal flip of image and mask (default: never).
        label_map: ``kind: volume``: mask values to replace, e.g. ``{4: 3}`` for BraTS's labels
            ``{0, 1, 2, 4}``.
        modalities: ``kind: volume``: NIfTI file suffixes of the channels in order
            (``<case>_<m>.nii.gz``, e.g. ``[t1, t1ce, t2, flair]``); empty: one file per case.
        layout: ``kind: image``: ``folder`` (``<split>/{images,masks}``) or ``cityscapes``
            (``leftImg8bit``/``gtFine`` label ids -> the 19 train ids,
            :class:`~nlnet.data.segmentation.cityscapes.CityscapesFolder`).
        scale_range: ``kind: image`` training: ``[lo, hi]`` random scale factor of image and
            mask (e.g. ``[0.5, 2.0]``); empty: none.
        crop: ``kind: image`` training crop ``[h, w]`` at a random position (pad: 0 in the
            image, ``ignore_index`` in the mask); empty: whole images.
        sliding_window: evaluation on windows of ``crop`` (images) or ``patch`` (volumes),
            logits averaged where they overlap
            (:func:`~nlnet.engine.tasks.segmentation.sliding_window.sliding_window_inference`); default: whole
            images / volumes in one pass.
        window_overlap: overlap of neighbouring windows, in ``[0, 1)`` (MONAI's default 0.25).
        regions: ``kind: volume``: per-case region Dice ``dice_<name>`` averaged over cases,
            each region a list of raw mask labels (before ``label_map``), e.g. BraTS's
            ``{wt: [1, 2, 4], tc: [1, 4], et: [4]}`` (:mod:`nlnet.engine.tasks.segmentation.region_metrics`).
        hd95: ``kind: volume``: also the regions' 95th-percentile Hausdorff distance
            ``hd95_<name>`` (needs MONAI: ``pip install 'nlnet[medical]'``).
    """

    root: str | None = None
    train_split: str = "train"
    val_split: str = "val"
    ignore_index: int = 255
    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.25, 0.25, 0.25)
    kind: str = "image"
    patch: tuple[int, ...] = ()
    flip: float | None = None
    label_map: dict = field(default_factory=dict)
    modalities: tuple[str, ...] = ()
    layout: str = "folder"
    scale_range: tuple[float, ...] = ()
    crop: tuple[int, ...] = ()
    sliding_window: bool = False
    window_overlap: float = 0.25
    regions: dict = field(default_factory=dict)
    hd95: bool = False

    def __post_init__(self) -> None:
        if len(self.mean) != len(self.std) or any(v <= 0 for v in self.std):
            raise ValueError(
                f"data.mean/data.std: expected one value per channel, std > 0, got "
                f"{self.mean!r}, {self.std!r}"
            )
        object.__setattr__(self, "mean", tuple(float(v) for v in self.mean))
        object.__setattr__(self, "std", tuple(float(v) for v in self.std))
        if self.kind not in ("image", "volume"):
            raise ValueError(f"data.kind: expected image or volume, got {self.kind!r}")
        if self.kind == "image":
            for key in ("patch", "label_map", "modalities", "regions"):
                if getattr(self, key) not in ((), {}, None):
                    raise ValueError(f"data.{key}: only for data.kind volume")
        _check_dense_keys(self)
        if self.patch and (len(self.patch) != 3 or min(self.patch) < 1):
            raise ValueError(f"data.patch: expected 3 positive sizes (d, h, w), got {self.patch!r}")
        if self.flip is not None and not 0 <= self.flip <= 1:
            raise ValueError(f"data.flip: expected a probability in [0, 1], got {self.flip!r}")
        try:
            label_map = {int(k): int(v) for k, v in dict(self.label_map).items()}
        except (TypeError, ValueError):
            raise ValueError(
                f"data.label_map: expected integer labels {{from: to}}, got {self.label_map!r}"
            ) from None
        object.__setattr__(self, "label_map", label_map)


def _set(data: SegmentationDataConfig, key: str, value: Any) -> None:
    object.__setattr__(data, key, value)


def _check_dense_keys(d: SegmentationDataConfig) -> None:
    """Check and normalise ``layout``, ``scale_range``, ``crop``, ``flip``, ``sliding_window``,
    ``window_overlap``, ``regions`` and ``hd95`` of a ``SegmentationDataConfig`` (a
    ``ValueError`` naming the key: a config error)."""
    if d.layout not in LAYOUTS:
        raise ValueError(f"data.layout: expected one of {', '.join(LAYOUTS)}, got {d.layout!r}")
    if d.kind == "volume":
        for key, unset in (("scale_range", ()), ("crop", ()), ("layout", "folder")):
            if getattr(d, key) != unset:
                raise ValueError(f"data.{key}: only for data.kind image")
    if d.scale_range and (len(d.scale_range) != 2 or not 0 < d.scale_range[0] <= d.scale_range[1]):
        raise ValueError(
            f"data.scale_range: expected [lo, hi] with 0 < lo <= hi, got {list(d.scale_range)!r}"
        )
    if d.crop:
        if len(d.crop) not in (1, 2) or min(d.crop) < 1:
            raise ValueError(f"data.crop: expected [h, w] positive sizes, got {list(d.crop)!r}")
        _set(d, "crop", (d.crop[0], d.crop[-1]))
    if not 0 <= d.window_overlap < 1:
        raise ValueError(
            f"data.window_overlap: expected a fraction in [0, 1), got {d.window_overlap!r}"
        )
    if d.sliding_window and not (d.crop if d.kind == "image" else d.patch):
        size = "data.crop" if d.kind == "image" else "data.patch"
        raise ValueError(f"data.sliding_window: needs {size} (the window size)")
    regions = {}
    for name, labels in dict(d.regions).items():
        try:
            ids = tuple(int(v) for v in (labels if isinstance(labels, (list, tuple)) else [labels]))
        except (TypeError, ValueError):
            ids = ()
        if not str(name).isidentifier() or not ids:
            raise ValueError(
                f"data.regions: expected {{name: [labels]}}, e.g. {{wt: [1, 2, 4], tc: [1, 4], "
                f"et: [4]}}, got {d.regions!r}"
            )
        regions[str(name)] = ids
    _set(d, "regions", regions)
    if d.hd95 and not regions:
        raise ValueError("data.hd95: needs data.regions (the regions to measure)")
