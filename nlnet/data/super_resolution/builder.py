"""The dataset of a super-resolution split: training patches or whole test images (in tiles)
of the built-in photographs, their self-similar crops, or a folder of the user's photographs."""

from __future__ import annotations

from torch.utils.data import Dataset

from nlnet.data.super_resolution.config import SuperResolutionData

__all__ = ["build_sr_dataset", "split_photos"]


def split_photos(data: SuperResolutionData, split: str) -> list:
    """The high-resolution photographs of ``split`` (``data.source``: ``builtin``,
    ``self_similar`` or ``folder`` under ``data.root``)."""
    from nlnet.data.super_resolution.dataset import (
        builtin_photos,
        folder_photos,
        self_similar_photos,
    )

    if data.source == "builtin":
        return builtin_photos(split)
    if data.source == "self_similar":
        return self_similar_photos(split)
    return folder_photos(data.root, split)


def build_sr_dataset(data: SuperResolutionData, split: str, mode: str, upscale: int) -> Dataset:
    """Random training patches (``mode="train"``) or the test tiles of ``split``.

    Raises:
        ValueError, FileNotFoundError, OSError: a split without usable photographs, or
            patches larger than they are.
    """
    from nlnet.data.super_resolution.dataset import SRImages, SRPatches

    photos = split_photos(data, split)
    if mode == "train":
        return SRPatches(photos, upscale, data.patch, data.num_patches, augment=data.augment)
    return SRImages(photos, upscale, data.eval_tile, data.eval_max_tiles)
