"""The typed ``data`` section of ``task: detection`` (COCO-format files), beside the COCO
dataset it configures (:class:`nlnet.data.detection.coco.CocoDataset`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DetectionDataConfig", "IOU_TYPES"]

IOU_TYPES = ("bbox", "segm", "keypoints")


@dataclass(frozen=True)
class DetectionDataConfig:
    """The ``data`` section of ``task: detection`` (COCO-format files, Section 6).

    Attributes:
        root: dataset folder (``annotations/instances_<split>.json`` and the images).
        images: image folder of a split under ``root`` (``{split}`` is replaced).
        iou_types: what to load and evaluate (``bbox``, ``segm``, ``keypoints``); ``None``:
            from the model (``bbox`` + ``segm`` for Mask R-CNN, ``bbox`` + ``keypoints`` for
            Keypoint R-CNN).
        hflip: probability of a horizontal flip of a training image (0.5 in Detectron's recipe).
        keep_empty: keep training images without objects.
        train_split: split trained on (``DetectionTask.build_datasets`` of the engine).
        val_split: split validated on (``DetectionTask.build_datasets`` of the engine).
    """

    root: str | None = None
    images: str = "{split}/images"
    iou_types: tuple[str, ...] | None = None
    hflip: float = 0.0
    keep_empty: bool = True
    train_split: str = "train"
    val_split: str = "val"

    def __post_init__(self) -> None:
        if self.iou_types is not None:
            bad = [t for t in self.iou_types if t not in IOU_TYPES]
            if bad or not self.iou_types:
                raise ValueError(
                    f"data.iou_types: expected some of {', '.join(IOU_TYPES)}, got "
                    f"{list(self.iou_types)!r}"
                )
            object.__setattr__(self, "iou_types", tuple(self.iou_types))
        if not 0.0 <= float(self.hflip) <= 1.0:
            raise ValueError(f"data.hflip: expected a probability in [0, 1], got {self.hflip!r}")
        if "{split}" not in self.images:
            raise ValueError(
                f"data.images: expected a template with {{split}}, got {self.images!r}"
            )
