"""The dense digits task: real files, read back by the normal loaders, labels defined by the cue."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from nlnet.data.detection.coco import CocoDataset
from nlnet.data.digits.dense import CATEGORIES, DenseDigitsConfig, prepare_dense_digits
from nlnet.data.segmentation.images import SegmentationFolder, collate_segmentation

CFG = DenseDigitsConfig(size=48, num_train=6, num_val=3, num_test=3, seed=1)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return prepare_dense_digits(CFG, tmp_path_factory.mktemp("dense"))


def test_files_and_loaders_agree(root):
    seg = SegmentationFolder(root, "train", num_classes=4)
    det = CocoDataset(root / "train" / "images", root / "annotations" / "instances_train.json")
    assert len(seg) == len(det) == 6
    assert det.class_names == [n for _, n in CATEGORIES]
    for i in range(len(seg)):
        item = seg[i]
        image, mask, index = item["image"], item["mask"], item["index"]
        target = det[i]["target"]
        assert image.shape == (3, 48, 48) and mask.shape == (48, 48) and index == i
        # the semantic mask is the union of the instance masks, labelled by category
        union = torch.zeros(48, 48, dtype=torch.int64)
        for m, label in zip(target["masks"], target["labels"]):
            union[m.bool()] = int(det.label_to_category(int(label)))
        assert torch.equal(union, mask)
        labels = target["labels"].tolist()
        assert labels.count(1) == 1  # exactly one cue
        assert labels.count(2) >= 1 and labels.count(3) >= 1  # a match and an other
        assert len(labels) == CFG.num_digits + 1
        x1, y1, x2, y2 = target["boxes"].unbind(1)
        assert (x2 > x1).all() and (y2 > y1).all()
    batch = collate_segmentation([seg[0], None, seg[1]])
    images, masks, index = batch["image"], batch["mask"], batch["index"]
    assert batch["skipped"] == 1
    assert images.shape == (2, 3, 48, 48) and masks.shape == (2, 48, 48)
    assert index.tolist() == [0, 1]


def test_coco_json_needs_no_pycocotools_to_write_and_matches_it(root):
    """Masks are uncompressed RLE (written with numpy); pycocotools gives the same box and area."""
    mask_utils = pytest.importorskip("pycocotools.mask", reason="pycocotools is the coco extra")
    det = CocoDataset(root / "val" / "images", root / "annotations" / "instances_val.json")
    anns = list(det.coco.anns.values())
    assert anns and all(isinstance(a["segmentation"]["counts"], list) for a in anns)
    for a in anns:
        info = det.coco.imgs[a["image_id"]]
        rle = mask_utils.frPyObjects(a["segmentation"], info["height"], info["width"])
        assert a["bbox"] == [float(v) for v in mask_utils.toBbox(rle)]
        assert a["area"] == float(mask_utils.area(rle)) > 0


def test_match_means_the_cue_class(root):
    data = json.loads((root / "annotations" / "instances_test.json").read_text())
    by_image: dict[int, list[dict]] = {}
    for a in data["annotations"]:
        by_image.setdefault(a["image_id"], []).append(a)
    for anns in by_image.values():
        cue = [a["digit"] for a in anns if a["category_id"] == 1]
        assert len(cue) == 1
        for a in anns:
            if a["category_id"] == 2:
                assert a["digit"] == cue[0]
            elif a["category_id"] == 3:
                assert a["digit"] != cue[0] and a["digit"] in CFG.digits


def test_deterministic_and_cached(root, tmp_path):
    again = prepare_dense_digits(CFG, tmp_path / "again")
    for split in ("train", "test"):
        a = SegmentationFolder(root, split)
        b = SegmentationFolder(again, split)
        assert all(np.array_equal(a.read_image(i), b.read_image(i)) for i in range(len(a)))
    stamp = (again / "train" / "images" / "000000.png").stat().st_mtime_ns
    prepare_dense_digits(CFG, again)  # manifest matches: nothing rewritten
    assert (again / "train" / "images" / "000000.png").stat().st_mtime_ns == stamp


def test_bad_config_and_missing_masks(tmp_path):
    with pytest.raises(ValueError, match="num_digits"):
        DenseDigitsConfig(num_digits=1)
    with pytest.raises(ValueError, match="do not fit"):
        DenseDigitsConfig(size=24, num_digits=4)
    (tmp_path / "train" / "images").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="masks"):
        SegmentationFolder(tmp_path, "train")
