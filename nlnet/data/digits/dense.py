"""The built-in dense task: images of real handwritten digits where a pixel's label needs context.

Every image (``size x size``, black with Gaussian noise) shows a **cue**, a white digit of
scikit-learn's 1797 real 8x8 scans (``load_digits``, shipped with scikit-learn: no download)
inside a thin white box, and ``num_digits`` unboxed white digits at other, non-overlapping
positions. Each unboxed digit is labelled by its relation to the cue, not by its own appearance:

* category 1 ``cue``: the boxed digit (recognisable locally, by its box);
* category 2 ``match``: a digit of the cue's class (another scan, never the cue's image);
* category 3 ``other``: a digit of any other class.

Whether a digit is ``match`` or ``other`` depends on a digit elsewhere in the image, at a random
distance: a convolutional network has to carry the cue's class across the image through its
receptive field, while a non-local block ("Non-local Neural Networks", arXiv:1711.07971, Sec. 3, Eq. 1) lets every
position look at the cue directly. Each image has at least one ``match`` and one ``other``
digit (their numbers are drawn uniformly), so a local guess is right about half of the time.

The images and labels are written as real files, read back by the normal loaders:

* ``root/<split>/images/<id>.png`` (RGB) and ``root/<split>/masks/<id>.png`` (class id per pixel:
  0 background, 1 cue, 2 match, 3 other) for :class:`nlnet.data.segmentation.images.SegmentationFolder`;
* ``root/annotations/instances_<split>.json``: COCO format (boxes, RLE masks, areas) for
  :class:`nlnet.data.detection.coco.CocoDataset` and pycocotools' evaluation.

A digit's mask is its stroke pixels (intensity > 0.25) grown by one pixel; its box is the mask's
tight bounding box. Digit images are split into disjoint train/val/test pools before any image
is drawn (:func:`nlnet.data.digits.video.split_digit_indices`), so test images contain only scans
never seen in training. Generation is deterministic in the configuration.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from nlnet.data.digits.video import draw_digit, load_digit_bank, place_squares, split_digit_indices

__all__ = [
    "CATEGORIES",
    "PRETRAIN_CLASS_NAMES",
    "DenseDigitsConfig",
    "digit_class_masks",
    "generate_dense_image",
    "prepare_dense_digits",
    "seed_data",
]

SPLITS: tuple[str, ...] = ("train", "val", "test")
GENERATOR_VERSION = 1

#: COCO categories of the task (id, name); the semantic masks use the same ids (0 = background).
CATEGORIES: tuple[tuple[int, str], ...] = ((1, "cue"), (2, "match"), (3, "other"))

_MASK_THRESHOLD = 0.25


@dataclasses.dataclass(frozen=True)
class DenseDigitsConfig:
    """Size and difficulty of the dense digits task.

    Attributes:
        size: image height and width in pixels.
        digit_size: side of a rendered digit (the 8x8 scans upscaled bilinearly).
        num_digits: unboxed digits per image besides the cue (>= 2).
        digits: the digit classes used.
        noise: standard deviation of the Gaussian pixel noise (intensities in [0, 1]).
        num_train, num_val, num_test: images per split.
        split_fractions: fractions of the 1797 digit scans given to train/val/test.
        seed: the seed every random choice derives from.
    """

    size: int = 64
    digit_size: int = 12
    num_digits: int = 4
    digits: tuple[int, ...] = (0, 1, 2, 3)
    noise: float = 0.05
    num_train: int = 2000
    num_val: int = 300
    num_test: int = 300
    split_fractions: tuple[float, float, float] = (0.6, 0.15, 0.25)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_digits < 2:
            raise ValueError(
                f"num_digits: expected >= 2 (a match and an other), got {self.num_digits}"
            )
        if len(set(self.digits)) < 2 or not set(self.digits) <= set(range(10)):
            raise ValueError(f"digits: expected >= 2 distinct classes in 0..9, got {self.digits}")
        foot = self.digit_size + 2
        if (self.size // foot) ** 2 < self.num_digits + 1:
            raise ValueError(
                f"size: {self.num_digits + 1} digits of footprint {foot} do not fit in a "
                f"{self.size}x{self.size} image"
            )
        for name in ("num_train", "num_val", "num_test"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected a positive number of images")

    def split_size(self, split: str) -> int:
        if split not in SPLITS:
            raise ValueError(f"split: expected one of {SPLITS}, got {split!r}")
        return int(getattr(self, f"num_{split}"))

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "version": GENERATOR_VERSION}

    def fingerprint(self) -> str:
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def generate_dense_image(
    rng: np.random.Generator,
    cfg: DenseDigitsConfig,
    images: np.ndarray,
    by_class: dict[int, np.ndarray],
) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
    """Draw one image.

    Returns:
        ``(image, semantic, instances)``: uint8 ``(size, size, 3)``, uint8 ``(size, size)``
        class ids, and per object ``{"category_id", "mask" (bool HxW), "digit"}``.
    """
    S, s = cfg.size, cfg.digit_size
    canvas = np.zeros((S, S, 3), dtype=np.float32)
    corners = place_squares(rng, cfg.num_digits + 1, S, s + 2)
    cue = int(rng.choice(cfg.digits))
    n_match = int(rng.integers(1, cfg.num_digits))  # 1 .. num_digits - 1
    others = [d for d in cfg.digits if d != cue]
    classes = [cue] * n_match + [int(rng.choice(others)) for _ in range(cfg.num_digits - n_match)]
    classes = [classes[i] for i in rng.permutation(len(classes))]
    cue_id = int(rng.choice(by_class[cue]))
    white = np.ones(3, dtype=np.float32)
    objects = [(1, cue, images[cue_id], True)]
    for c in classes:
        pool = by_class[c][by_class[c] != cue_id]
        objects.append((2 if c == cue else 3, c, images[int(rng.choice(pool))], False))
    semantic = np.zeros((S, S), dtype=np.uint8)
    instances = []
    for (cat, digit, img, box), (y, x) in zip(objects, corners):
        y0, x0, y1, x1 = draw_digit(canvas, img, y, x, white, box=box)
        mask = np.zeros((S, S), dtype=bool)
        mask[y0:y1, x0:x1] = img > _MASK_THRESHOLD
        mask = _grow(mask)
        semantic[mask] = cat
        instances.append({"category_id": cat, "mask": mask, "digit": digit})
    if cfg.noise > 0:
        canvas += rng.normal(0.0, cfg.noise, size=canvas.shape).astype(np.float32)
    image = (np.clip(canvas, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    return image, semantic, instances


def _grow(mask: np.ndarray) -> np.ndarray:
    """Binary dilation by one pixel (3x3 square)."""
    out = mask.copy()
    out[1:] |= mask[:-1]
    out[:-1] |= mask[1:]
    grown = out.copy()
    grown[:, 1:] |= out[:, :-1]
    grown[:, :-1] |= out[:, 1:]
    return grown


def _coco_annotation(ann_id: int, image_id: int, inst: dict[str, Any]) -> dict[str, Any]:
    """COCO annotation of one digit; its mask as uncompressed RLE (no pycocotools needed)."""
    from nlnet.data.detection.rle import mask_bbox, mask_to_rle

    mask = np.asarray(inst["mask"]) != 0
    rle = mask_to_rle(mask)
    x, y, w, h = mask_bbox(mask)
    area = float(mask.sum())
    return {
        "id": ann_id,
        "image_id": image_id,
        "category_id": int(inst["category_id"]),
        "bbox": [x, y, w, h],
        "area": area,
        "segmentation": rle,
        "iscrowd": 0,
        "digit": int(inst["digit"]),
    }


def _write_split(root: Path, cfg: DenseDigitsConfig, split: str) -> None:
    from PIL import Image

    images, labels = load_digit_bank(cfg.digit_size)
    pool = split_digit_indices(labels, cfg.split_fractions, cfg.seed)[split]
    by_class = {c: pool[labels[pool] == c] for c in cfg.digits}
    sid = SPLITS.index(split)
    (root / split / "images").mkdir(parents=True, exist_ok=True)
    (root / split / "masks").mkdir(parents=True, exist_ok=True)
    coco: dict[str, Any] = {
        "info": {"description": f"nlnet dense digits, {split}", "config": cfg.to_dict()},
        "images": [],
        "annotations": [],
        "categories": [{"id": i, "name": n, "supercategory": "digit"} for i, n in CATEGORIES],
    }
    for i in range(cfg.split_size(split)):
        rng = np.random.default_rng([cfg.seed, sid, 11, i])
        image, semantic, instances = generate_dense_image(rng, cfg, images, by_class)
        name = f"{i:06d}.png"
        Image.fromarray(image).save(root / split / "images" / name)
        Image.fromarray(semantic).save(root / split / "masks" / name)
        image_id = i + 1
        coco["images"].append(
            {"id": image_id, "file_name": name, "height": cfg.size, "width": cfg.size}
        )
        for inst in instances:
            ann_id = len(coco["annotations"]) + 1
            coco["annotations"].append(_coco_annotation(ann_id, image_id, inst))
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    with open(root / "annotations" / f"instances_{split}.json", "w") as f:
        json.dump(coco, f)


def default_dense_cache_dir() -> Path:
    """``$NLNET_CACHE`` or ``~/.cache/nlnet``, sub-folder ``dense_digits``."""
    base = os.environ.get("NLNET_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "nlnet")
    return Path(base) / "dense_digits"


def seed_data(cfg: DenseDigitsConfig, seed: int, base: str | os.PathLike | None = None) -> Path:
    """The images of ``cfg`` drawn with ``seed`` (:func:`prepare_dense_digits`), in
    ``<base>/<fingerprint>`` (default base: the cache folder): one folder per seed."""
    cfg = dataclasses.replace(cfg, seed=int(seed))
    base = Path(base) if base is not None else default_dense_cache_dir()
    return prepare_dense_digits(cfg, base / cfg.fingerprint())


def prepare_dense_digits(
    cfg: DenseDigitsConfig | None = None,
    root: str | os.PathLike | None = None,
    *,
    force: bool = False,
) -> Path:
    """Write the task's PNG images, PNG masks and COCO json files (skipped if already there).

    Args:
        cfg: the configuration (default :class:`DenseDigitsConfig`).
        root: output folder; default ``<cache>/dense_digits/<fingerprint>``.
        force: regenerate even when a matching manifest exists.

    Returns:
        The root folder (``<split>/images``, ``<split>/masks``, ``annotations/instances_<split>.json``).
    """
    cfg = cfg or DenseDigitsConfig()
    root = Path(root) if root is not None else default_dense_cache_dir() / cfg.fingerprint()
    manifest = root / "manifest.json"
    if not force and manifest.is_file():
        try:
            if json.loads(manifest.read_text()).get("fingerprint") == cfg.fingerprint():
                return root
        except (OSError, ValueError):
            pass
    # written into a private folder, then renamed: a concurrent run (another seed) never reads
    # a half-written split, and never deletes the files another run is reading
    tmp = root.with_name(f"{root.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for split in SPLITS:
        _write_split(tmp, cfg, split)
    text = json.dumps({"fingerprint": cfg.fingerprint(), "config": cfg.to_dict()})
    (tmp / "manifest.json").write_text(text)
    if manifest.is_file() and manifest.read_text() == text:  # another run finished first
        shutil.rmtree(tmp, ignore_errors=True)
        return root
    root.mkdir(parents=True, exist_ok=True)
    for sub in (*SPLITS, "annotations", "manifest.json"):  # only what this function writes
        shutil.rmtree(root / sub, ignore_errors=True)
        (tmp / sub).rename(root / sub)
    tmp.rmdir()
    return root


#: The pre-training's pixel classes (the dense demos' stand-in for ImageNet, Sec. 4.1): each digit
#: pixel named by its own class, whatever its relation to the cue.
PRETRAIN_CLASS_NAMES: list[str] = ["background", "digit 0", "digit 1", "digit 2", "digit 3"]


def digit_class_masks(root: Path, split: str) -> dict[str, np.ndarray]:
    """Per image file name, the pre-training's mask ``(H, W)`` uint8: 0 background, ``1 + d`` on the
    pixels of a digit of class ``d`` (the cue's too), from the task's COCO annotations."""
    import json

    from nlnet.data.detection.rle import rle_to_mask

    coco = json.loads((Path(root) / "annotations" / f"instances_{split}.json").read_text())
    masks = {im["id"]: np.zeros((im["height"], im["width"]), np.uint8) for im in coco["images"]}
    for ann in coco["annotations"]:
        masks[ann["image_id"]][rle_to_mask(ann["segmentation"]).astype(bool)] = 1 + ann["digit"]
    return {im["file_name"]: masks[im["id"]] for im in coco["images"]}
