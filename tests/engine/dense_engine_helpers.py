"""Configs and runs of the dense engine tests, importable by spawned DDP workers (not a test
module)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from nlnet.data.digits.dense import DenseDigitsConfig, prepare_dense_digits

#: the smallest dense digits task the models train on (64x64 images: the tiny detector's size)
TINY_DATA = DenseDigitsConfig(size=64, num_train=8, num_val=2, num_test=2, seed=5)


def tiny_data(root: str | Path) -> Path:
    return prepare_dense_digits(TINY_DATA, root)


def dense_cfg(task: str, model: str, data_root: str | Path, out_dir: str | Path, **over: Any):
    """A few-step config of the segmentation or detection task on the tiny digits data."""
    from nlnet.engine.config import load_config

    base = {
        "task": task,
        "model.name": model,
        "data.root": str(data_root),
        "optim.optimizer": "adamw",
        "optim.lr": 1e-3,
        "optim.weight_decay": 1e-4,
        "optim.max_iters": 4,
        "optim.steps": [3],
        "train.batch_size": 2,
        "train.workers": 0,
        "train.log_every": 1,
        "train.ckpt_every": 0,
        "train.device": "cpu",
        "train.progress": False,
        "eval.batch_size": 2,
        "eval.workers": 0,
        "eval.split": "test",
        "output_dir": str(out_dir),
    }
    if task == "segmentation":
        base["model.num_classes"] = 4
        base["class_names"] = ["background", "cue", "match", "other"]
    if task == "detection":
        base["data.hflip"] = 0.5  # a random draw per item: resume must reproduce it
    base.update(over)
    return load_config(None, base)


def records(run_dir: str | Path) -> list[dict]:
    text = (Path(run_dir) / "metrics.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def run(cfg, **kw) -> tuple[torch.nn.Module, dict]:
    """Train ``cfg`` from the model built with seed 0 (``model=`` replaces it); return both."""
    from nlnet.engine.loop import train
    from nlnet.engine.modeling import build_model

    model = kw.pop("model", None)
    if model is None:
        torch.manual_seed(0)
        model = build_model(cfg)
    return model, train(cfg, model=model, **kw)


def ddp_worker(rank: int, world_size: int, port: int, cfg_args: tuple, out: str) -> None:
    """One gloo process: train ``dense_cfg(*cfg_args)``; write its weights and summary."""
    torch.set_num_threads(1)
    from nlnet.engine.distributed import cleanup, init_distributed

    info = init_distributed(
        "cpu", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    try:
        task, model_name, root, run_dir, over = cfg_args
        model, summary = run(dense_cfg(task, model_name, root, run_dir, **over))
        torch.save(model.state_dict(), Path(out) / f"rank{rank}.pt")
        Path(out, f"rank{rank}.json").write_text(json.dumps(summary, default=str))
    finally:
        cleanup(info)
