"""The 2D segmentation dataset a data section describes (:func:`image_folder`): the folder or
Cityscapes layout, with the joint image/mask training augmentation when the section asks for it.
(3D volumes: :class:`~nlnet.data.segmentation.volumes.VolumeFolder`.)"""

from __future__ import annotations

from typing import Any

from nlnet.data.segmentation.config import SegmentationDataConfig

__all__ = ["image_folder"]


def image_folder(
    d: SegmentationDataConfig, root: str, split: str, train: bool, **kwargs: Any
) -> Any:
    """The 2D dataset of ``split`` in ``d.layout`` with the training augmentation of ``d``
    (:class:`~nlnet.data.segmentation.transforms.SegmentationAugment`) when ``train`` and any of
    ``scale_range``/``crop``/``flip`` is set.

    Args:
        d: the data section (its ``layout``, ``scale_range``, ``crop`` and ``flip``).
        root: the dataset folder.
        split: the split (``root/<split>``, or Cityscapes' ``leftImg8bit/<split>``).
        train: a training dataset (augmented) rather than a test one.
        **kwargs: passed on to the folder class (``mean``, ``std``, ``num_classes``,
            ``ignore_index``, ``skip_bad``).
    """
    from nlnet.data.segmentation.transforms import SegmentationAugment

    if d.layout == "cityscapes":
        from nlnet.data.segmentation.cityscapes import CityscapesFolder as folder
    else:
        from nlnet.data.segmentation.images import SegmentationFolder as folder
    flip = d.flip or 0.0
    if train and (d.scale_range or d.crop or flip):
        kwargs["transform"] = SegmentationAugment(
            d.scale_range, d.crop, flip, kwargs.get("ignore_index", 255)
        )
    return folder(root, split, **kwargs)
