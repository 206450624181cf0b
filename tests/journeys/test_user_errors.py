"""Wrong inputs are one line and exit 2, and a run's directory follows its lifecycle: nothing
is written before the config, data and model checks pass; a ``.lock`` alone is an empty
directory; SIGINT/SIGTERM write ``last.pt`` and print the exact ``--resume`` command."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import warnings
from pathlib import Path
from typing import Any

import helpers
import pytest
import torch


def _one_line(capsys, rc: int, *words: str) -> str:
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert all(w in err for w in words), err
    return err


def _clip_path(ckpt: Path) -> str:
    return str(next((ckpt.parents[2] / "videos" / "val").rglob("*.mp4")))


NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="the mistake needs a CPU-only host")
NO_TORCHCODEC = pytest.mark.skipif(
    importlib.util.find_spec("torchcodec") is not None, reason="torchcodec is installed here"
)
#: ``nlnet train`` on the tiny video folder, one step (every row fails before training)
TRAIN = ["train", "--config", "smoke/folder_tiny", "data.root={videos}", "data.num_frames=4",
         "optim.epochs=0", "optim.max_iters=1", "train.batch_size=2", "--output-dir", "{tmp}/run"]  # fmt: skip
PREDICT = ["predict", "{clip}", "--checkpoint", "{ckpt}"]
VISUALIZE = ["visualize", "--checkpoint", "{ckpt}", "--video", "{clip}", "--output", "{tmp}/v"]
EXPORT = ["export", "--checkpoint", "{ckpt}", "--format", "exported", "--output", "{tmp}/m.pt2"]
EVAL = ["eval", "--checkpoint", "{ckpt}", "eval.clips=1"]

#: every command x the ordinary mistakes: (command, argv, words the one line must hold[, marks]).
#: A command added to ``nlnet.cli.COMMANDS`` joins this table (test_every_command_has_rows).
ROWS = [
    ("demo", ["demo", "--output-dir", "{file}"], ["--output-dir", "existing file"]),
    ("demo", ["demo", "--threads", "many"], ["threads"]),
    ("demo", ["demo", "--device", "cuda", "--quick"], ["--device", "CUDA"], NO_CUDA),
    ("train", [*TRAIN[:-1], "{file}"], ["--output-dir", "existing file"]),
    ("train", [*TRAIN, "data.backend=torchcodec"], ["data.backend=torchcodec", "pyav"],
     NO_TORCHCODEC),
    ("train", [*TRAIN, "--device", "cuda"], ["CUDA"], NO_CUDA),
    ("train", [*TRAIN, "model.name=c2d_tiny_nl", "--print-config"], ["model.name", "unknown model"]),
    ("train", [*TRAIN, "model.name=c2d_r50", "model.overrides={width: 4}",
               "model.init=IMAGENET1K_V1"], ["resnet50-", "hub/checkpoints/"], "offline"),
    ("train", [*TRAIN, "model.init={pth}"], ["model.init", "do not fit"]),
    ("train", ["train", "--resume", "--output-dir", "{tmp}/never"], ["--resume"]),
    # clips longer than every video: the one line, no warning per video before it
    ("train", [*TRAIN, "data.num_frames=400"], ["shorter than a clip", "data.num_frames"]),
    ("eval", [*EVAL, "--device", "cuda"], ["CUDA"], NO_CUDA),
    ("eval", [*EVAL, "data.backend=torchcodec"], ["data.backend=torchcodec"], NO_TORCHCODEC),
    ("eval", ["eval", "--config", "smoke/folder_tiny", "--checkpoint", "{ckpt}",
              "model.name=c2d_tiny_nl"], ["model.name", "unknown model"]),
    ("eval", ["eval", "--checkpoint", "{tmp}/nope.pt"], ["nope.pt"]),
    ("predict", [*PREDICT, "--clips", "0"], ["--clips"]),
    ("predict", [*PREDICT, "--top-k", "0"], ["--top-k"]),
    ("predict", [*PREDICT, "--classes", "nope.txt"], ["--classes"]),
    ("predict", [*PREDICT, "--device", "cuda"], ["--device", "CUDA"], NO_CUDA),
    ("predict", ["predict", "{clip}", "--checkpoint", "{seg}", "--window", "big"], ["--window"]),
    ("predict", ["predict", "{clip}", "--checkpoint", "{seg}", "--overlap", "1"], ["--overlap"]),
    ("models", ["models", "--nope"], ["unrecognized arguments", "--nope"]),
    ("cost", ["cost", "c2d_r50_nl"], ["unknown model", "c2d_r50_nl5"]),
    ("visualize", [*VISUALIZE, "--block", "x"], ["--block"]),
    ("visualize", [*VISUALIZE, "--top-k", "0"], ["--top-k"]),
    ("visualize", [*VISUALIZE, "--query", "1,2"], ["--query"]),
    ("visualize", [*VISUALIZE, "--query", "9,0,0"], ["--query", "outside"]),
    ("visualize", ["visualize", "--checkpoint", "{ckpt}", "--video", "nope.mp4"], ["--video"]),
    ("visualize", [*VISUALIZE, "--device", "cuda"], ["--device", "CUDA"], NO_CUDA),
    ("visualize", [*VISUALIZE[:-1], "{file}"], ["--output", "existing file"]),
    ("visualize", ["visualize", "--checkpoint", "{seg}", "--video", "{clip}"],
     ["--video", "image model", "image file"]),
    ("showcase", ["showcase", "--size", "4x14"], ["--size"]),
    ("import-caffe2", ["import-caffe2", "{tmp}/nope.pkl", "--output", "{tmp}/x.pt"], ["nope.pkl"]),
    ("export", [*EXPORT, "--device", "cuda"], ["CUDA"], NO_CUDA),
    ("export", [*EXPORT, "--input-size", "3x4"], ["--input-size"]),
    ("export", ["export", "--checkpoint", "{ckpt}", "--format", "png", "--output", "x"],
     ["--format", "invalid choice"]),
    ("inspect", ["inspect", "{ckpt}", "--input", "nope.mp4"], ["--input", "no such file"]),
    ("inspect", ["inspect", "{ckpt}", "--identity-below", "2"], ["--identity-below", "[0, 1]"]),
    ("inspect", ["inspect", "{tmp}/nope.pt"], ["nope.pt", "no such file"]),
]  # fmt: skip


def _row_param(row: tuple) -> Any:
    command, argv, words, *rest = row
    marks = [r for r in rest if not isinstance(r, str)]
    setup = next((r for r in rest if isinstance(r, str)), None)
    return pytest.param(argv, words, setup, marks=marks, id=f"{command}:{argv[-1]}")


def test_every_command_has_rows():
    from nlnet.cli import COMMANDS

    assert set(COMMANDS) <= {row[0] for row in ROWS}, set(COMMANDS) - {row[0] for row in ROWS}


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mistakes")
    (tmp / "a_file.txt").write_text("not a folder\n")
    torch.save({"conv1.weight": torch.zeros(8, 3, 3, 3)}, tmp / "other_arch.pth")
    return {"{file}": str(tmp / "a_file.txt"), "{pth}": str(tmp / "other_arch.pth"),
            "{videos}": str(helpers.video_tree(tmp / "videos"))}  # fmt: skip


@pytest.mark.parametrize("argv,words,setup", [_row_param(r) for r in ROWS])
def test_every_mistake_is_one_line(argv, words, setup, places, checkpoints, tmp_path, capsys,
                                   monkeypatch):  # fmt: skip
    """Each row: exit status 2, one line on stderr holding the row's words, no traceback."""
    from nlnet.cli import main

    if setup == "offline":  # an empty hub cache and no network
        import urllib.error

        monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))

        def offline(*args: Any, **kwargs: Any) -> None:
            raise urllib.error.URLError("no network")

        monkeypatch.setattr(torch.hub, "urlopen", offline)
    subst = {**places, "{tmp}": str(tmp_path)}
    if any("{ckpt}" in a or "{clip}" in a for a in argv):
        ckpt = checkpoints("video")
        subst.update({"{ckpt}": str(ckpt), "{clip}": _clip_path(ckpt)})
    if any("{seg}" in a for a in argv):
        subst["{seg}"] = str(checkpoints("segmentation"))
    filled = [_fill(a, subst) for a in argv]
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:  # the command line would print them
        warnings.simplefilter("always")
        rc = main(filled)
    _one_line(capsys, rc, *words)
    shown = [str(w.message) for w in caught if not issubclass(w.category, DeprecationWarning)]
    assert not shown, shown
    assert not (tmp_path / "run").exists()  # nothing written before the checks pass


def _fill(arg: str, subst: dict[str, str]) -> str:
    for key, value in subst.items():
        arg = arg.replace(key, value)
    return arg


def test_failed_start_leaves_no_directory_or_lock(tmp_path, capsys):
    from nlnet.cli import main

    out = tmp_path / "run"
    rc = main(["train", "--config", "smoke/folder_tiny", f"data.root={tmp_path / 'none'}",
               "--output-dir", str(out)])  # fmt: skip
    _one_line(capsys, rc, "data")
    assert not out.exists()  # the next run is not moved to a timestamped folder


def test_lock_only_directory_counts_as_empty(tmp_path, monkeypatch):
    import argparse

    from nlnet.commands.train import config_for

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "folder_tiny").mkdir(parents=True)
    (tmp_path / "runs" / "folder_tiny" / ".lock").write_text("pid 1\n")
    args = argparse.Namespace(config="smoke/folder_tiny", resume=None, force=False,
                              output_dir=None, device=None, overrides=[])  # fmt: skip
    assert config_for(args).output_dir == "runs/folder_tiny"  # not runs/folder_tiny-<time>
    (tmp_path / "runs" / "folder_tiny" / "metrics.jsonl").write_text("{}\n")
    assert config_for(args).output_dir.startswith("runs/folder_tiny-")


def test_corrupted_index_entry_is_probed_again(tmp_path):
    from nlnet.data.video.builder import build_frame_index, clear_memory_index

    clip = next(helpers.video_tree(tmp_path, per_class=1).rglob("*.mp4"))
    st = clip.stat()
    index = tmp_path / ".nlnet_index.json"
    for bad in ({"num_frames": None}, {"num_frames": "six", "fps": 10.0}, {"fps": []}, "junk"):
        entry = bad if isinstance(bad, str) else {**bad, "size": st.st_size,
                                                   "mtime_ns": st.st_mtime_ns}  # fmt: skip
        index.write_text(json.dumps({"version": 1, "entries": {str(clip): entry}}))
        clear_memory_index()
        (got,) = build_frame_index([str(clip)], "pyav", index)
        assert got["num_frames"] == 6 and got["error"] is None


def test_sigterm_saves_last_and_prints_the_resume_command(tmp_path, capsys):
    """A signal in the middle of a run: the loop ends the step, writes last.pt, says how to
    continue; --resume then finishes the run."""
    from nlnet.data.video.builder import collate_skip_bad
    from nlnet.engine.loop import train

    calls = []

    def collate(items):  # the second batch: the process receives SIGTERM
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return collate_skip_bad(items)

    root = helpers.video_tree(tmp_path / "videos", per_class=2)
    cfg = helpers.engine_cfg("video_classification", "c2d_tiny", helpers.video_data(root),
                             tmp_path / "run", **{"optim.max_iters": 4})  # fmt: skip
    summary = train(cfg, collate_fn=collate)
    err = "".join(capsys.readouterr())
    last = tmp_path / "run" / "checkpoints" / "last.pt"
    assert summary["stopped"] and summary["interrupted"] and last.is_file()
    assert f"nlnet train --output-dir {tmp_path / 'run'} --resume" in err
    assert torch.load(last, weights_only=True)["iteration"] == summary["iterations"] < 4
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored
    assert train(cfg, resume=True)["iterations"] == 4
