"""The Cityscapes reader on a generated tree with the real layout and label ids."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from nlnet.data.segmentation.cityscapes import (
    CITYSCAPES_CLASSES,
    CityscapesFolder,
    label_ids_to_train_ids,
)

#: cityscapesScripts' labels.py, (name, id, trainId), written out here to check the reader's table
LABELS = [
    ("unlabeled", 0, 255), ("ego vehicle", 1, 255), ("rectification border", 2, 255),
    ("out of roi", 3, 255), ("static", 4, 255), ("dynamic", 5, 255), ("ground", 6, 255),
    ("road", 7, 0), ("sidewalk", 8, 1), ("parking", 9, 255), ("rail track", 10, 255),
    ("building", 11, 2), ("wall", 12, 3), ("fence", 13, 4), ("guard rail", 14, 255),
    ("bridge", 15, 255), ("tunnel", 16, 255), ("pole", 17, 5), ("polegroup", 18, 255),
    ("traffic light", 19, 6), ("traffic sign", 20, 7), ("vegetation", 21, 8), ("terrain", 22, 9),
    ("sky", 23, 10), ("person", 24, 11), ("rider", 25, 12), ("car", 26, 13), ("truck", 27, 14),
    ("bus", 28, 15), ("caravan", 29, 255), ("trailer", 30, 255), ("train", 31, 16),
    ("motorcycle", 32, 17), ("bicycle", 33, 18),
]  # fmt: skip

CITIES = {"train": ["aachen", "bochum"], "val": ["frankfurt"]}


def write_cityscapes(root, size=(16, 32), per_city=2, seed=0):
    """``root/leftImg8bit/<split>/<city>/<city>_<seq>_<frame>_leftImg8bit.png`` and the gtFine
    files beside each (labelIds, plus the color/instanceIds/polygons files a real tree has)."""
    rng = np.random.default_rng(seed)
    for split, cities in CITIES.items():
        for city in cities:
            img_dir = root / "leftImg8bit" / split / city
            gt_dir = root / "gtFine" / split / city
            img_dir.mkdir(parents=True)
            gt_dir.mkdir(parents=True)
            for k in range(per_city):
                stem = f"{city}_{k:06d}_{19 + k:06d}"
                rgb = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
                Image.fromarray(rgb).save(img_dir / f"{stem}_leftImg8bit.png")
                ids = rng.integers(0, 34, size, dtype=np.uint8)
                Image.fromarray(ids).save(gt_dir / f"{stem}_gtFine_labelIds.png")
                Image.fromarray(rgb).save(gt_dir / f"{stem}_gtFine_color.png")
                Image.fromarray(ids.astype(np.uint16) * 1000).save(
                    gt_dir / f"{stem}_gtFine_instanceIds.png"
                )
                (gt_dir / f"{stem}_gtFine_polygons.json").write_text("{}")
    return root


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return write_cityscapes(tmp_path_factory.mktemp("cityscapes"))


def test_label_ids_map_to_the_19_train_ids():
    ids = np.array([label_id for _, label_id, _ in LABELS], dtype=np.uint8)
    assert label_ids_to_train_ids(ids).tolist() == [train_id for *_, train_id in LABELS]
    evaluated = [(name, t) for name, _, t in LABELS if t != 255]
    assert [t for _, t in evaluated] == list(range(19))
    assert [n.replace(" ", "_") for n, _ in evaluated] == list(CITYSCAPES_CLASSES)
    assert label_ids_to_train_ids(np.array([34, 200]), ignore_index=250).tolist() == [250, 250]


def test_reader_pairs_images_and_label_ids_across_cities(tree):
    train = CityscapesFolder(tree, "train", num_classes=19)
    assert len(train) == 4 and len(CityscapesFolder(tree, "val")) == 2
    assert [p.parent.name for p in train.images] == ["aachen", "aachen", "bochum", "bochum"]
    item = train[3]
    image, mask, index = item["image"], item["mask"], item["index"]
    assert image.shape == (3, 16, 32) and mask.shape == (16, 32) and index == 3
    with Image.open(train.masks[3]) as im:
        raw = np.asarray(im)
    assert train.masks[3].name == "bochum_000001_000020_gtFine_labelIds.png"
    lut = {label_id: train_id for _, label_id, train_id in LABELS}
    assert mask.tolist() == [[lut[int(v)] for v in row] for row in raw]
    assert set(mask.unique().tolist()) <= set(range(19)) | {255}


def test_reader_errors_name_what_is_missing(tree, tmp_path):
    with pytest.raises(FileNotFoundError, match="leftImg8bit/test"):
        CityscapesFolder(tree, "test")
    broken = write_cityscapes(tmp_path / "broken")
    victim = next((broken / "gtFine" / "val" / "frankfurt").glob("*_labelIds.png"))
    victim.unlink()
    with pytest.raises(FileNotFoundError, match="has no mask"):
        CityscapesFolder(broken, "val")


def test_segmentation_task_trains_on_the_cityscapes_layout_with_augmentation(tree):
    from nlnet.engine.tasks.segmentation import SegmentationTask
    from nlnet.models import create_model

    data = {"root": str(tree), "layout": "cityscapes", "scale_range": [0.5, 2.0],
            "crop": [16, 16], "flip": 0.5}  # fmt: skip
    task = SegmentationTask(19, data=data)
    assert task.class_names == list(CITYSCAPES_CLASSES)
    train, val = task.build_datasets()
    assert all(train[i]["mask"].shape == (16, 16) for i in range(len(train)))
    assert val[0]["mask"].shape == (16, 32)  # evaluation on whole images
    torch.manual_seed(0)
    model = create_model("unet2d", num_classes=19, base_channels=4, depth=2)
    loss, n = task.loss(model, task.collate([train[i] for i in range(4)]))
    assert n == 4 and torch.isfinite(loss)
    metrics = task.evaluate(model, val)
    assert "iou_traffic_light" in metrics and 0 <= metrics["pixel_acc"] <= 100


def test_cityscapes_config_trains_and_evaluates_by_sliding_window(tree, tmp_path, capsys):
    """``nlnet train --config dense/seg_r50_nl`` on the generated tree (a tiny model of the same
    head, crops that fit it), then ``nlnet eval`` on 16x32 images by 16x16 windows."""
    import json

    from nlnet.cli import main
    from nlnet.engine.config import load_config

    data = load_config("dense/seg_r50_nl").data
    assert (data.layout, data.scale_range, data.crop, data.flip) == (
        "cityscapes",
        (0.5, 2.0),
        (512, 1024),
        0.5,
    )
    out = tmp_path / "run"
    argv = ["train", "--config", "dense/seg_r50_nl", f"data.root={tree}", f"output_dir={out}",
            "model.name=seg_tiny_nl", "model.init=null", "data.crop=[16,16]",
            "optim.max_iters=2", "optim.steps=[]", "train.batch_size=2", "train.workers=0",
            "train.device=cpu", "train.progress=false", "eval.workers=0", "train.ckpt_every=0"]  # fmt: skip
    torch.manual_seed(0)
    assert main(argv) == 0
    capsys.readouterr()
    ckpt = out / "checkpoints" / "final.pt"
    assert main(["eval", "--checkpoint", str(ckpt), "data.sliding_window=true"]) == 0
    text = capsys.readouterr().out
    metrics = json.loads(text[("\n" + text).rindex("\n{") :])
    assert 0 <= metrics["pixel_acc"] <= 100 and "iou_bicycle" in metrics
