"""nlnet demo --task super-resolution / --task unet: the quick settings end to end (seconds), the
CLI's choices and errors."""

from __future__ import annotations

import json

import pytest

from nlnet.cli import main


def _summary(tmp_path, task: str) -> tuple[dict, list]:
    (run,) = list(tmp_path.glob(f"{task}-demo-*"))
    return json.loads((run / "summary.json").read_text()), list(run.rglob("*"))


def test_super_resolution_demo_quick(tmp_path, capsys):
    rc = main(["demo", "--task", "super-resolution", "--quick", "--threads", "1",
               "--output-dir", str(tmp_path)])  # fmt: skip
    assert rc == 0
    summary, files = _summary(tmp_path, "super-resolution")
    assert [r["model"] for r in summary["runs"]] == ["edsr_baseline_res1", "edsr_baseline_nl"]
    assert summary["settings"]["photos"] == "self_similar" and summary["split"] == "test"
    for r in summary["runs"]:  # one tile of each of the 5 self-similar photographs' test band
        assert r["metrics"]["images"] == 5 and 15 < r["metrics"]["bicubic_psnr_y"] < 50
        assert r["cpu_s"] > 0
    assert set(summary["cost"]) == {"edsr_baseline_res1", "edsr_baseline_nl"}
    assert any(f.name == "crops.png" and f.stat().st_size > 1000 for f in files)
    assert "PSNR-Y" in capsys.readouterr().out


def test_super_resolution_demo_validation_split_and_its_errors(tmp_path):
    """``split="val"`` measures the same models on the val bands (screening, docs/demo.md);
    the built-in photographs have no val split; an unknown ``photos`` is one line."""
    from nlnet.demo.sr import SRDemoSettings, run_sr_demo

    kw = {"settings": SRDemoSettings.quick(), "pictures": False, "log": lambda _: None}
    val = run_sr_demo([100], out_dir=tmp_path / "v", split="val", **kw)
    test = run_sr_demo([100], out_dir=tmp_path / "t", **kw)
    assert val["split"] == "val" and test["split"] == "test"
    v, t = val["runs"][1], test["runs"][1]
    assert v["model"] == t["model"] == "edsr_baseline_nl"
    assert v["metrics"]["bicubic_psnr_y"] != t["metrics"]["bicubic_psnr_y"]  # other pixels
    with pytest.raises(ValueError, match="split"):
        run_sr_demo([0], out_dir=tmp_path / "x", split="train", **kw)
    builtin = SRDemoSettings(photos="builtin", n_resblocks=1, n_feats=8, steps=1)
    with pytest.raises(ValueError, match="'builtin' photos have no 'val'"):
        run_sr_demo([0], out_dir=tmp_path / "x", settings=builtin, split="val")
    with pytest.raises(ValueError) as err:
        SRDemoSettings(photos="web")
    assert str(err.value).startswith("photos: expected one of") and "\n" not in str(err.value)


def test_super_resolution_demo_models_have_about_equal_parameters_and_compute():
    """The demo's two models (default sizes) differ by less than 5 % in parameters and in
    multiply-adds, on a training patch and on a test tile (nlnet.analysis.cost on meta), while
    each adds at least 0.5 % to plain EDSR (the counts see the block and the control unit)."""
    from nlnet.demo.sr import MODELS, SRDemoSettings, sr_model_cost

    control, nl = (sr_model_cost(name, SRDemoSettings()) for name in MODELS)
    plain = sr_model_cost("edsr_baseline", SRDemoSettings())
    for key in ("params", "macs_patch", "macs_tile"):
        assert abs(nl[key] / control[key] - 1) < 0.05, key
        assert min(nl[key], control[key]) > 1.005 * plain[key], key


def test_unet_demo_quick(tmp_path, capsys):
    """Two jobs side by side (worker processes); the picture is drawn from their weights."""
    rc = main(["demo", "--task", "unet", "--quick", "--threads", "2", "--output-dir",
               str(tmp_path), "--cache-dir", str(tmp_path / "cache")])  # fmt: skip
    assert rc == 0
    summary, files = _summary(tmp_path, "unet")
    assert [r["model"] for r in summary["runs"]] == ["unet2d", "unet2d_nl"]
    assert summary["jobs"] == 2
    for r in summary["runs"]:
        assert 0 <= r["metrics"]["mDice"] <= 100 and "dice_match" in r["metrics"]
    assert any(f.name == "predictions.png" for f in files)
    assert "mDice" in capsys.readouterr().out


@pytest.mark.parametrize("task", ["unet", "super-resolution", "same"])
def test_demo_threads_error_is_one_line(tmp_path, capsys, task):
    rc = main(["demo", "--task", task, "--threads", "zero", "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--threads" in err
    assert not list(tmp_path.iterdir())  # refused before any work


def test_jobs_auto_is_the_usable_cores(monkeypatch):
    import os

    from nlnet.engine import jobs

    monkeypatch.setattr(jobs, "usable_cores", lambda: 4)
    monkeypatch.setattr(os, "getloadavg", lambda: (2.6, 0.0, 0.0))
    assert jobs.jobs_for("auto") == 4 and jobs.jobs_for("3") == 3
    with pytest.raises(ValueError, match="--threads: expected a positive integer or 'auto'"):
        jobs.jobs_for("0")


def test_unet_pretraining_labels_each_digit_by_its_class_and_initialises_both_models(tmp_path):
    """The U-Net demo's pre-training (the paper's ImageNet step, Sec. 4.1): masks name every
    digit's own class (the cue's too) on exactly the task's digit pixels; the pre-trained
    weights initialise both models (all but the classifier and the block), and weights of
    another model are refused."""
    from dataclasses import replace

    import numpy as np
    import torch

    from nlnet.data.digits.dense import DenseDigitsConfig, digit_class_masks, seed_data
    from nlnet.data.segmentation.images import SegmentationFolder
    from nlnet.demo.dense import UNetDemoSettings, fit_and_test, pretrain

    s = replace(UNetDemoSettings.quick(), pretrain_epochs=1, freeze_encoder=False)
    root = seed_data(DenseDigitsConfig(num_train=8, num_val=4, num_test=4), 0, tmp_path / "d")
    folder = SegmentationFolder(root, "train", num_classes=4)
    masks = digit_class_masks(root, "train")
    coco_digits = set()
    for i, path in enumerate(folder.images):
        task_mask, digit_mask = folder.read_mask(i), masks[path.name]
        assert np.array_equal(task_mask > 0, digit_mask > 0)  # the same pixels, other labels
        coco_digits |= set(np.unique(digit_mask[task_mask == 1]).tolist())  # the cue's class
    assert coco_digits <= {1, 2, 3, 4} and coco_digits
    init = pretrain(s, root, tmp_path / "pre", 0, "cpu")
    assert init and not any(k.startswith("classifier.") for k in init)
    run = fit_and_test("unet2d_nl", s, root, tmp_path / "nl", 0, "cpu", "val", init)
    # the encoder starts from the pre-training: one epoch on 8 images moves it only a little
    first = "encoder.0.0.weight"
    moved = (run["state"][first] - init[first]).abs().max() / init[first].abs().max()
    assert 0 < moved < 0.5
    wrong = {f"x.{k}": v for k, v in init.items()}
    with pytest.raises(ValueError, match="init of unet2d: the weights do not fit"):
        fit_and_test("unet2d", s, root, tmp_path / "bad", 0, "cpu", "val", wrong)
    assert torch.is_tensor(run["state"]["bottleneck.non_local.theta.weight"])
    # freeze_encoder: the encoder (levels, bottleneck convolutions) stays the pre-trained one
    # bit for bit; the block, the decoder and the classifiers train
    frozen = fit_and_test(
        "unet2d_nl", replace(s, freeze_encoder=True), root, tmp_path / "fz", 0, "cpu", "val", init
    )["state"]
    encoder = [k for k in init if k.startswith(("encoder.", "bottleneck.")) and "running" not in k
               and "num_batches" not in k]  # fmt: skip
    assert encoder and all(torch.equal(frozen[k], init[k]) for k in encoder)
    assert not torch.equal(frozen["decoder.0.0.weight"], init["decoder.0.0.weight"])
    assert frozen["bottleneck.non_local.norm.weight"].abs().max() > 0  # starts at 0 (Sec. 4.1)
    with pytest.raises(ValueError, match="freeze_encoder: needs a pre-trained network"):
        fit_and_test("unet2d", replace(s, freeze_encoder=True), root, tmp_path / "x", 0, "cpu")
