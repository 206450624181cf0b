"""Real-run safety: bad data, used run directories, kills, corrupted checkpoints, bad numbers."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from engine_standins import TinyClipDataset, TinyVideoNet, collate_standin, tiny_run_config

from nlnet.engine.checkpoint import (  # noqa: E402
    CheckpointError,
    checkpoint_info,
    load_checkpoint,
    save_checkpoint,
)
from nlnet.engine.config import ConfigError, load_config, replace  # noqa: E402
from nlnet.engine.errors import DataError, RunDirError  # noqa: E402
from nlnet.engine.loop import train  # noqa: E402
from nlnet.engine.rundir import RunLock  # noqa: E402
from nlnet.engine.runlog import MetricsLogger  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


#: these tests run 6 steps (no warm-up) with ``model.num_classes`` inferred from the data
SHORT_RUN = {"model.num_classes": None, "optim.max_iters": 6, "optim.steps": [4],
             "optim.warmup_iters": 0}  # fmt: skip


def _short_run_config(tmp_path: Path, name: str = "run", **over):
    return tiny_run_config(tmp_path, name, **{**SHORT_RUN, **over})


def _run(cfg, dataset=None, model=None, **kw):
    torch.manual_seed(0)
    model = model if model is not None else TinyVideoNet()
    dataset = dataset if dataset is not None else TinyClipDataset(n=16)
    return train(cfg, model=model, train_dataset=dataset, collate_fn=collate_standin, **kw)


def _records(run_dir) -> list[dict]:
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if x.strip()]


# -- bad data -------------------------------------------------------------------------------
def test_an_all_failed_mini_batch_is_skipped_and_counted_never_a_nan_loss(tmp_path):
    # batch size 1: every bad item is a mini-batch in which every clip failed
    cfg = _short_run_config(
        tmp_path, **{"train.batch_size": 1, "optim.max_iters": 16, "optim.steps": [12]}
    )
    s = _run(cfg, dataset=TinyClipDataset(n=8, bad=(1, 5)))
    assert s["iterations"] == 16 and s["empty_batches"] == 4 and s["skipped"] == 4
    train_recs = [r for r in _records(s["run_dir"]) if r["kind"] == "train"]
    empty = [r for r in train_recs if r["loss"] is None]
    assert len(empty) == 4  # logged as null, not NaN, and the run went on
    assert all(isinstance(r["loss"], float) for r in train_recs if r not in empty)
    epochs = [r for r in _records(s["run_dir"]) if r["kind"] == "epoch"]
    assert [r["empty_batches"] for r in epochs] == [2, 2]
    assert (Path(s["run_dir"]) / "curves.png").is_file()


def test_a_split_without_a_decodable_clip_stops_with_the_cause(tmp_path):
    with pytest.raises(DataError, match="no clip of split 'train' could be decoded") as exc:
        _run(_short_run_config(tmp_path), dataset=TinyClipDataset(n=8, bad=tuple(range(8))))
    assert "lr" not in str(exc.value)
    assert not (tmp_path / "run" / "checkpoints").exists()


def _write_videos(root: Path, frames: int) -> None:
    from nlnet.data.video_io.backends import write_video

    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for name in ("a", "b"):
            for i in range(2):
                video = rng.integers(0, 255, (frames, 16, 16, 3), dtype=np.uint8)
                write_video(root / split / name / f"{name}{i}.mp4", video, fps=4)


def test_no_usable_video_stops_before_training_naming_the_cause(tmp_path):
    _write_videos(tmp_path / "videos", frames=2)  # every video shorter than the 4-frame clip
    cfg = load_config(
        "smoke/folder_c2d_r50_nl5",
        [f"data.root={tmp_path / 'videos'}", f"output_dir={tmp_path / 'run'}",
         "train.device=cpu", "train.progress=false"],
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DataError) as exc:
            train(cfg)
    msg = str(exc.value)
    assert "no usable video in split 'train'" in msg and "shorter than" in msg
    assert "\n" not in msg and "lr" not in msg.replace("clip", "")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_num_classes_is_inferred_from_the_data_and_a_mismatch_is_an_error(tmp_path):
    cfg = _short_run_config(tmp_path, "inferred")
    assert cfg.model.num_classes is None
    s = _run(cfg)
    ckpt = load_checkpoint(s["checkpoint"])
    assert ckpt["num_classes"] == 3 and ckpt["class_names"] == ["class_0", "class_1", "class_2"]
    with pytest.raises(DataError, match="model.num_classes=5 but the training data has 3"):
        _run(_short_run_config(tmp_path, "mismatch", **{"model.num_classes": 5}))


# -- the run directory ----------------------------------------------------------------------
def test_a_used_run_directory_is_refused_unless_resume_or_force(tmp_path):
    cfg = _short_run_config(tmp_path)
    _run(cfg)
    with pytest.raises(RunDirError, match="--resume.*--force"):
        _run(cfg)
    s = _run(replace(cfg, **{"optim.max_iters": 3, "optim.steps": [2]}), force=True)
    assert s["iterations"] == 3
    assert [r["iter"] for r in _records(cfg.output_dir) if r["kind"] == "train"] == [1, 2, 3]


def test_a_run_that_stopped_before_its_first_step_needs_no_force(tmp_path):
    """A crash at the first step leaves only ``config.yaml``: the rerun starts without
    ``--force`` (nothing of a run would be lost); anything more is refused."""
    from pathlib import Path

    cfg = _short_run_config(tmp_path)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True)
    (out / "config.yaml").write_text("model: {}\n")
    assert _run(cfg)["iterations"] == cfg.optim.max_iters
    with pytest.raises(RunDirError, match="--resume.*--force"):
        _run(cfg)


def test_two_runs_cannot_write_one_directory(tmp_path):
    cfg = _short_run_config(tmp_path)
    with RunLock(cfg.output_dir), pytest.raises(RunDirError, match="in use by another run"):
        _run(cfg)
    assert _run(cfg)["iterations"] == 6  # the lock is released with its holder


def test_resume_after_a_kill_before_the_first_checkpoint_does_not_duplicate_rows(tmp_path):
    cfg = _short_run_config(tmp_path)
    logger = MetricsLogger(cfg.output_dir)  # what a run killed at iteration 2 leaves behind
    for it in (1, 2):
        logger.log({"kind": "train", "iter": it, "loss": 1.0, "lr": 0.1})
    s = _run(cfg, resume=True)
    assert [r["iter"] for r in _records(s["run_dir"]) if r["kind"] == "train"] == list(range(1, 7))


def test_resume_runs_to_the_configured_end(tmp_path):
    from nlnet.commands.train import config_for, configure_parser

    cfg = _short_run_config(tmp_path, **{"train.stop_after": 2})
    assert _run(cfg)["iterations"] == 2
    saved = (Path(cfg.output_dir) / "config.yaml").read_text()
    assert "stop_after: 0" in saved  # one invocation's stop is not part of the run
    import argparse

    parser = argparse.ArgumentParser()
    configure_parser(parser)
    args = parser.parse_args(["--output-dir", cfg.output_dir, "--resume"])
    resumed = config_for(args)
    assert resumed.train.stop_after == 0
    s = _run(resumed, resume=True)
    assert s["iterations"] == 6 and not s["stopped"]


def test_paths_are_stored_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "videos").mkdir()
    cfg = load_config(None, {"model.name": "tiny", "data.root": "videos",
                             "output_dir": "runs/rel", "train.device": "cpu",
                             "train.progress": False, "train.workers": 0,
                             "optim.max_iters": 2, "optim.steps": [1],
                             "train.batch_size": 4})  # fmt: skip
    s = _run(cfg)
    import yaml

    saved = yaml.safe_load((tmp_path / "runs/rel/config.yaml").read_text())
    assert saved["data"]["root"] == str(tmp_path / "videos")
    assert saved["output_dir"] == str(tmp_path / "runs/rel")
    assert load_checkpoint(s["checkpoint"])["config"]["data"]["root"] == str(tmp_path / "videos")


# -- checkpoints ----------------------------------------------------------------------------
def _good_checkpoint(path: Path) -> Path:
    return save_checkpoint(
        path, model=TinyVideoNet(), model_name="tiny", num_classes=3,
        preprocessing={"mean": [0.5] * 3, "std": [0.2] * 3},
    )  # fmt: skip


def test_damaged_checkpoints_are_one_line_errors_naming_the_file(tmp_path):
    good = _good_checkpoint(tmp_path / "good.pt").read_bytes()
    cases = {
        "empty.pt": (b"", "empty"),
        "truncated.pt": (good[: len(good) // 2], "truncated or corrupted"),
        "text.pt": (b"hello, not a checkpoint\n" * 4, "not a PyTorch checkpoint \\(it is a text"),
        "image.pt": (b"\x89PNG\r\n\x1a\n" + bytes(64), "not a PyTorch checkpoint \\(it is a PNG"),
    }
    # a flipped byte inside the stored weights: only the CRC can tell
    import zipfile

    with zipfile.ZipFile(tmp_path / "good.pt") as z:
        member = next(m for m in z.infolist() if m.filename.endswith("/data/0"))
    off = member.header_offset  # local header: name and extra-field lengths at bytes 26..29
    i = off + 30 + int.from_bytes(good[off + 26 : off + 28], "little")
    i += int.from_bytes(good[off + 28 : off + 30], "little") + 2
    cases["crc.pt"] = (good[:i] + bytes([good[i] ^ 0xFF]) + good[i + 1 :], "corrupted")
    for name, (data, why) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(CheckpointError, match=why) as exc:
            load_checkpoint(tmp_path / name)
        assert name in str(exc.value) and "\n" not in str(exc.value), name
    torch.save({"epoch": 3, "note": "no weights"}, tmp_path / "noweights.pt")
    with pytest.raises(CheckpointError, match="noweights.pt.*no model weights"):
        load_checkpoint(tmp_path / "noweights.pt")


def test_a_damaged_checkpoint_through_the_cli_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from nlnet.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.pt").write_bytes(b"")
    assert main(["eval", "--checkpoint", "bad.pt"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["nlnet eval: checkpoint 'bad.pt': the file is empty"]
    with pytest.raises(ValueError, match="the file is empty"):  # --debug: the traceback
        main(["--debug", "eval", "--checkpoint", "bad.pt"])


def test_checkpoints_have_the_normal_file_mode_and_orphans_are_removed(tmp_path):
    path = _good_checkpoint(tmp_path / "checkpoints" / "last.pt")
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    orphan = tmp_path / "checkpoints" / ".last.pt.x1y2.tmp"  # a write killed mid-way
    orphan.write_bytes(b"partial")
    with RunLock(tmp_path):
        assert not orphan.exists() and path.exists()


# -- config numbers, logs, console ----------------------------------------------------------
@pytest.mark.parametrize(
    "key, value",
    [("optim.lr", ".nan"), ("optim.lr", "-0.1"), ("optim.lr", "0"), ("optim.weight_decay", ".inf"),
     ("optim.momentum", "1.5"), ("optim.momentum", ".nan"), ("optim.gamma", "0"),
     ("optim.clip_grad_norm", "-1"), ("optim.warmup_factor", "2"), ("train.workers", "-1"),
     ("train.workers", "many")],
)  # fmt: skip
def test_non_finite_or_out_of_range_numbers_are_config_errors(key, value):
    with pytest.raises(ConfigError, match=key):
        load_config(None, [f"{key}={value}"])


def test_a_misspelt_model_override_is_a_config_error():
    with pytest.raises(ConfigError, match="sub_sampel"):
        load_config(None, ["model.name=c2d_r50", "model.overrides.sub_sampel=2"])
    cfg = load_config(None, ["model.name=c2d_r50", "model.overrides.width=4"])
    assert cfg.model.overrides == {"width": 4}


def test_null_values_in_metrics_never_break_plotting(tmp_path):
    logger = MetricsLogger(tmp_path)
    for r in [{"kind": "train", "iter": 1, "loss": None, "lr": 0.1},
              {"kind": "train", "iter": 2, "loss": float("nan"), "lr": None},
              {"kind": "train", "iter": 3, "loss": 0.5, "lr": 0.1},
              {"kind": "val", "iter": 3, "video_top1": None, "clip_top1": 50.0}]:  # fmt: skip
        logger.log(r)
    assert "null" in (tmp_path / "metrics.jsonl").read_text()
    assert logger.plot() is not None and (tmp_path / "curves.png").is_file()
    logger.write_csv()


def test_off_a_terminal_one_log_line_per_interval_and_no_bar(tmp_path, capsys):
    cfg = _short_run_config(tmp_path, **{"train.progress": None, "train.log_every": 2})
    _run(cfg)
    out = capsys.readouterr()
    lines = [x for x in out.out.splitlines() if x.startswith("iter ")]
    assert [x.split(":")[0] for x in lines] == ["iter 2/6", "iter 4/6", "iter 6/6"]
    assert "\r" not in out.err and "it/s" not in out.err


# -- one checkpoint format, one preprocessing ---------------------------------------------------
def test_checkpoints_carry_the_training_preprocessing_used_everywhere(tmp_path):
    from nlnet.data import IMAGENET_MEAN, IMAGENET_STD
    from nlnet.model_input import normalize

    s = _run(_short_run_config(tmp_path))
    info = checkpoint_info(s["checkpoint"])
    assert info.preprocessing.mean == pytest.approx(IMAGENET_MEAN)
    assert info.preprocessing.std == pytest.approx(IMAGENET_STD)
    assert info.model_name == "user:engine_standins.TinyVideoNet" and info.model_options == {
        "dropout": 0.5
    }
    frames = np.full((1, 2, 2, 3), 255, np.uint8)
    x = normalize(frames, info.preprocessing)
    expected = (1.0 - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)
    torch.testing.assert_close(x[0, 0, 0], expected.float())


def test_cost_reads_the_model_from_a_checkpoint(tmp_path, capsys):
    import argparse

    import nlnet.models  # noqa: F401  (registers the tiny models)
    from nlnet.commands import cost
    from nlnet.engine.checkpoint import build_model_from_checkpoint as load_model
    from nlnet.models.registry import create_model

    model = create_model("c2d_tiny_nl1", num_classes=3, width=2)
    save_checkpoint(
        tmp_path / "m.pt", model=model, model_name="c2d_tiny_nl1", num_classes=3,
        model_options={"width": 2},
        preprocessing={"mean": [0.1] * 3, "std": [0.2] * 3, "num_frames": 4, "size": 32},
    )  # fmt: skip
    loaded = load_model(tmp_path / "m.pt")
    assert not loaded.training
    for a, b in zip(model.state_dict().values(), loaded.state_dict().values()):
        assert torch.equal(a, b)
    parser = argparse.ArgumentParser()
    cost.configure_parser(parser)
    assert cost.main(parser.parse_args(["--checkpoint", str(tmp_path / "m.pt")])) == 0
    out = capsys.readouterr().out
    assert out.startswith("c2d_tiny_nl1  input 4x32x32")  # name and clip size of the checkpoint
    assert "layer3.1.non_local" in out


class _Payload:
    """Any class: unpickling it would run code from the file."""

    def __reduce__(self):
        return (print, ("pickled code ran",))


def test_a_checkpoint_with_pickled_code_is_refused(tmp_path, capsys):
    torch.save({"model": {"w": torch.zeros(1)}, "evil": _Payload()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="evil.pt.*pickled code"):
        load_checkpoint(tmp_path / "evil.pt")
    assert "pickled code ran" not in capsys.readouterr().out


class _NaNClips(TinyClipDataset):
    def __getitem__(self, i):
        item = super().__getitem__(i)
        return {**item, "clip": item["clip"] * float("nan")}


def test_a_nan_loss_on_decoded_clips_is_divergence_not_an_empty_batch(tmp_path):
    from nlnet.engine.errors import DivergedError

    with pytest.raises(DivergedError, match="at iteration 1 .*diverged"):
        _run(_short_run_config(tmp_path), dataset=_NaNClips(n=8))
