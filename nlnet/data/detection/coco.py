"""COCO-format datasets for detection, instance segmentation and keypoints (read with pycocotools,
the optional ``coco`` extra: ``pip install 'nlnet[coco]'``).

Layout: an image folder and a COCO annotation file (``instances_*.json`` or
``person_keypoints_*.json``). Items are dicts ``{"image", "target"}`` in torchvision's
detection convention, so their lists feed torchvision's ``MaskRCNN`` / ``KeypointRCNN``
directly:

* ``image``: float ``(3, H, W)`` in [0, 1] (the detector normalises it itself);
* ``target``: ``boxes`` float ``(N, 4)`` as ``x1, y1, x2, y2``; ``labels`` int64 ``(N,)`` in
  ``1..K`` (contiguous; 0 is the background), ``masks`` uint8 ``(N, H, W)`` (with
  ``masks=True``), ``keypoints`` float ``(N, K, 3)`` (``x, y, visibility``; with
  ``keypoints=True``), ``image_id`` (the COCO id), ``area``, ``iscrowd``.

Crowd annotations and boxes of zero width or height are dropped from the training targets
(torchvision cannot train on them); evaluation always uses the json file itself through
:class:`pycocotools.cocoeval.COCOeval` (:mod:`nlnet.engine.tasks.detection`).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = [
    "CocoDataset",
    "collate_detection",
    "import_pycocotools",
    "load_coco",
    "quiet_pycocotools",
]


def import_pycocotools(submodule: str, what: str) -> Any:
    """``pycocotools.<submodule>``, or one clear line when the optional package is missing.

    Args:
        submodule: ``"coco"``, ``"cocoeval"`` or ``"mask"``.
        what: what needs it, for the message (e.g. ``"COCO mask AP"``).

    Raises:
        ModuleNotFoundError: ``"<what> needs pycocotools: pip install 'nlnet[coco]'"`` (the engine
            re-raises it as :class:`~nlnet.engine.errors.MissingPackageError`, a user error).
    """
    try:
        return importlib.import_module(f"pycocotools.{submodule}")
    except ImportError:
        raise ModuleNotFoundError(
            f"{what} needs pycocotools: pip install 'nlnet[coco]'", name="pycocotools"
        ) from None


@contextlib.contextmanager
def quiet_pycocotools() -> Iterator[None]:
    """Silence pycocotools' numpy-2 ``DeprecationWarning`` (its Cython mask code passes
    ``copy=False`` to ``__array__``) around a call; other warnings still show."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r".*__array__ implementation doesn't accept a copy keyword",
            category=DeprecationWarning,
        )  # fmt: skip
        yield


def load_coco(annotation_file: str | os.PathLike) -> Any:
    """A quiet :class:`pycocotools.coco.COCO` for ``annotation_file`` (clear error if missing)."""
    path = Path(annotation_file)
    if not path.is_file():
        raise FileNotFoundError(f"annotation_file: no COCO json at {path}")
    coco = import_pycocotools("coco", "reading a COCO annotation file")
    with contextlib.redirect_stdout(io.StringIO()):
        return coco.COCO(str(path))


class CocoDataset(Dataset):
    """Images of a COCO annotation file with torchvision-style detection targets.

    Args:
        image_dir: folder of the images (``file_name`` of each image entry is relative to it).
        annotation_file: the COCO json.
        masks: include instance masks (decoded from polygons or RLE by pycocotools).
        keypoints: include keypoints (needs ``keypoints`` in the annotations).
        keep_empty: keep images without any usable annotation (default: keep; torchvision
            trains on them as background-only images).
        hflip: probability of flipping an item horizontally (training augmentation: boxes,
            masks and keypoints flipped with it; ``left_*``/``right_*`` keypoints swapped). The
            draw uses the global torch generator, which the engine seeds per item.

    Attributes:
        coco: the :class:`pycocotools.coco.COCO` object.
        ids: image ids in order.
        cat_ids: COCO category ids; label ``i + 1`` is ``cat_ids[i]``.
        class_names: category names in label order.
    """

    def __init__(
        self,
        image_dir: str | os.PathLike,
        annotation_file: str | os.PathLike,
        *,
        masks: bool = True,
        keypoints: bool = False,
        keep_empty: bool = True,
        hflip: float = 0.0,
    ) -> None:
        if not 0.0 <= float(hflip) <= 1.0:
            raise ValueError(f"hflip: expected a probability in [0, 1], got {hflip!r}")
        self.hflip = float(hflip)
        self.image_dir = Path(image_dir)
        if not self.image_dir.is_dir():
            raise FileNotFoundError(f"image_dir: no folder at {self.image_dir}")
        self.coco = load_coco(annotation_file)
        self.cat_ids = sorted(self.coco.getCatIds())
        self.class_names = [self.coco.cats[c]["name"] for c in self.cat_ids]
        self._label = {c: i + 1 for i, c in enumerate(self.cat_ids)}
        self.masks = masks
        self.keypoints = keypoints
        ids = sorted(self.coco.imgs)
        if not keep_empty:
            ids = [i for i in ids if self._annotations(i)]
        self.ids = ids

    def label_to_category(self, label: int) -> int:
        """COCO category id of a contiguous label (1..K)."""
        return self.cat_ids[int(label) - 1]

    def __len__(self) -> int:
        return len(self.ids)

    def _annotations(self, image_id: int) -> list[dict[str, Any]]:
        anns = self.coco.loadAnns(self.coco.getAnnIds(imgIds=image_id, iscrowd=False))
        return [a for a in anns if a["bbox"][2] > 0 and a["bbox"][3] > 0]

    def read_image(self, index: int) -> np.ndarray:
        """The RGB image ``(H, W, 3)`` uint8 of item ``index``."""
        from PIL import Image

        info = self.coco.imgs[self.ids[index]]
        with Image.open(self.image_dir / info["file_name"]) as im:
            return np.asarray(im.convert("RGB"))

    def __getitem__(self, index: int) -> dict[str, Any]:
        """``{"image", "target"}`` of image ``index`` (see the module docstring)."""
        image_id = self.ids[index]
        info = self.coco.imgs[image_id]
        image = torch.from_numpy(self.read_image(index).copy()).permute(2, 0, 1).float() / 255.0
        h, w = image.shape[-2:]
        if (h, w) != (info["height"], info["width"]):
            raise ValueError(
                f"image {info['file_name']}: size {h}x{w} differs from its annotation "
                f"{info['height']}x{info['width']}"
            )
        anns = self._annotations(image_id)
        boxes = torch.tensor([a["bbox"] for a in anns], dtype=torch.float32).reshape(-1, 4)
        boxes[:, 2:] += boxes[:, :2]  # xywh -> xyxy
        target: dict[str, torch.Tensor] = {
            "boxes": boxes,
            "labels": torch.tensor(
                [self._label[a["category_id"]] for a in anns], dtype=torch.int64
            ),
            "image_id": torch.tensor(image_id),
            "area": torch.tensor([float(a["area"]) for a in anns], dtype=torch.float32),
            "iscrowd": torch.zeros(len(anns), dtype=torch.int64),
        }
        if self.masks:
            with quiet_pycocotools():
                m = [self.coco.annToMask(a) for a in anns]
            target["masks"] = (
                torch.from_numpy(np.stack(m)) if m else torch.zeros(0, h, w, dtype=torch.uint8)
            )
        if self.keypoints:
            kps = [a.get("keypoints") for a in anns]
            if any(k is None for k in kps):
                raise ValueError(f"image {info['file_name']}: an annotation has no 'keypoints'")
            k = len(self.coco.cats[self.cat_ids[0]].get("keypoints", [])) if not anns else -1
            target["keypoints"] = torch.tensor(kps, dtype=torch.float32).reshape(len(anns), k, 3)
        if self.hflip and float(torch.rand(())) < self.hflip:
            image, target = self._flip(image, target)
        return {"image": image, "target": target}

    def _flip_permutation(self) -> list[int]:
        """Keypoint order after a horizontal flip: ``left_x`` <-> ``right_x`` swapped."""
        names = list(self.coco.cats[self.cat_ids[0]].get("keypoints", []))
        swap = {"left_": "right_", "right_": "left_"}
        out = []
        for n in names:
            side = next((p for p in swap if n.startswith(p)), None)
            other = swap[side] + n[len(side) :] if side else n
            out.append(names.index(other) if other in names else names.index(n))
        return out

    def _flip(
        self, image: torch.Tensor, target: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        w = image.shape[-1]
        target = dict(target)
        boxes = target["boxes"].clone()
        boxes[:, [0, 2]] = w - target["boxes"][:, [2, 0]]
        target["boxes"] = boxes
        if "masks" in target:
            target["masks"] = target["masks"].flip(-1)
        if "keypoints" in target:
            kps = target["keypoints"][:, self._flip_permutation()].clone()
            kps[..., 0] = torch.where(kps[..., 2] > 0, w - kps[..., 0], kps[..., 0])
            target["keypoints"] = kps
        return image.flip(-1), target


def collate_detection(batch: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """``{"image", "target", "skipped"}``: lists of the images and targets of the usable items
    (images of different sizes are allowed) and how many ``None`` items were dropped."""
    items = [item for item in batch if item is not None]
    return {
        "image": [it["image"] for it in items],
        "target": [it["target"] for it in items],
        "skipped": len(batch) - len(items),
    }
