"""The class ids of a segmentation folder's masks, read before training.

``model.num_classes`` left out is the largest label of the masks + 1 (:func:`classes_in_masks`,
with the labels no mask holds named); given, a sample of the training masks is checked for
foreground that the ignore label would hide (:func:`check_foreground`: 0/255 masks saved as
pictures). Both name the first unreadable mask when none can be read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nlnet.data.segmentation.builder import image_folder
from nlnet.data.segmentation.config import SegmentationDataConfig
from nlnet.data.segmentation.volumes import VolumeFolder
from nlnet.engine.distributed import is_main_process
from nlnet.engine.errors import DataError, MissingPackageError
from nlnet.engine.runlog import say

__all__ = ["check_foreground", "classes_in_masks", "mask_labels"]


def classes_in_masks(d: SegmentationDataConfig) -> int:
    """``model.num_classes`` when the config leaves it out: the largest label of the training
    and validation masks (after ``data.label_map``; ``ignore_index`` aside) plus one; 19 for
    Cityscapes. Labels that no mask holds below the largest (``{0, 1, 3}``: class 2) are
    named in a warning: each is an output trained on no example.

    Raises:
        DataError: no ``data.root`` or a missing split folder.
        ConfigError: no readable training mask, or masks of one label only (with the hint for
            0/255 masks, whose 255 is ``data.ignore_index``).
    """
    from nlnet.engine.errors import ConfigError

    if d.layout == "cityscapes":
        return 19
    labels, ignored, first_error = mask_labels(d)
    largest = max(labels, default=-1)
    if largest < 0 and first_error:
        raise DataError(f"data.root: no training mask is readable, e.g. {first_error}")
    if largest < 1:
        raise ConfigError(
            "model.num_classes: the training masks hold "
            f"{'no readable label' if largest < 0 else 'label 0 only'}"
            f"{_ignored_hint(d) if ignored else ''}; set model.num_classes"
        )
    missing = sorted(set(range(largest + 1)) - labels)
    if missing:
        say(f"warning: model.num_classes={largest + 1} from the masks' largest label, but no mask "
            f"holds label(s) {', '.join(map(str, missing[:10]))}{' ...' if len(missing) > 10 else ''}"
            "; those outputs train on no example (map the labels to 0..K-1 with data.label_map, "
            "or set model.num_classes)", is_main_process())  # fmt: skip
    return largest + 1


def _ignored_hint(d: SegmentationDataConfig) -> str:
    return (f"; {d.ignore_index} is data.ignore_index (unlabelled): for 0/{d.ignore_index} masks "
            f"set data.label_map='{{{d.ignore_index}: 1}}'")  # fmt: skip


def check_foreground(d: SegmentationDataConfig) -> None:
    """With ``model.num_classes`` given: refuse training masks whose only labels are 0 and
    ``ignore_index`` (masks saved as 0/255 pictures: every foreground pixel would be ignored).
    8 masks spread over the training split are read first; only when they look so are all the
    training masks read (sparse foreground with a real void label passes).

    Raises:
        ConfigError: no training mask holds a label above 0 while some hold ``ignore_index``.
    """
    from nlnet.engine.errors import ConfigError

    if d.layout == "cityscapes" or d.root is None:
        return
    for sample in (8, None):
        try:
            labels, ignored, _ = mask_labels(d, sample=sample, with_val=False)
        except (DataError, MissingPackageError):  # no training split here (evaluation)
            return
        if not (ignored and labels and max(labels) < 1):
            return
    raise ConfigError(f"data.root: the training masks hold label 0 only{_ignored_hint(d)}")


def mask_labels(
    d: SegmentationDataConfig, sample: int | None = None, with_val: bool = True
) -> tuple[set[int], bool, str | None]:
    """The labels of the readable training (and, ``with_val``, validation) masks
    (``data.label_map`` applied, ``ignore_index`` aside), whether any voxel is
    ``ignore_index``, and the first unreadable mask's error; ``sample``: only that many masks
    of each split, evenly spaced."""
    labels: set[int] = set()
    ignored, first_error = False, None
    if d.root is None:
        raise DataError("data.root: expected the dataset folder (root/<split>/{images,masks})")
    splits = [d.train_split] + ([d.val_split] if d.val_split and with_val else [])
    for split in splits:
        try:
            if d.kind == "volume":
                folder: Any = VolumeFolder(d.root, split, modalities=d.modalities,
                                           label_map=d.label_map, ignore_index=d.ignore_index)  # fmt: skip
            else:
                folder = image_folder(d, d.root, split, False, ignore_index=d.ignore_index)
        except FileNotFoundError as exc:
            if split != d.train_split:
                continue  # no validation split: the training masks alone
            raise DataError(f"data (split {split!r}): {exc}") from None
        except ModuleNotFoundError as exc:
            raise MissingPackageError(str(exc), name=exc.name) from None
        n = len(folder)
        picks = range(n) if sample is None else sorted({i * n // sample for i in range(sample)})
        for i in picks:
            if i >= n:
                continue
            try:
                mask = folder.read_mask(i)
            except (OSError, ValueError) as exc:
                first_error = first_error or str(exc)
                continue  # a bad case: skipped (and named) when the dataset is read
            found = np.unique(mask)
            ignored = ignored or bool((found == d.ignore_index).any())
            labels.update(int(v) for v in found if v != d.ignore_index)
    return labels, ignored, first_error
