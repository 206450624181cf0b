"""The dense demo runs end to end on a tiny copy of the task (the real figures: README)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from nlnet.data.digits.dense import DenseDigitsConfig
from nlnet.demo.dense import SegDemoSettings, run_dense_demo


@pytest.fixture(scope="module")
def dense_seeds():
    """``benchmarks/dense_seeds.py`` as a module: its ``main(argv)`` is the script (called
    in-process: the interpreter and torch start once)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "dense_seeds.py"
    spec = importlib.util.spec_from_file_location("dense_seeds_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dense_demo_tiny(tmp_path):
    cfg = DenseDigitsConfig(size=48, num_train=8, num_val=2, num_test=3)
    lines: list[str] = []
    summary = run_dense_demo(
        [0],
        SegDemoSettings(epochs=2, batch_size=4, pretrain_epochs=1, data=cfg),
        out_dir=tmp_path / "run",
        data_root=tmp_path / "data",
        log=lines.append,
    )
    assert [r["model"] for r in summary["runs"]] == ["seg_tiny", "seg_tiny_nl"]
    assert summary["runs"][1]["params"] > summary["runs"][0]["params"]
    for r in summary["runs"]:
        assert 0 <= r["metrics"]["mIoU"] <= 100 and "iou_match" in r["metrics"]
    assert (tmp_path / "run" / "seed0" / "predictions.png").stat().st_size > 0
    assert (tmp_path / "run" / "seed0" / "seg_tiny_nl.pt").is_file()
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["runs"][0]["metrics"] == pytest.approx(summary["runs"][0]["metrics"])
    assert "mIoU" in lines[-1]


def test_dense_demo_errors(tmp_path):
    with pytest.raises(ValueError, match="split: expected 'test' or 'val'"):
        run_dense_demo([0], out_dir=tmp_path, split="train")
    with pytest.raises(ValueError, match="models: expected names among"):
        SegDemoSettings(models=("unet2d",))


def _quick_segmentation(tmp_path, threads: str) -> dict:
    from nlnet.cli import main

    out = tmp_path / f"runs{threads}"
    argv = ["demo", "--task", "segmentation", "--quick", "--output-dir", str(out),
            "--cache-dir", str(tmp_path / "cache"), "--threads", threads]  # fmt: skip
    assert main(argv) == 0
    (run,) = out.iterdir()
    # the engine's loop wrote its records and a final checkpoint per model
    assert (run / "seed0" / "seg_tiny_nl" / "metrics.jsonl").is_file()
    assert (run / "seed0" / "seg_tiny_nl" / "checkpoints" / "final.pt").is_file()
    assert (run / "seed0" / "predictions.png").stat().st_size > 0
    return json.loads((run / "summary.json").read_text())


def test_nlnet_demo_segmentation_quick_trains_side_by_side(tmp_path, capsys):
    """The command's path (the pre-trained backbone, then both models in two jobs)."""
    two = _quick_segmentation(tmp_path, "2")
    assert two["jobs"] == 2 and [r["model"] for r in two["runs"]] == ["seg_tiny", "seg_tiny_nl"]
    assert two["settings"]["pretrain_epochs"] == 1 and two["settings"]["freeze_backbone"] is True
    assert "mIoU" in capsys.readouterr().out


@pytest.mark.slow
def test_nlnet_demo_segmentation_gives_the_same_figures_one_by_one(tmp_path):
    """One thread per model either way: the same figures, side by side or one after the other
    (the video demo's default suite proves the same of the shared job runner)."""
    one, two = (_quick_segmentation(tmp_path, t) for t in ("1", "2"))
    assert (one["jobs"], two["jobs"]) == (1, 2)
    assert [r["metrics"] for r in one["runs"]] == [r["metrics"] for r in two["runs"]]


def test_nlnet_demo_segmentation_user_errors_are_one_line(tmp_path, capsys):
    from nlnet.cli import main

    base = ["demo", "--task", "segmentation", "--quick", "--output-dir", str(tmp_path)]
    assert main([*base, "--threads", "0"]) == 2
    err = capsys.readouterr().err
    assert "--threads" in err and "Traceback" not in err
    for task, change, message in (("segmentation", "freez_backbone=false", "unknown key"),
                                  ("segmentation", "pretrain_epochs=0", "freeze_backbone=false"),
                                  ("unet", "lr=fast", "--set lr=fast: expected float"),
                                  ("super-resolution", "step=3", "unknown key 'step'")):  # fmt: skip
        argv = ["demo", "--task", task, "--quick", "--output-dir", str(tmp_path), "--set", change]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    for task, extra, message in (
        ("super-resolution", ["--epochs", "2"], "--epochs: the super-resolution demo trains for steps"),
        ("unet", ["--epochs", "0", "--set", "epochs=0"], "epochs: expected >= 1, got 0"),
        ("segmentation", ["--set", "lr=-1"], "lr: expected > 0, got -1"),
    ):  # fmt: skip
        assert main(["demo", "--task", task, "--quick", "--output-dir", str(tmp_path), *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_nlnet_demo_set_changes_a_dense_demos_recipe(tmp_path, capsys):
    """``--set`` reaches the dense demos as the video demo's: the backbone trained too."""
    from nlnet.cli import main

    argv = ["demo", "--task", "segmentation", "--quick", "--output-dir", str(tmp_path),
            "--cache-dir", str(tmp_path / "cache"), "--threads", "1",
            "--set", "freeze_backbone=false", "--set", "pretrain_epochs=0"]  # fmt: skip
    assert main(argv) == 0
    (run,) = tmp_path.glob("dense-demo-*")
    settings = json.loads((run / "summary.json").read_text())["settings"]
    assert (settings["pretrain_epochs"], settings["freeze_backbone"]) == (0, False)
    assert not (run / "seed0" / "pretrain").exists()  # no pre-training ran


def test_dense_seed_table_statistics_and_the_script_end_to_end(tmp_path, dense_seeds, capsys):
    """The dense demos' seed table (docs/demo.md, Protocol): rows per seed, mean / std / min
    computed right on fabricated runs; then ``benchmarks/dense_seeds.py`` on the quick U-Net
    setting with two seeds, and ``--report`` giving the same table from its summary."""
    import statistics

    from nlnet.analysis.seeds import markdown_table, merged_summary
    from nlnet.analysis.seeds import seed_rows_of_runs as dense_seed_rows
    from nlnet.demo.seeds import gap_line

    runs = [{"seed": s, "model": m, "train_s": 10.0 * s + (m == "b"), "metrics": {"mIoU": v}}
            for s, m, v in ((0, "a", 40.0), (0, "b", 60.0), (1, "a", 50.0), (1, "b", 55.0),
                            (2, "a", 45.0), (2, "b", 75.0))]  # fmt: skip
    models, rows = dense_seed_rows({"runs": runs}, "mIoU")
    assert models == ["a", "b"] and [r["gap"] for r in rows] == [20.0, 5.0, 30.0]
    assert [r["wall"] for r in rows] == [1.0, 11.0, 21.0]
    table = markdown_table(models, rows, "test mIoU", "gap (b - a)").splitlines()
    assert table[-3] == "| mean | 45.0 | 63.3 | +18.3 | 11 s | – |"
    assert table[-2].startswith(f"| std | 5.0 | {statistics.stdev([60, 55, 75]):.1f} | 12.6 |")
    assert table[-1].startswith("| min | 40.0 | 55.0 | +5.0 | 1 s |")

    from nlnet.cli import main

    # the one seed runner: nlnet demo --seeds trains (the script tables the same files below)
    cmd = ["demo", "--task", "unet", "--quick", "--seeds", "0-1", "--threads", "1",
           "--output-dir", str(tmp_path), "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    assert main(cmd) == 0
    text = (tmp_path / "dense-seeds-unet-test.md").read_text()
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert [line.split("|")[1].strip() for line in lines[2:]] == ["0", "1", "mean", "std", "min"]
    summary = json.loads((tmp_path / "dense-seeds-unet-test" / "summary.json").read_text())
    first = next(r for r in summary["runs"] if r["seed"] == 0 and r["model"] == "unet2d_nl")
    assert f"| {first['metrics']['mDice']:.1f} |" in lines[2]
    assert summary["split"] == "test" and len(set(summary["data_roots"].values())) == 2
    assert all(Path(r).is_relative_to(tmp_path / "cache") for r in summary["data_roots"].values())
    (tmp_path / "dense-seeds-unet-test.md").unlink()
    report = ["--task", "unet", "--output-dir", str(tmp_path),
              "--report", str(tmp_path / "dense-seeds-unet-test" / "summary.json")]  # fmt: skip
    assert dense_seeds.main(report) == 0
    assert (tmp_path / "dense-seeds-unet-test.md").read_text() == text
    (tmp_path / "dense-seeds-unet-test.md").unlink()  # the command's --report: the same table
    report = ["demo", "--task", "unet", "--report", "--output-dir", str(tmp_path)]
    assert main([*report, "--quick", "--seeds", "0-1"]) == 0
    assert (tmp_path / "dense-seeds-unet-test.md").read_text() == text
    # the runs in the folder are of this recipe and these seeds, or it is one line
    for extra, message in ((["--seeds", "0-1"], "holds runs of another recipe"),
                           (["--quick", "--seeds", "0-1", "--set", "lr=0.1"], "another recipe"),
                           (["--quick", "--seeds", "0-2"], "no run of seed(s) [2]")):  # fmt: skip
        capsys.readouterr()
        assert main([*report, *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert "failures (unet2d_nl - unet2d >= +10 mDice not met)" in text
    # several files of one recipe make one table; another recipe or a seed twice is refused
    one = {"settings": {"lr": 1}, "split": "val", "runs": runs[:2]}
    paths = [tmp_path / f"s{i}.json" for i in range(4)]
    for path, summary in zip(paths, (one, {**one, "runs": runs[2:]},
                                     {**one, "settings": {"lr": 2}, "runs": runs[4:]}, one)):  # fmt: skip
        path.write_text(json.dumps(summary))
    merged = merged_summary([str(p) for p in paths[:2]])
    assert merged["runs"] == runs and merged["split"] == "val"
    for bad, message in ((paths[2], "another settings"), (paths[3], "seed(s) [0]")):
        with pytest.raises(ValueError, match=re.escape(message)):
            merged_summary([str(paths[0]), str(bad)])
    gap = gap_line("unet", rows, models)
    assert gap.startswith("failures (b - a >= +10 mDice not met): 1 of 3 seeds: seed(s) 1;")
    # screening seeds: validation figures only; a missing summary is one line
    for extra, message in ((["--seeds", "100"], "are screening seeds"),
                           (["--report", str(tmp_path / "none.json")], "--report: cannot read")):  # fmt: skip
        capsys.readouterr()
        assert dense_seeds.main(["--task", "unet", *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
    for extra, message in ((["--seeds", "100"], "are screening seeds"),
                           (["--seeds", "0", "--split", "val", "--report"], "--report: no "),
                           (["--seeds", "0", "--prepare"], "--prepare: for the video tasks")):  # fmt: skip
        capsys.readouterr()
        argv = ["demo", "--task", "segmentation", "--output-dir", str(tmp_path), *extra]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_dense_seeds_set_changes_the_unet_recipe_and_its_block(dense_seeds, capsys, tmp_path):
    """``--set`` of the U-Net demo: a setting (``lr``) and the options of ``unet2d_nl``'s block
    (``block={...}``, YAML) reach the training config and the model; the plain U-Net keeps its
    own; a bad change is one line before any work."""
    from nlnet.demo.dense import demo_config
    from nlnet.demo.settings import dense_settings
    from nlnet.models import create_model

    s = dense_settings("unet", ["lr=3e-2", "block={bias: true}"], quick=True)
    assert s.lr == 3e-2 and s.block == {"bias": True}
    plain, nl = (demo_config(m, s, tmp_path, tmp_path / m, 0, "cpu") for m in s.pair)
    assert nl.model.overrides["block"] == {"bias": True} and "block" not in plain.model.overrides
    assert nl.optim.lr == 3e-2
    model = create_model("unet2d_nl", num_classes=4, **nl.model.overrides)
    assert model.bottleneck[-1].theta.bias is not None
    # the U-Net from scratch: the frozen encoder goes first, then the pre-training
    s = dense_settings("unet", ["freeze_encoder=false", "pretrain_epochs=0"], True)
    assert (s.freeze_encoder, s.pretrain_epochs) == (False, 0)
    for extra, message in ((["--set", "block=true"], "--set block=true: expected dict"),
                           (["--set", "lr"], "--set lr: expected KEY=VALUE"),
                           (["--set", "pretrain_epochs=0"], "freeze_encoder: needs pretrain_epochs"),
                           (["--task", "segmentation", "--set", "block={inti: 1}"],
                            "block: unknown option 'inti' (did you mean 'init'?)"),
                           (["--task", "segmentation", "--set", "models=[seg_tiny_x]"],
                            "models: expected names among")):  # fmt: skip
        capsys.readouterr()
        assert dense_seeds.main(["--task", "unet", "--output-dir", str(tmp_path), *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_dense_demos_give_validation_figures_for_screening(tmp_path):
    """``split="val"``: the figures are measured on the validation images, which the seed draws
    apart from its test images (the screening protocol's split)."""
    import numpy as np
    from PIL import Image

    from nlnet.demo.dense import UNetDemoSettings, run_dense_demo

    kw = {"settings": UNetDemoSettings.quick(), "pictures": False, "data_root": tmp_path / "d"}
    val = run_dense_demo([100], out_dir=tmp_path / "v", split="val", log=lambda _: None, **kw)
    assert val["split"] == "val" and {r["model"] for r in val["runs"]} == {"unet2d", "unet2d_nl"}
    assert all(0 <= r["metrics"]["mDice"] <= 100 for r in val["runs"])
    root = Path(val["data_roots"]["100"])
    first = {
        s: np.asarray(Image.open(sorted((root / s / "images").iterdir())[0]))
        for s in ("val", "test")
    }
    assert not np.array_equal(first["val"], first["test"])
    with pytest.raises(ValueError, match="split"):
        run_dense_demo([0], out_dir=tmp_path / "x", split="train", **kw)


def test_dense_seeds_super_resolution_table_end_to_end(tmp_path, dense_seeds, capsys):
    """``benchmarks/dense_seeds.py --task super-resolution`` on the quick setting: the screening
    seeds' validation PSNR-Y per seed with mean / std / min, the models' parameters and
    multiply-adds under it; ``--set`` changes a setting and a bad one is one line."""
    cmd = ["--task", "super-resolution", "--quick", "--threads", "1",
           "--output-dir", str(tmp_path)]  # fmt: skip
    assert dense_seeds.main([*cmd, "--seeds", "100-101", "--split", "val", "--set", "steps=2"]) == 0
    text = (tmp_path / "dense-seeds-super-resolution-val.md").read_text()
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert [line.split("|")[1].strip() for line in lines[2:7]] == [
        "100",
        "101",
        "mean",
        "std",
        "min",
    ]
    summary = json.loads(
        (tmp_path / "dense-seeds-super-resolution-val" / "summary.json").read_text()
    )
    assert summary["split"] == "val" and summary["settings"]["steps"] == 2
    first = next(
        r for r in summary["runs"] if r["seed"] == 100 and r["model"] == "edsr_baseline_res1"
    )
    assert f"| {first['metrics']['psnr_y']:.2f} |" in lines[2] and "val PSNR-Y" in lines[0]
    params = summary["cost"]["edsr_baseline_nl"]["params"]
    assert any(line.startswith(f"| edsr_baseline_nl | {params:,} |") for line in lines)
    for extra, message in ((["--set", "photos=web"], "--set photos=web: photos: expected one of"),
                           (["--set", "stepz=3"], "--set stepz=3: unknown key 'stepz'; valid:"),
                           (["--set", "steps"], "--set steps: expected KEY=VALUE"),
                           (["--set", "steps=many"], "--set steps=many: expected int"),
                           (["--seeds", "100"], "are screening seeds")):  # fmt: skip
        capsys.readouterr()
        assert dense_seeds.main([*cmd, *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_dense_seeds_set_changes_the_segmentation_block_and_models(tmp_path):
    """``--set`` of the segmentation demo: the block's options reach ``seg_tiny_nl`` (with
    ``init: w_z`` its BN scale starts at 1, where the paper's start is 0), ``models`` trains a
    part of the pair, and the summary records the recipe."""
    import dataclasses

    from nlnet.demo.dense import SegDemoSettings
    from nlnet.demo.settings import with_change

    s = SegDemoSettings.quick()
    for change in ("block={init: w_z}", "models=[seg_tiny_nl]"):
        s = with_change(s, change)
    cfg = DenseDigitsConfig(size=48, num_train=4, num_val=2, num_test=2)
    s = with_change(with_change(s, "data.num_train=4"), "data.num_test=2")
    s = dataclasses.replace(s, data=cfg)
    kw = {"data_root": tmp_path / "data", "pictures": False, "log": lambda _: None}
    summary = run_dense_demo([0], s, out_dir=tmp_path / "w_z", **kw)
    assert summary["settings"]["data"]["num_train"] == 4
    assert [r["model"] for r in summary["runs"]] == ["seg_tiny_nl"]
    assert summary["settings"]["block"] == {"init": "w_z"}
    # the paper's start is a BN scale of 0 (tests/layers); the guide's, 1: a step leaves it near 1
    state = torch.load(tmp_path / "w_z" / "seed0" / "seg_tiny_nl.pt")
    assert state["head.non_local.norm.weight"].abs().mean().item() > 0.5
    with pytest.raises(ValueError, match="or pretrain_epochs=N before freeze_backbone=true"):
        with_change(
            SegDemoSettings(pretrain_epochs=0, freeze_backbone=False), "freeze_backbone=true"
        )
    with pytest.raises(ValueError, match="set freeze_backbone=false before pretrain_epochs=0"):
        with_change(SegDemoSettings(), "pretrain_epochs=0")
    plain = with_change(
        with_change(SegDemoSettings(), "freeze_backbone=false"), "pretrain_epochs=0"
    )
    assert (plain.pretrain_epochs, plain.freeze_backbone) == (0, False)
