"""Every shipped config, as a user runs it: load, build, initialise with the weights it names
(from a ``TORCH_HOME`` of fake files with torchvision's file names, no download), one training
step on a tiny synthetic dataset of its task, a checkpoint, then ``evaluate`` on it.

The full sweep is marked slow (full-size networks on the CPU); the default suite keeps one
config per task and weights route."""

from __future__ import annotations

import json
import math
from pathlib import Path

import helpers
import pytest
import torch

from nlnet.engine.config import config_to_dict, list_configs, load_config
from nlnet.engine.config.sections import plain

DEFAULT = {
    "kinetics/c2d_r50_nl5",  # ImageNet ResNet-50 by name, inflated (Section 4.1)
    "smoke/folder_tiny",  # the documented first run
    "smoke/seg_tiny_digits",
    "smoke/maskrcnn_tiny_digits",
}  # image/*: test_commands.py trains task image_classification; test_finetune.py loads the weights by name
CONFIGS = [c if c in DEFAULT else pytest.param(c, marks=pytest.mark.slow) for c in list_configs()]


def _tiny_data(cfg, tmp: Path) -> tuple[dict, dict]:
    """The data section of a tiny synthetic dataset of the config's task, plus overrides."""
    data, over = plain(cfg.data), {}
    if cfg.task in ("video_classification", "image"):
        over["model.num_classes"] = None  # inferred from the tiny data's folders
    if cfg.task == "video_classification":
        root = helpers.video_tree(tmp / "videos")
        tiny = helpers.video_data(root)
        if cfg.model.name.startswith("slowfast"):  # the Slow pathway takes every alpha-th
            tiny.update(num_frames=8, min_frames=4)  # the tiny videos have 6 frames
        if cfg.model.name.endswith("res5"):  # a block in res5 needs a 2x2 grid there
            tiny.update(train_scale=[64, 72], crop=64, test_scale=64)
        if data.get("type") == "multilabel":
            lines = {"train": ["left/left_0.mp4 0,2", "right/right_0.mp4 1", "left/left_1.mp4 2",
                               "right/right_1.mp4 0,1"], "val": ["left/left_0.mp4 0"]}  # fmt: skip
            for split, rows in lines.items():
                (root / "train" / f"{split}.txt").write_text("\n".join(rows) + "\n")
            tiny.update(type="multilabel", root=str(root / "train"),
                        annotations={"train": "train.txt", "val": "val.txt"})  # fmt: skip
            over["model.num_classes"] = 3
        return tiny, over
    if cfg.task == "image_classification":
        if data.get("builtin"):
            return data, over
        size = 224 if cfg.model.name.startswith(("vit_", "swin_")) else 32
        return {"root": str(helpers.image_tree(tmp / "images")), "size": size}, over
    if data.get("kind") == "volume":  # 3D segmentation: tiny .npy volumes, 16^3 patches
        root = helpers.volume_tree(tmp / "volumes", shape=(4, 12, 16, 20))
        over.update({"model.num_classes": 4, "class_names": None})
        return {"kind": "volume", "root": str(root), "patch": [16, 16, 16],
                "label_map": {4: 3}}, over  # fmt: skip
    from nlnet.data.digits.dense import DenseDigitsConfig, prepare_dense_digits

    root = prepare_dense_digits(
        DenseDigitsConfig(size=64, num_train=4, num_val=2, num_test=2, seed=5), tmp / "dense"
    )
    if cfg.task == "detection":
        over["model.overrides"] = {**cfg.model.overrides, "min_size": 64, "max_size": 64}
        over["train.split"], over["eval.split"] = "train", "test"
        over["model.num_classes"] = 4  # the digits' 3 categories + background
        if cfg.model.name.startswith("keypoint"):
            _keypoint_files(root)
            over["model.num_classes"] = 2  # person + background
        return {"root": str(root)}, over
    if cfg.model.num_classes is None or cfg.model.num_classes < 4:
        over["model.num_classes"] = 4
    over["class_names"] = None
    return {"root": str(root)}, over


def _keypoint_files(root: Path) -> None:
    """COCO person-keypoint files from the digits' instances: every object a "person" with 17
    visible keypoints spread over its box."""
    import json

    for split in ("train", "val", "test"):
        data = json.loads((root / "annotations" / f"instances_{split}.json").read_text())
        for a in data["annotations"]:
            x, y, w, h = a["bbox"]
            pts = [(x + w * (k % 5 + 0.5) / 5, y + h * (k // 5 + 0.5) / 4) for k in range(17)]
            a["keypoints"] = [v for px, py in pts for v in (px, py, 2)]
            a["num_keypoints"], a["category_id"] = 17, 1
        data["categories"] = [{"id": 1, "name": "person", "supercategory": "person",
                               "keypoints": [f"k{i}" for i in range(17)], "skeleton": []}]  # fmt: skip
        (root / "annotations" / f"person_keypoints_{split}.json").write_text(json.dumps(data))


def _one_step_config(name: str, tmp: Path):
    cfg = load_config(name)
    data, over = _tiny_data(cfg, tmp)
    plain = config_to_dict(cfg)
    plain["data"] = data
    plain["optim"].update(max_iters=1, epochs=0, steps=[], warmup_iters=0)
    plain["train"].update(batch_size=2, accum_steps=1, workers=0, val_split=None, ckpt_every=0,
                          stop_after=0, device="cpu", progress=False, log_every=1,
                          split=plain["train"]["split"] if cfg.task == "detection" else "train")  # fmt: skip
    plain["eval"].update(batch_size=2, workers=0,
                         split="test" if cfg.task in ("segmentation", "detection") else "val")  # fmt: skip
    if cfg.task == "video_classification":  # the test views: the video task's eval keys
        plain["eval"].update(clips=1)
    plain["output_dir"] = str(tmp / "run")
    return load_config(None, {**_flatten(plain), **over})


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and k not in ("data", "overrides"):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _build_with_named_weights(cfg, num_classes: int):
    """The config's model built with its named weights: its first tensor holds the fake
    file's constant (not a random initialisation)."""
    from nlnet.engine.config import replace
    from nlnet.engine.modeling import build_model

    model = build_model(replace(cfg, **{"model.num_classes": num_classes}))
    first = next(p for n, p in model.named_parameters() if "non_local" not in n)
    t = first.detach()
    assert bool((t == t.flatten()[0]).all()) and float(t.abs().max()) > 0  # the file's constant
    return model


@pytest.mark.parametrize("name", CONFIGS)
def test_shipped_config_trains_checkpoints_and_evaluates(name, tmp_path, fake_weights):
    from nlnet.engine.evaluation import evaluate
    from nlnet.engine.loop import train
    from nlnet.models.registry import model_facts

    cfg = _one_step_config(name, tmp_path)
    from nlnet.engine.config.files import looks_like_path
    from nlnet.engine.modeling import init_source

    source, reset = init_source(cfg)
    named = source if source and not looks_like_path(source) else None
    model = None
    if named:
        assert "/" not in named, "a weights name must not be rewritten to a path"
        fake_weights(model_facts(cfg.model.name).weights_arch)
        n = cfg.model.num_classes or (
            2 if cfg.task in ("video_classification", "image_classification") else None
        )
        model = _build_with_named_weights(cfg, n)
    if source and not named:  # the 128-frame fine-tunes and Charades start from a checkpoint
        from nlnet.engine.config import replace

        base = replace(cfg, **{"model.init": None, "output_dir": str(tmp_path / "base")})
        start = str(train(base)["checkpoint"])
        init = {"from": start, "reset_head": True} if reset else start
        cfg = replace(cfg, **{"model.init": init})
    torch.manual_seed(0)
    summary = train(cfg, model=model)
    ckpt = Path(summary["checkpoint"])
    assert summary["iterations"] == 1 and ckpt.is_file()
    logged = [json.loads(line) for line in (Path(cfg.output_dir) / "metrics.jsonl").open()]
    losses = [r["loss"] for r in logged if r["kind"] == "train"]
    assert losses and all(v is not None and math.isfinite(v) for v in losses)
    metrics = evaluate(cfg, ckpt)
    assert metrics["split"] == cfg.eval.split and len(metrics) > 2
