"""Wrong inputs are one line and exit 2, and a run's directory follows its lifecycle: nothing
is written before the config, data and model checks pass; a ``.lock`` alone is an empty
directory; SIGINT/SIGTERM write ``last.pt`` and print the exact ``--resume`` command."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import helpers
import pytest
import torch


def _one_line(capsys, rc: int, *words: str) -> str:
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert all(w in err for w in words), err
    return err


@pytest.fixture
def video_ckpt(checkpoints):
    return checkpoints("video")  # shared with test_commands.py (made once per session)


def _clip_path(ckpt: Path) -> str:
    return str(next((ckpt.parents[2] / "videos" / "val").rglob("*.mp4")))


@pytest.mark.parametrize(
    "argv,words",
    [
        (["predict", "{clip}", "--checkpoint", "{ckpt}", "--clips", "0"], ["--clips"]),
        (["predict", "{clip}", "--checkpoint", "{ckpt}", "--topk", "0"], ["--topk"]),
        (["predict", "{clip}", "--checkpoint", "{ckpt}", "--classes", "nope.txt"], ["--classes"]),
        (["visualize", "--checkpoint", "{ckpt}", "--video", "{clip}", "--block", "x"], ["--block"]),
        (["visualize", "--checkpoint", "{ckpt}", "--video", "{clip}", "--top-k", "0"], ["--top-k"]),
        (["visualize", "--checkpoint", "{ckpt}", "--video", "{clip}", "--query", "1,2"],
         ["--query"]),
        (["visualize", "--checkpoint", "{ckpt}", "--video", "nope.mp4"], ["--video"]),
        (["cost", "c2d_r50_nl"], ["unknown model", "c2d_r50_nl5"]),
        (["train", "--config", "smoke/folder_tiny", "model.name=c2d_tiny_nl", "--print-config"],
         ["model.name", "unknown model"]),
        (["eval", "--config", "smoke/folder_tiny", "--checkpoint", "{ckpt}",
          "model.name=c2d_tiny_nl"], ["model.name", "unknown model"]),
    ],
)  # fmt: skip
def test_bad_flags_are_one_line(argv, words, video_ckpt, capsys):
    from nlnet.cli import main

    subst = {"{ckpt}": str(video_ckpt), "{clip}": _clip_path(video_ckpt)}
    capsys.readouterr()
    _one_line(capsys, main([subst.get(a, a) for a in argv]), *words)


def test_resume_of_a_missing_run_blames_resume(tmp_path, capsys):
    from nlnet.cli import main

    rc = main(["train", "--output-dir", str(tmp_path / "never"), "--resume"])
    assert _one_line(capsys, rc, "--resume").startswith("nlnet train: --resume")
    assert not (tmp_path / "never").exists()


def test_failed_start_leaves_no_directory_or_lock(tmp_path, capsys):
    from nlnet.cli import main

    out = tmp_path / "run"
    rc = main(["train", "--config", "smoke/folder_tiny", f"data.root={tmp_path / 'none'}",
               "--output-dir", str(out)])  # fmt: skip
    _one_line(capsys, rc, "data")
    assert not out.exists()  # the next run is not moved to a timestamped folder


def test_lock_only_directory_counts_as_empty(tmp_path, monkeypatch):
    import argparse

    from nlnet.commands.train import _config_for

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "folder_tiny").mkdir(parents=True)
    (tmp_path / "runs" / "folder_tiny" / ".lock").write_text("pid 1\n")
    args = argparse.Namespace(config="smoke/folder_tiny", resume=None, force=False,
                              output_dir=None, device=None, overrides=[])  # fmt: skip
    assert _config_for(args).output_dir == "runs/folder_tiny"  # not runs/folder_tiny-<time>
    (tmp_path / "runs" / "folder_tiny" / "metrics.jsonl").write_text("{}\n")
    assert _config_for(args).output_dir.startswith("runs/folder_tiny-")


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
