"""Cityscapes as it is distributed: ``leftImg8bit`` images and ``gtFine`` label-id masks.

Layout (the official archives ``leftImg8bit_trainvaltest.zip`` and ``gtFine_trainvaltest.zip``
unpacked into one folder)::

    root/leftImg8bit/<split>/<city>/<city>_<seq>_<frame>_leftImg8bit.png
    root/gtFine/<split>/<city>/<city>_<seq>_<frame>_gtFine_labelIds.png

The ``labelIds`` masks hold the 34 Cityscapes label ids (0-33); training and evaluation use the
19 *train ids* of the benchmark, every other label (void, and the classes the benchmark does not
evaluate: parking, rail track, guard rail, bridge, tunnel, pole group, caravan, trailer) becomes
``ignore_index`` (255). The mapping is the ``trainId`` column of cityscapesScripts'
``cityscapesscripts/helpers/labels.py``. Items are those of
:class:`~nlnet.data.segmentation.images.SegmentationFolder` (same normalisation, transform and
``skip_bad``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nlnet.data.segmentation.images import SegmentationFolder, check_labels

__all__ = [
    "CITYSCAPES_CLASSES",
    "CITYSCAPES_TRAIN_IDS",
    "CityscapesFolder",
    "label_ids_to_train_ids",
]

#: the 19 evaluated classes, in train-id order (cityscapesScripts' labels.py, spaces as ``_``)
CITYSCAPES_CLASSES: tuple[str, ...] = (
    "road", "sidewalk", "building", "wall", "fence", "pole", "traffic_light", "traffic_sign",
    "vegetation", "terrain", "sky", "person", "rider", "car", "truck", "bus", "train",
    "motorcycle", "bicycle",
)  # fmt: skip

#: label id -> train id for the evaluated labels (every other id 0-33 is ignored)
CITYSCAPES_TRAIN_IDS: dict[int, int] = {
    7: 0, 8: 1, 11: 2, 12: 3, 13: 4, 17: 5, 19: 6, 20: 7, 21: 8, 22: 9, 23: 10, 24: 11,
    25: 12, 26: 13, 27: 14, 28: 15, 31: 16, 32: 17, 33: 18,
}  # fmt: skip

IMAGE_SUFFIX, MASK_SUFFIX = "_leftImg8bit.png", "_gtFine_labelIds.png"


def label_ids_to_train_ids(label_ids: np.ndarray, ignore_index: int = 255) -> np.ndarray:
    """Map a Cityscapes ``labelIds`` mask to train ids (``ignore_index`` for every label the
    benchmark does not evaluate, and for values outside 0-255)."""
    lut = np.full(256, ignore_index, dtype=np.int64)
    for label_id, train_id in CITYSCAPES_TRAIN_IDS.items():
        lut[label_id] = train_id
    ids = np.asarray(label_ids).astype(np.int64)
    inside = (ids >= 0) & (ids < 256)
    return np.where(inside, lut[np.clip(ids, 0, 255)], ignore_index)


class CityscapesFolder(SegmentationFolder):
    """The Cityscapes ``leftImg8bit``/``gtFine`` folders of one split (module docstring).

    Takes the arguments of :class:`~nlnet.data.segmentation.images.SegmentationFolder`, ``root`` being
    the folder that holds ``leftImg8bit/`` and ``gtFine/`` and ``split`` its sub-folder
    (``train``, ``val``, ``test``); masks are checked after the mapping to train ids, so
    ``num_classes`` is 19.

    Raises:
        FileNotFoundError: a missing split folder, no images, or an image without its
            ``gtFine_labelIds`` mask.
    """

    @staticmethod
    def find_pairs(root: Path, split: str) -> tuple[list[Path], list[Path]]:
        """The ``leftImg8bit`` images of ``split`` (all cities) and their ``gtFine_labelIds``
        masks, in order.

        Raises:
            FileNotFoundError: a missing split folder, no images, or an image without its mask.
        """
        image_dir, mask_dir = root / "leftImg8bit" / split, root / "gtFine" / split
        for d in (image_dir, mask_dir):
            if not d.is_dir():
                raise FileNotFoundError(
                    f"root: expected the folder {d} (Cityscapes layout root/leftImg8bit/<split>/"
                    f"<city> and root/gtFine/<split>/<city>)"
                )
        images = sorted(image_dir.glob(f"*/*{IMAGE_SUFFIX}"))
        if not images:
            raise FileNotFoundError(f"root: no <city>/*{IMAGE_SUFFIX} images in {image_dir}")
        masks = []
        for image in images:
            stem = image.name[: -len(IMAGE_SUFFIX)]
            mask = mask_dir / image.parent.name / f"{stem}{MASK_SUFFIX}"
            if not mask.is_file():
                raise FileNotFoundError(f"root: {image.name} has no mask {mask}")
            masks.append(mask)
        return images, masks

    def read_mask(self, index: int) -> np.ndarray:
        """The mask of item ``index`` in train ids (``ignore_index`` where not evaluated)."""
        from PIL import Image

        with Image.open(self.masks[index]) as im:
            ids = np.asarray(im)
        if ids.ndim != 2:
            raise ValueError(f"mask {self.masks[index]}: expected a single-channel labelIds PNG")
        mask = label_ids_to_train_ids(ids, self.ignore_index)
        check_labels(mask, self.num_classes, self.ignore_index, self.masks[index])
        return mask
