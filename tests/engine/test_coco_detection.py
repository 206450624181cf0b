"""COCO evaluation and the detection task on the tiny dense digits dataset."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest
import torch
from pycocotools.cocoeval import COCOeval
from torch.utils.data import DataLoader

from nlnet.data.detection.coco import CocoDataset, load_coco
from nlnet.data.digits.dense import DenseDigitsConfig, prepare_dense_digits
from nlnet.engine.tasks.detection import DetectionTask, coco_evaluate, outputs_to_coco
from nlnet.models import create_model


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    cfg = DenseDigitsConfig(size=48, num_train=6, num_val=4, num_test=2, seed=3)
    return prepare_dense_digits(cfg, tmp_path_factory.mktemp("coco"))


def _noisy_outputs(dataset: CocoDataset, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Ground truth with jittered boxes, shifted masks, random scores, some labels swapped."""
    g = torch.Generator().manual_seed(seed)
    outputs = []
    for i in range(len(dataset)):
        t = dataset[i]["target"]
        n = len(t["boxes"])
        boxes = t["boxes"] + torch.randn(n, 4, generator=g) * 2.0
        labels = t["labels"].clone()
        labels[torch.rand(n, generator=g) < 0.3] = 3
        masks = torch.roll(t["masks"].float(), shifts=1, dims=2)[:, None] * 0.9
        scores = torch.rand(n, generator=g)
        outputs.append({"boxes": boxes, "labels": labels, "scores": scores, "masks": masks})
    return outputs


def test_coco_evaluate_matches_pycocotools_run_directly(root):
    ds = CocoDataset(root / "val" / "images", root / "annotations" / "instances_val.json")
    outputs = _noisy_outputs(ds)
    ids = [int(ds[i]["target"]["image_id"]) for i in range(len(ds))]
    results = outputs_to_coco(outputs, ids, ds.label_to_category)
    ours = coco_evaluate(ds.coco, results, ("bbox", "segm"))
    # the same detections through pycocotools alone, from the json file
    gt = load_coco(root / "annotations" / "instances_val.json")
    for iou_type, prefix in (("bbox", "box"), ("segm", "mask")):
        with contextlib.redirect_stdout(io.StringIO()):
            ev = COCOeval(gt, gt.loadRes(results), iou_type)
            ev.evaluate(), ev.accumulate(), ev.summarize()
        assert ours[f"{prefix}_AP"] == pytest.approx(100 * ev.stats[0])
        assert ours[f"{prefix}_AP50"] == pytest.approx(100 * ev.stats[1])
        assert ours[f"{prefix}_AR100"] == pytest.approx(100 * ev.stats[8])
    assert 0 < ours["box_AP"] < 100 and 0 < ours["mask_AP"] < 100
    # perfect detections score 100
    perfect = []
    for i in range(len(ds)):
        t = ds[i]["target"]
        perfect.append(
            {**t, "scores": torch.ones(len(t["boxes"])), "masks": t["masks"][:, None].float()}
        )
    best = coco_evaluate(
        ds.coco, outputs_to_coco(perfect, ids, ds.label_to_category), ("bbox", "segm")
    )
    assert best["box_AP"] == pytest.approx(100.0) and best["mask_AP"] == pytest.approx(100.0)
    assert coco_evaluate(ds.coco, [], ("bbox",))["box_AP"] == 0.0


def test_results_are_coco_format(root):
    ds = CocoDataset(root / "val" / "images", root / "annotations" / "instances_val.json")
    out = _noisy_outputs(ds)[:1]
    res = outputs_to_coco(out, [7], ds.label_to_category)
    box = out[0]["boxes"][0].double()
    assert res[0]["image_id"] == 7
    assert res[0]["bbox"][2] == pytest.approx(float(box[2] - box[0]), abs=1e-3)  # x, y, w, h
    assert set(res[0]["segmentation"]) == {"size", "counts"}
    assert res[0]["category_id"] in ds.cat_ids


@pytest.mark.slow  # a narrow Mask R-CNN still has a 12.8M-parameter box head: ~1 min on 2 cores
def test_detection_task_trains_and_evaluates(root):
    torch.manual_seed(0)
    task = DetectionTask(("bbox", "segm"), data={"root": str(root)})
    train, val = task.build_datasets()
    model = create_model(
        "maskrcnn_r50_fpn_nl", num_classes=4, width_per_group=4, min_size=48, max_size=48
    )
    batch = task.collate([train[i] for i in range(2)])
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    losses = []
    for _ in range(5):
        loss, n = task.loss(model, batch)
        assert n == 2 and torch.isfinite(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    metrics = task.evaluate(model, DataLoader(val, batch_size=2, collate_fn=task.collate))
    assert {"box_AP", "box_AP50", "mask_AP", "mask_AR100"} <= set(metrics)
    assert all(np.isfinite(v) for v in metrics.values())
    assert model.training


def test_task_errors():
    with pytest.raises(ValueError, match="iou_types"):
        DetectionTask(("boxes",))
    with pytest.raises(ValueError, match="data.root"):
        DetectionTask().build_datasets()
    with pytest.raises(FileNotFoundError, match="annotation_file"):
        load_coco("/nonexistent/instances.json")


def _keypoint_json(path, n_images: int = 3) -> None:
    """A tiny person-keypoints file: 2 people per image with COCO's 17 keypoints."""
    rng = np.random.default_rng(0)
    data = {
        "images": [],
        "annotations": [],
        "categories": [{"id": 1, "name": "person", "keypoints": [f"k{i}" for i in range(17)]}],
    }
    for i in range(1, n_images + 1):
        data["images"].append({"id": i, "file_name": f"{i}.png", "height": 64, "width": 64})
        for x0 in (4.0, 34.0):
            kps = np.stack(
                [x0 + rng.uniform(0, 24, 17), rng.uniform(4, 60, 17), np.full(17, 2.0)], 1
            )
            data["annotations"].append(
                {
                    "id": len(data["annotations"]) + 1,
                    "image_id": i,
                    "category_id": 1,
                    "bbox": [x0, 4.0, 26.0, 56.0],
                    "area": 26.0 * 56.0,
                    "iscrowd": 0,
                    "num_keypoints": 17,
                    "keypoints": kps.reshape(-1).round(2).tolist(),
                }
            )
    path.write_text(json.dumps(data))


def test_keypoint_ap_matches_pycocotools(tmp_path):
    from PIL import Image

    (tmp_path / "images").mkdir()
    for i in range(1, 4):
        Image.fromarray(np.zeros((64, 64, 3), dtype=np.uint8)).save(
            tmp_path / "images" / f"{i}.png"
        )
    _keypoint_json(tmp_path / "kp.json")
    ds = CocoDataset(tmp_path / "images", tmp_path / "kp.json", masks=False, keypoints=True)
    g = torch.Generator().manual_seed(0)
    outputs, ids = [], []
    for i in range(len(ds)):
        t = ds[i]["target"]
        assert t["keypoints"].shape == (2, 17, 3)
        kps = t["keypoints"].clone()
        kps[..., :2] += torch.randn(2, 17, 2, generator=g) * 1.5
        outputs.append(
            {
                "boxes": t["boxes"],
                "labels": t["labels"],
                "scores": torch.rand(2, generator=g),
                "keypoints": kps,
            }
        )
        ids.append(int(t["image_id"]))
    results = outputs_to_coco(outputs, ids, ds.label_to_category)
    ours = coco_evaluate(ds.coco, results, ("keypoints",))
    with contextlib.redirect_stdout(io.StringIO()):
        ev = COCOeval(ds.coco, ds.coco.loadRes(results), "keypoints")
        ev.evaluate(), ev.accumulate(), ev.summarize()
    assert ours["kp_AP"] == pytest.approx(100 * ev.stats[0])
    assert ours["kp_AP75"] == pytest.approx(100 * ev.stats[2])
    assert 0 < ours["kp_AP"] < 100


def test_horizontal_flip_moves_boxes_with_masks(root):
    ann = root / "annotations" / "instances_train.json"
    plain = CocoDataset(root / "train" / "images", ann)
    flip = CocoDataset(root / "train" / "images", ann, hflip=1.0)
    (im_a, a), (im_b, b) = plain[0].values(), flip[0].values()
    assert torch.equal(im_b, im_a.flip(-1)) and torch.equal(b["masks"], a["masks"].flip(-1))
    w = im_a.shape[-1]
    for box, mask in zip(b["boxes"], b["masks"]):  # the box still bounds its flipped mask
        xs = mask.any(0).nonzero()[:, 0]
        assert box[0] == xs.min() and box[2] == xs.max() + 1
    torch.testing.assert_close(b["boxes"][:, [0, 2]], w - a["boxes"][:, [2, 0]])
    assert torch.equal(b["labels"], a["labels"])
    with pytest.raises(ValueError, match="hflip"):
        CocoDataset(root / "train" / "images", ann, hflip=1.5)
    # the task drops bad items and says how many
    task = DetectionTask(("bbox", "segm"))
    batch = task.collate([plain[0], None])
    assert len(batch["image"]) == len(batch["target"]) == 1 and batch["skipped"] == 1
    assert task.skipped(batch) == 1
