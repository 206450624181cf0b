"""Super-resolution data: high-resolution photographs, their bicubic low-resolution copies.

Sources:

* ``"builtin"``: real photographs shipped inside pip packages (no download): scikit-image's
  ``skimage.data`` (astronaut, coffee, chelsea, rocket, immunohistochemistry, hubble_deep_field,
  camera, brick, grass, gravel, coins) and scikit-learn's ``load_sample_images`` (china,
  flower). :data:`BUILTIN_SPLITS` trains on some photographs and tests on *other* ones.
* ``"self_similar"``: scikit-image photographs with long-range self-similarity (the case of the
  non-local super-resolution literature): brick, grass, gravel (textures; a brick wall is a
  facade's repeated pattern) and text, page (repeated glyphs), :data:`SELF_SIMILAR_PHOTOS`.
  Self-similarity lies *within* an image, so each one is cut into disjoint bands along its longer
  side (rows of a square image): the first 60 % trains, the next 20 % validates, the last 20 %
  tests (:data:`SELF_SIMILAR_BANDS`, :func:`band_bounds`); no test pixel is ever trained on.
* ``"folder"``: ``root/<split>/*.png|jpg|bmp`` (e.g. DIV2K's ``DIV2K_train_HR``), any size.

The low-resolution input is the high-resolution image down-sampled by the scale factor with
bicubic interpolation and anti-aliasing (``torch.nn.functional.interpolate(mode="bicubic",
antialias=True)``, which follows PIL's bicubic resize; the DIV2K "bicubic" track used MATLAB's
``imresize``, which differs slightly). High-resolution sizes are cropped to a multiple of the scale.

Training items are random patches (``patch`` x ``patch`` low-resolution pixels, a fresh one per
item) flipped / rotated by 90 degrees (the usual EDSR augmentation); test items are the tiles of a grid over each test photograph.
Items: ``(lr (3, h, w), hr (3, s h, s w), index)``, floats in [0, 1].
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import Dataset

__all__ = [
    "BUILTIN_SPLITS",
    "SRImages",
    "SELF_SIMILAR_BANDS",
    "SELF_SIMILAR_PHOTOS",
    "SRPatches",
    "band_bounds",
    "bicubic_downsample",
    "builtin_photos",
    "folder_photos",
    "self_similar_photos",
]

#: Which built-in photographs train and which test (no photograph in both).
BUILTIN_SPLITS: dict[str, tuple[str, ...]] = {
    "train": ("astronaut", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field",
              "camera", "brick", "grass", "coins"),
    "test": ("sklearn:china.jpg", "sklearn:flower.jpg", "chelsea", "gravel"),
}  # fmt: skip
#: Self-similar photographs shipped in scikit-image (none needs a download).
SELF_SIMILAR_PHOTOS: tuple[str, ...] = ("brick", "grass", "gravel", "text", "page")
#: Fractions of each self-similar photograph's longer side: train, val, test bands, in order.
SELF_SIMILAR_BANDS: dict[str, tuple[float, float]] = {
    "train": (0.0, 0.6), "val": (0.6, 0.8), "test": (0.8, 1.0),
}  # fmt: skip
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")


def _rgb(image: np.ndarray) -> np.ndarray:
    image = np.asarray(image)
    if image.dtype == bool:
        image = image.astype(np.uint8) * 255
    if image.ndim == 2:
        image = np.repeat(image[..., None], 3, axis=2)
    return np.ascontiguousarray(image[..., :3].astype(np.uint8))


def builtin_photos(split: str) -> list[tuple[str, np.ndarray]]:
    """``[(name, HxWx3 uint8)]`` of a built-in split (``"train"`` or ``"test"``)."""
    if split not in BUILTIN_SPLITS:
        raise ValueError(f"split: expected one of {sorted(BUILTIN_SPLITS)}, got {split!r}")
    out = []
    for name in BUILTIN_SPLITS[split]:
        if name.startswith("sklearn:"):
            from sklearn.datasets import load_sample_image

            out.append((name, _rgb(load_sample_image(name.split(":", 1)[1]))))
        else:
            import skimage.data

            out.append((name, _rgb(getattr(skimage.data, name)())))
    return out


def band_bounds(length: int, split: str) -> tuple[int, int]:
    """``[start, stop)`` of ``split``'s band along a side of ``length`` pixels
    (:data:`SELF_SIMILAR_BANDS`; the bands of the three splits tile the side without overlap)."""
    if split not in SELF_SIMILAR_BANDS:
        raise ValueError(f"split: expected one of {list(SELF_SIMILAR_BANDS)}, got {split!r}")
    lo, hi = SELF_SIMILAR_BANDS[split]
    return round(lo * length), round(hi * length)


def self_similar_photos(split: str) -> list[tuple[str, np.ndarray]]:
    """``[(name, HxWx3 uint8)]``: ``split``'s band of each of :data:`SELF_SIMILAR_PHOTOS`, cut
    along the photograph's longer side (rows when square); the name tells which pixels, e.g.
    ``"brick[rows 409:512]"``."""
    import skimage.data

    out = []
    for name in SELF_SIMILAR_PHOTOS:
        image = _rgb(getattr(skimage.data, name)())
        axis = 1 if image.shape[1] > image.shape[0] else 0
        start, stop = band_bounds(image.shape[axis], split)
        band = image[start:stop] if axis == 0 else image[:, start:stop]
        what = "cols" if axis else "rows"
        out.append((f"{name}[{what} {start}:{stop}]", np.ascontiguousarray(band)))
    return out


def folder_photos(root: str | Path, split: str) -> list[tuple[str, np.ndarray]]:
    """``[(file name, HxWx3 uint8)]`` of the images in ``root/split`` (sorted)."""
    from PIL import Image

    folder = Path(root) / split
    if not folder.is_dir():
        raise FileNotFoundError(f"no such folder {folder} (expected root/<split>/*.png)")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in _IMAGE_SUFFIXES)
    if not files:
        raise FileNotFoundError(f"no images ({', '.join(_IMAGE_SUFFIXES)}) in {folder}")
    return [(p.name, _rgb(np.asarray(Image.open(p).convert("RGB")))) for p in files]


def to_tensor(image: np.ndarray) -> Tensor:
    """HxWx3 uint8 -> (3, H, W) float in [0, 1]."""
    return torch.from_numpy(image).permute(2, 0, 1).float().div_(255.0)


def bicubic_downsample(hr: Tensor, scale: int) -> Tensor:
    """Bicubic, anti-aliased down-sampling by ``scale`` of ``(..., 3, H, W)`` (H, W multiples
    of ``scale``), clamped to [0, 1] and rounded to 8 bits, as a saved low-resolution image is."""
    batch = hr if hr.dim() == 4 else hr[None]
    h, w = batch.shape[-2:]
    lr = F.interpolate(
        batch, size=(h // scale, w // scale), mode="bicubic", antialias=True, align_corners=False
    )
    lr = lr.clamp_(0, 1).mul_(255).round_().div_(255)
    return lr if hr.dim() == 4 else lr[0]


class SRPatches(Dataset):
    """Random training patches of high-resolution photographs and their bicubic inputs.

    Each ``__getitem__`` cuts a fresh patch (photograph and position drawn from PyTorch's
    generator, which the engine seeds), so an epoch of ``num_patches`` items sees new patches.

    Args:
        photos: ``[(name, HxWx3 uint8)]`` (kept in memory).
        scale: up-sampling factor.
        patch: low-resolution patch size (48 in EDSR); the target is ``scale * patch``.
        num_patches: items per epoch.
        augment: random flips and 90-degree rotations.
    """

    def __init__(
        self,
        photos: Sequence[tuple[str, np.ndarray]],
        scale: int,
        patch: int = 48,
        num_patches: int = 1000,
        *,
        augment: bool = True,
    ) -> None:
        self.hp = patch * scale
        usable = [p for _, p in photos if min(p.shape[:2]) >= self.hp]
        if not usable:
            raise ValueError(
                f"photos: none is at least {self.hp}x{self.hp} pixels (patch {patch} x{scale})"
            )
        self.photos = [torch.from_numpy(p).permute(2, 0, 1).contiguous() for p in usable]
        self.scale, self.augment, self.num_patches = scale, augment, num_patches

    def __len__(self) -> int:
        return self.num_patches

    def __getitem__(self, index: int) -> dict[str, Any]:
        """``{"lr", "hr", "index"}``: a random low-resolution patch, its high-resolution
        original and ``index``."""
        img = self.photos[int(torch.randint(len(self.photos), ()))]
        y = int(torch.randint(img.shape[1] - self.hp + 1, ()))
        x = int(torch.randint(img.shape[2] - self.hp + 1, ()))
        hr = img[:, y : y + self.hp, x : x + self.hp].float() / 255
        if self.augment:
            hr = torch.rot90(hr, int(torch.randint(4, ())), (1, 2))
            if bool(torch.randint(2, ())):
                hr = hr.flip(2)
        return {"lr": bicubic_downsample(hr, self.scale), "hr": hr.contiguous(), "index": index}


class SRImages(Dataset):
    """Test tiles: each photograph cut into a grid of ``tile`` x ``tile`` high-resolution tiles
    (at most ``max_tiles`` per photograph, spread over it); ``tile=None``: whole photographs
    (cropped to a multiple of ``scale``)."""

    def __init__(
        self,
        photos: Sequence[tuple[str, np.ndarray]],
        scale: int,
        tile: int | None = 192,
        max_tiles: int = 4,
    ) -> None:
        if tile is not None and tile % scale:
            raise ValueError(f"tile: expected a multiple of the scale {scale}, got {tile}")
        self.scale, self.items, self.names = scale, [], []
        for name, img in photos:
            h, w = (s - s % scale for s in img.shape[:2])
            if tile is None:
                self.items.append(to_tensor(img[:h, :w]))
                self.names.append(name)
                continue
            ys, xs = range(0, h - tile + 1, tile), range(0, w - tile + 1, tile)
            cells = [(y, x) for y in ys for x in xs]
            pick = np.linspace(0, len(cells) - 1, min(max_tiles, len(cells))).round().astype(int)
            for j in sorted(set(pick.tolist())):
                y, x = cells[j]
                self.items.append(to_tensor(img[y : y + tile, x : x + tile]))
                self.names.append(f"{name}@{y},{x}")

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        """``{"lr", "hr", "index"}`` of tile ``index``."""
        hr = self.items[index]
        return {"lr": bicubic_downsample(hr, self.scale), "hr": hr, "index": index}
