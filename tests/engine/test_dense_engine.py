"""Segmentation and detection through the engine: nlnet train/evaluate, checkpoints, exact resume
and 2-process DDP on the tiny dense digits task."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from dense_engine_helpers import dense_cfg, records, run, tiny_data

from nlnet.engine.checkpoint import build_model_from_checkpoint as load_model
from nlnet.engine.checkpoint import checkpoint_info, load_checkpoint  # noqa: E402
from nlnet.engine.config import replace  # noqa: E402
from nlnet.engine.evaluation import evaluate  # noqa: E402


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tiny_data(tmp_path_factory.mktemp("dense_digits"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


# ------------------------------------------------------------------------------ detection task
def test_detection_trains_through_the_engine_and_loads_back(root, tmp_path):
    cfg = dense_cfg("detection", "maskrcnn_tiny_nl", root, tmp_path / "run",
                    **{"train.val_split": "val", "optim.max_iters": 2})  # fmt: skip
    model, summary = run(cfg)
    assert summary["iterations"] == 2 and not summary["stopped"]
    # validation: COCO box and mask AP through pycocotools
    assert {"box_AP", "box_AP50", "mask_AP", "mask_AR100"} <= set(summary["val"])
    # each of torchvision's loss terms is logged, and they sum to the logged loss
    rec = [r for r in records(cfg.output_dir) if r["kind"] == "train"][-1]
    terms = ["loss_box_reg", "loss_classifier", "loss_mask", "loss_objectness", "loss_rpn_box_reg"]
    assert rec["loss"] == pytest.approx(sum(rec[k] for k in terms), rel=1e-5)
    # the checkpoint: model name, class count inferred from the json (3 categories + background)
    info = checkpoint_info(summary["checkpoint"])
    assert info.model_name == "maskrcnn_tiny_nl" and info.num_classes == 4
    assert info.class_names == ["__background__", "cue", "match", "other"]
    assert info.model_options == {}  # no classifier dropout for detectors
    loaded = load_model(summary["checkpoint"]).eval()
    model.eval()
    image = [torch.rand(3, 64, 64)]
    with torch.no_grad():
        a, b = model(image)[0], loaded(image)[0]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # nlnet eval's path: the same metrics from the checkpoint, on the test split
    metrics = evaluate(cfg, summary["checkpoint"])
    assert metrics["split"] == "test" and 0.0 <= metrics["mask_AP"] <= 100.0


def test_detection_task_from_config_options(root, tmp_path):
    from nlnet.engine.errors import DataError, UserError
    from nlnet.engine.tasks import get_task

    task = get_task(dense_cfg("detection", "maskrcnn_tiny", root, tmp_path / "a"))
    assert task.iou_types == ("bbox", "segm") and task.data.hflip == 0.5
    kp = get_task(dense_cfg("detection", "keypointrcnn_r101_fpn", root, tmp_path / "b"))
    assert kp.iou_types == ("bbox", "keypoints")  # the model's kind decides what is evaluated
    with pytest.raises(UserError, match="data.iou_types"):
        get_task(dense_cfg("detection", "maskrcnn_tiny", root, tmp_path / "c",
                           **{"data.iou_types": ["boxes"]}))  # fmt: skip
    with pytest.raises(DataError, match="split 'nosuch'"):
        task.build_dataset("nosuch")
    ds = task.build_dataset("train")
    assert task.num_classes(ds) == 4
    batch = task.collate([ds[0], None, ds[1]])
    assert len(batch["image"]) == len(batch["target"]) == 2 and task.skipped(batch) == 1
    assert task.loss(None, {"image": [], "target": [], "skipped": 0}) == (None, 0)


def test_train_command_with_a_detection_config(root, tmp_path, capsys):
    """``nlnet train --config`` + ``nlnet eval`` on the shipped smoke config."""
    from nlnet.cli import main

    out = tmp_path / "cli"
    over = [f"data.root={root}", f"output_dir={out}", "optim.epochs=0", "optim.max_iters=2",
            "optim.steps=[]", "train.batch_size=2", "train.device=cpu", "train.val_split=null",
            "model.name=maskrcnn_tiny", "optim.schedule=multistep"]  # fmt: skip
    assert main(["train", "--config", "smoke/maskrcnn_tiny_digits.yaml", *over]) == 0
    ckpt = out / "checkpoints" / "final.pt"
    assert ckpt.is_file()
    capsys.readouterr()
    assert main(["eval", "--config", "smoke/maskrcnn_tiny_digits.yaml", "--checkpoint",
                 str(ckpt), *over]) == 0  # fmt: skip
    assert "box_AP" in capsys.readouterr().out


def test_train_command_with_the_segmentation_smoke_config(root, tmp_path, capsys):
    """``nlnet train --config smoke/seg_tiny_digits`` builds seg_tiny_nl from the config (no
    classifier dropout is passed to a dense model) and its checkpoint loads back."""
    from nlnet.cli import main

    out = tmp_path / "seg"
    over = [f"data.root={root}", f"output_dir={out}", "optim.epochs=0", "optim.max_iters=2",
            "optim.schedule=multistep", "optim.steps=[]", "train.batch_size=4",
            "train.device=cpu"]  # fmt: skip
    assert main(["train", "--config", "smoke/seg_tiny_digits.yaml", *over]) == 0
    ckpt = out / "checkpoints" / "final.pt"
    info = checkpoint_info(ckpt)
    assert info.model_name == "seg_tiny_nl" and info.model_options == {}
    assert info.class_names == ["background", "cue", "match", "other"]
    model = load_model(ckpt)
    assert model(torch.rand(1, 3, 64, 64)).shape == (1, 4, 64, 64)
    capsys.readouterr()
    assert main(["eval", "--config", "smoke/seg_tiny_digits.yaml", "--checkpoint", str(ckpt),
                 *over]) == 0  # fmt: skip
    assert "mIoU" in capsys.readouterr().out


# ------------------------------------------------------------------------------ exact resume
@pytest.mark.parametrize(
    "task, model",
    [("segmentation", "seg_tiny_nl"), ("detection", "maskrcnn_tiny_nl")],
)
def test_dense_resume_is_bit_exact(root, tmp_path, task, model):
    """Interrupted after 2 of 4 steps (mid-epoch) and resumed: the same weights and losses as an
    uninterrupted run (trained BN, random flips and the detector's RoI sampling included)."""
    ref, ref_sum = run(dense_cfg(task, model, root, tmp_path / "ref"))
    cfg = dense_cfg(task, model, root, tmp_path / "cut", **{"train.stop_after": 2})
    _, s1 = run(cfg)
    assert (
        s1["stopped"]
        and load_checkpoint(Path(cfg.output_dir) / "checkpoints" / "last.pt")["iteration"] == 2
    )
    torch.manual_seed(123)  # a fresh process: other initial weights and generator state
    resumed, s2 = run(replace(cfg, **{"train.stop_after": 0}), resume=True)
    assert s2["iterations"] == ref_sum["iterations"] == 4
    _assert_same_weights(ref.state_dict(), resumed.state_dict())
    losses = [r["loss"] for r in records(cfg.output_dir) if r["kind"] == "train"]
    assert losses == [r["loss"] for r in records(ref_sum["run_dir"]) if r["kind"] == "train"]


# ------------------------------------------------------------------------------ DDP (gloo)
def _spawn(tmp_path: Path, cfg_args: tuple) -> tuple[list[dict], list[dict]]:
    from dense_engine_helpers import ddp_worker

    out = tmp_path / "ranks"
    out.mkdir()
    mp.spawn(ddp_worker, args=(2, _free_port(), cfg_args, str(out)), nprocs=2, join=True)
    states = [torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(2)]
    summaries = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    return states, summaries


@pytest.mark.slow  # two spawned processes: 14 s on 2 idle cores, ~1 min when shared
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo")
def test_segmentation_ddp_equals_single_process(root, tmp_path):
    """2 processes x 1 image = 1 process x 2 images. BN frozen (``train.freeze_bn``), so that the
    statistics do not depend on how the batch is split; seg_tiny has no block (whose norm would
    stay trainable)."""
    over = {"train.freeze_bn": True, "train.batch_size": 1, "train.val_split": "val"}
    states, summaries = _spawn(
        tmp_path, ("segmentation", "seg_tiny", str(root), str(tmp_path / "ddp"), over)
    )
    assert all(s["world_size"] == 2 for s in summaries)
    _assert_same_weights(states[0], states[1])  # the ranks stay in sync
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single, _ = run(dense_cfg("segmentation", "seg_tiny", root, tmp_path / "single",
                                  **{**over, "train.batch_size": 2}))  # fmt: skip
    finally:
        torch.set_num_threads(old)
    for name, ref in single.state_dict().items():
        torch.testing.assert_close(states[0][name], ref, rtol=1e-4, atol=1e-5, msg=name)
    assert summaries[0]["val"]["mIoU"] == pytest.approx(summaries[1]["val"]["mIoU"])
    assert (tmp_path / "ddp" / "checkpoints" / "final.pt").is_file()


@pytest.mark.slow  # two spawned detectors: 12 s on 2 idle cores, ~1 min when shared
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo")
def test_detection_ddp_keeps_the_ranks_in_sync(root, tmp_path):
    """Detection under 2-process DDP: gradients averaged (both ranks end with the same parameters),
    one run directory, AP from pycocotools. Not compared with one process: each rank draws its
    own RPN/RoI samples, so the two runs differ by construction."""
    over = {"train.batch_size": 1, "train.val_split": "val"}
    states, summaries = _spawn(
        tmp_path, ("detection", "maskrcnn_tiny_nl", str(root), str(tmp_path / "ddp"), over)
    )
    from nlnet.models import create_model

    torch.manual_seed(0)
    init = create_model("maskrcnn_tiny_nl", num_classes=4)
    params = [n for n, _ in init.named_parameters()]  # BN running statistics are per rank
    _assert_same_weights(*({n: s[n] for n in params} for s in states))
    init_state = init.state_dict()
    assert any(not torch.equal(init_state[n], states[0][n]) for n in params)  # it trained
    assert all(s["world_size"] == 2 and "box_AP" in s["val"] for s in summaries)
    recs = records(tmp_path / "ddp")
    assert [r["iter"] for r in recs if r["kind"] == "train"] == [1, 2, 3, 4]


# ------------------------------------------------------------------------------ keypoints
def _keypoint_root(root: Path) -> Path:
    """A tiny person-keypoints dataset in COCO's layout: noise images, 2 people each."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    names = ["nose", "left_eye", "right_eye", "left_hand", "right_hand"]
    (root / "annotations").mkdir(parents=True)
    for split, n in (("train", 4), ("val", 2)):
        (root / split / "images").mkdir(parents=True)
        data = {"images": [], "annotations": [],
                "categories": [{"id": 1, "name": "person", "keypoints": names}]}  # fmt: skip
        for i in range(1, n + 1):
            Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(
                root / split / "images" / f"{i}.png"
            )
            data["images"].append({"id": i, "file_name": f"{i}.png", "height": 64, "width": 64})
            for x0 in (4.0, 34.0):
                kps = np.stack([x0 + rng.uniform(0, 24, 5), rng.uniform(4, 60, 5), np.full(5, 2)])
                data["annotations"].append({
                    "id": len(data["annotations"]) + 1, "image_id": i, "category_id": 1,
                    "bbox": [x0, 4.0, 26.0, 56.0], "area": 26.0 * 56.0, "iscrowd": 0,
                    "num_keypoints": 5, "keypoints": kps.T.reshape(-1).round(2).tolist(),
                })  # fmt: skip
        (root / "annotations" / f"person_keypoints_{split}.json").write_text(json.dumps(data))
    return root


@pytest.mark.slow  # a narrow R101 Keypoint R-CNN: 6 s on 2 idle cores, ~1 min when shared
def test_keypoint_rcnn_trains_and_reports_keypoint_ap(tmp_path):
    """``task: detection`` with a Keypoint R-CNN reads person_keypoints_*.json, flips with the
    left/right keypoints swapped, and reports keypoint AP (Table 6's metric)."""
    from torchvision.models.detection.keypoint_rcnn import KeypointRCNNHeads, KeypointRCNNPredictor

    from nlnet.models import create_model

    root = _keypoint_root(tmp_path / "kp")
    cfg = dense_cfg("detection", "keypointrcnn_r101_fpn_nlhead", root, tmp_path / "run",
                    **{"train.val_split": "val", "optim.max_iters": 2})  # fmt: skip
    torch.manual_seed(0)
    model = create_model(  # Table 6's head (8 convs, a block after every 2), 16 channels wide
        "keypointrcnn_r101_fpn_nlhead", num_keypoints=None, width_per_group=4, min_size=64,
        max_size=64, keypoint_head=KeypointRCNNHeads(256, (16,) * 8),
        keypoint_predictor=KeypointRCNNPredictor(16, 5),
    )  # fmt: skip
    model, summary = run(cfg, model=model)
    assert {"box_AP", "kp_AP", "kp_AP75"} <= set(summary["val"])
    assert "mask_AP" not in summary["val"]
    rec = [r for r in records(cfg.output_dir) if r["kind"] == "train"][-1]
    assert "loss_keypoint" in rec
    _check_flip(cfg)


def _check_flip(cfg) -> None:
    """Item 0 flipped: x -> W - x and left/right keypoints swapped."""
    from nlnet.engine.tasks import get_task

    task = get_task(cfg)
    plain = task.build_dataset("train", "test")
    flip = task.build_dataset("train", "train")
    flip.hflip = 1.0
    a, b = plain[0]["target"], flip[0]["target"]
    ka, kb = a["keypoints"], b["keypoints"]
    # order nose, left_eye, right_eye, left_hand, right_hand -> nose, right_eye, left_eye, ...
    perm = [0, 2, 1, 4, 3]
    torch.testing.assert_close(kb[..., 0], 64 - ka[:, perm, 0])
    torch.testing.assert_close(kb[..., 1], ka[:, perm, 1])
    torch.testing.assert_close(b["boxes"][:, 0], 64 - a["boxes"][:, 2])
