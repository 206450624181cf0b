"""Worker of test_distributed.py, importable by spawned processes (not a test module)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from engine_standins import TinyClipDataset, TinyVideoNet, collate_standin, tiny_run_config


def make_cfg(out_dir: str, batch_size: int, **over):
    """The stand-ins' tiny run (:func:`engine_standins.tiny_run_config`): 6 steps of
    ``batch_size`` clips per process, no dropout or BN randomness, validation on ``val``."""
    return tiny_run_config(
        Path(out_dir), **{"optim.max_iters": 6, "optim.steps": [4], "optim.warmup_iters": 0,
                          "train.batch_size": batch_size, "train.ckpt_every": 2,
                          "model.dropout": 0.0, "train.val_split": "val", "eval.batch_size": 3,
                          "output_dir": out_dir, **over},
    )  # fmt: skip


def run_training(cfg, bad: tuple[int, ...] = ()) -> tuple[torch.nn.Module, dict]:
    torch.manual_seed(0)
    model = TinyVideoNet(bn=False)
    from nlnet.engine.loop import train

    summary = train(
        cfg,
        model=model,
        train_dataset=TinyClipDataset(n=16, bad=bad),
        val_dataset=TinyClipDataset(n=7, clips=2),
        collate_fn=collate_standin,
    )
    return model, summary


def worker(
    rank: int, world_size: int, port: int, out_dir: str, batch_size: int, bad: tuple = ()
) -> None:
    torch.set_num_threads(1)
    from nlnet.engine.distributed import cleanup, init_distributed

    info = init_distributed(
        "cpu", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    try:
        model, summary = run_training(make_cfg(out_dir, batch_size), bad)
        result = {
            "rank": rank,
            "backend": info.backend,
            "summary": summary,
            "state": {k: v.tolist() for k, v in model.state_dict().items()},
        }
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result, default=str))
    finally:
        cleanup(info)
