"""The dense demo runs end to end on a tiny copy of the task (the real figures: README)."""

from __future__ import annotations

import json

import pytest

from nlnet.demo.dense import run_dense_demo
from nlnet.demo.digits_dense import DenseDigitsConfig


def test_dense_demo_tiny(tmp_path):
    cfg = DenseDigitsConfig(size=48, num_train=8, num_val=2, num_test=3)
    lines: list[str] = []
    summary = run_dense_demo(
        "segmentation",
        [0],
        out_dir=tmp_path / "run",
        data=cfg,
        data_root=tmp_path / "data",
        epochs=2,
        batch_size=4,
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
    with pytest.raises(ValueError, match="task"):
        run_dense_demo("keypoints", [0], out_dir=tmp_path)


def test_nlnet_demo_segmentation_trains_side_by_side_with_the_same_figures(tmp_path, capsys):
    from nlnet.cli import main

    summaries = []
    for threads in ("1", "2"):
        out = tmp_path / f"runs{threads}"
        argv = ["demo", "--task", "segmentation", "--quick", "--output-dir", str(out),
                "--cache-dir", str(tmp_path / "cache"), "--threads", threads]  # fmt: skip
        assert main(argv) == 0
        (run,) = out.iterdir()
        summaries.append(json.loads((run / "summary.json").read_text()))
        # the engine's loop wrote its records and a final checkpoint per model
        assert (run / "seed0" / "seg_tiny_nl" / "metrics.jsonl").is_file()
        assert (run / "seed0" / "seg_tiny_nl" / "checkpoints" / "final.pt").is_file()
        assert (run / "seed0" / "predictions.png").stat().st_size > 0
    one, two = summaries
    assert (one["jobs"], two["jobs"]) == (1, 2)
    assert [r["model"] for r in one["runs"]] == ["seg_tiny", "seg_tiny_nl"]
    # one thread per model either way: the same figures, whether side by side or one by one
    assert [r["metrics"] for r in one["runs"]] == [r["metrics"] for r in two["runs"]]
    assert "mIoU" in capsys.readouterr().out


def test_nlnet_demo_segmentation_user_errors_are_one_line(tmp_path, capsys):
    from nlnet.cli import main

    base = ["demo", "--task", "segmentation", "--quick", "--output-dir", str(tmp_path)]
    assert main([*base, "--threads", "0"]) == 2
    err = capsys.readouterr().err
    assert "--threads" in err and "Traceback" not in err
