"""End to end through the real command line: train -> SIGKILL -> resume -> eval -> predict.

Tiny mp4 files are written with PyAV into a class-per-folder tree (plus one corrupt file that must
be skipped and counted); the training runs (killed and resumed) in their own ``python -m nlnet``
subprocesses, then eval and predict of the checkpoint through the same entry point in-process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import write_mp4

REPO = Path(__file__).resolve().parents[2]


def _make_tree(root: Path) -> None:
    """Class ``left``: a bright bar on the left; class ``right``: on the right. 8 frames 40x48."""
    rng = np.random.default_rng(0)
    for split, n in (("train", 4), ("val", 2)):
        for c, name in enumerate(("left", "right")):
            for i in range(n):
                frames = rng.integers(0, 60, size=(8, 40, 48, 3), dtype=np.uint8)
                if c == 0:
                    frames[:, :, :16] = 220
                else:
                    frames[:, :, -16:] = 220
                write_mp4(root / split / name / f"{name}_{i}.mp4", frames)
    (root / "train" / "left" / "corrupt.mp4").write_bytes(b"not a video at all" * 10)


def _start(*args: str, cwd: Path) -> subprocess.Popen:
    """``python -m nlnet ARGS`` in a subprocess (one thread: the test machine is shared)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen(
        [sys.executable, "-m", "nlnet", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen) -> str:
    try:
        out, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, f"{' '.join(proc.args)} failed:\n{out}\n{err}"
    return out


def _nlnet(*args: str, cwd: Path) -> str:
    return _finish(_start(*args, cwd=cwd))


def _json_tail(text: str) -> dict:
    return json.loads(text[text.index("{") :])


def test_train_stop_resume_eval_predict(tmp_path, monkeypatch, capsys):
    root = tmp_path / "videos"
    _make_tree(root)
    common = [
        "--config",
        "smoke/folder_c2d_r50_nl5",
        f"data.root={root}",
        "--device",
        "cpu",
        "train.progress=false",
    ]
    # 2) (started first, runs meanwhile) a run killed with SIGKILL after its first checkpoint ...
    killed = _start("train", *common, "--output-dir", "run", cwd=tmp_path)
    # 1) uninterrupted reference run (in this process, through the same Python API)
    from nlnet.engine.config import load_config
    from nlnet.engine.loop import train

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.warns(UserWarning, match="corrupt.mp4"):
        ref = train(
            load_config(
                "smoke/folder_c2d_r50_nl5",
                [
                    f"data.root={root}",
                    "train.device=cpu",
                    "train.progress=false",
                    f"output_dir={tmp_path / 'run_ref'}",
                ],
            )
        )
    torch.set_num_threads(threads)
    assert ref["iterations"] == 12 and not ref["stopped"]
    last = tmp_path / "run" / "checkpoints" / "last.pt"
    deadline = time.monotonic() + 240
    while not last.exists() and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert killed.poll() is None, "the run ended before it could be killed"
    killed.send_signal(signal.SIGKILL)  # no handler, no cleanup: a crash between checkpoints
    killed.communicate(timeout=60)
    assert killed.returncode == -signal.SIGKILL
    first = torch.load(last, weights_only=True)
    assert 0 < first["iteration"] < 12
    # 3) ... resumed from its run directory (config taken from run/config.yaml)
    out = _nlnet("train", "--output-dir", "run", "--resume", cwd=tmp_path)
    second = _json_tail(out)
    assert second["iterations"] == 12 and not second["stopped"]
    assert "skipped 1 bad video" in out  # the corrupt file, counted in each epoch summary
    a = torch.load(tmp_path / "run_ref/checkpoints/final.pt", weights_only=True)
    b = torch.load(tmp_path / "run/checkpoints/final.pt", weights_only=True)
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert b["class_names"] == ["left", "right"]
    for name in ("config.yaml", "metrics.jsonl", "metrics.csv", "curves.png"):
        assert (tmp_path / "run" / name).is_file(), name
    # 4) multi-clip evaluation of the checkpoint (config read from the checkpoint)
    # 5) prediction on files, class names from the checkpoint
    from nlnet.cli import main

    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    ckpt = str(tmp_path / "run/checkpoints/final.pt")
    assert main(["eval", "--checkpoint", ckpt, "--device", "cpu"]) == 0
    metrics = _json_tail(capsys.readouterr().out)
    assert metrics["video_count"] == 4 and metrics["clip_count"] == 8  # eval.clips=2
    assert 0.0 <= metrics["video_top1"] <= 100.0 and "video_top5" not in metrics  # few classes
    out_json = tmp_path / "eval" / "val.json"
    assert main(["eval", "--checkpoint", ckpt, "--device", "cpu", "--output", str(out_json)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("worst classes (video top-1): ")
    saved = json.loads(out_json.read_text())
    confusion = saved["confusion"]
    assert len(confusion) == len(saved["per_class_top1"]) == len(saved["class_names"])
    assert sum(map(sum, confusion)) == saved["video_count"]  # every video once
    diagonal = sum(confusion[i][i] for i in range(len(confusion)))
    assert abs(100 * diagonal / saved["video_count"] - saved["video_top1"]) < 1e-6
    assert out_json.with_suffix(".confusion.png").read_bytes()[:4] == b"\x89PNG"
    videos = [str(root / "val/left/left_0.mp4"), str(root / "val/right/right_1.mp4")]
    assert main(["predict", *videos, "--checkpoint", ckpt, "--topk", "2", "--json"]) == 0
    out = capsys.readouterr().out
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    assert [r["video"] for r in lines] == videos
    for r in lines:
        assert sorted(n for n, _ in r["top"]) == ["left", "right"]
        assert sum(s for _, s in r["top"]) == pytest.approx(1.0, abs=1e-4)


def test_help_shows_examples(capsys):
    from nlnet.cli import main

    for cmd in ("train", "eval", "predict"):
        assert main([cmd, "--help"]) == 0
        assert "examples:" in capsys.readouterr().out, cmd


def test_print_config_resolves_bases_and_overrides(tmp_path, monkeypatch, capsys):
    import yaml

    from nlnet.cli import main

    monkeypatch.chdir(tmp_path)
    argv = ["train", "-c", "kinetics/i3d311_r50_nl5_128f", "optim.lr=1e-3", "--print-config"]
    assert main(argv) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert cfg["optim"]["lr"] == 0.001 and cfg["train"]["freeze_bn"] is True
    assert cfg["data"]["num_frames"] == 128 and cfg["optim"]["steps"] == [150000, 300000]


def test_unknown_override_is_a_clear_error(tmp_path, monkeypatch, capsys):
    from nlnet.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", "smoke/folder_c2d_r50_nl5", "optim.lrr=1"]) == 2
    err = capsys.readouterr().err
    assert "optim.lrr" in err and "lr" in err and err.count("\n") == 1


@pytest.mark.slow
def test_torchrun_two_processes_stop_resume_equals_uninterrupted(tmp_path):
    """``torchrun --nproc_per_node=2 -m nlnet train`` (gloo on the CPU), pre-empted and resumed."""
    root = tmp_path / "videos"
    _make_tree(root)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    common = ["-m", "nlnet", "train", "-c", "smoke/folder_c2d_r50_nl5", f"data.root={root}",
              "--device", "cpu", "train.progress=false", "train.val_split=val"]  # fmt: skip
    runs = [
        ["-o", "ref"],
        ["-o", "cut", "train.stop_after=5"],
        ["-o", "cut", "--resume", "train.stop_after=0"],
    ]
    for extra in runs:
        proc = subprocess.run(
            [*torchrun, *common, *extra], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.count('"run_dir"') == 1  # only rank 0 prints the summary
    a = torch.load(tmp_path / "ref/checkpoints/final.pt", weights_only=True)
    b = torch.load(tmp_path / "cut/checkpoints/final.pt", weights_only=True)
    assert a["extra"]["world_size"] == 2
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
