"""The dense demos' seed table: every reported seed, then mean, standard deviation and minimum.

The protocol of docs/demo.md for the dense demos: the reported figures are the test figures of
seeds 0-4, all of them. This script trains both models of each seed side by side (one PyTorch
thread per job, ``--threads`` jobs), then writes ``<output-dir>/dense-seeds-<task>.md``:
per seed the test metric of the model without and with the block, the gap, and the training
wall time of the slower model; or, with ``--report``, writes it from an existing run's
``summary.json`` without training.

Usage::

    python benchmarks/dense_seeds.py --task segmentation --seeds 0-4    # mIoU
    python benchmarks/dense_seeds.py --task unet --seeds 0-4            # mDice
    python benchmarks/dense_seeds.py --task unet --report runs/dense-seeds-unet/summary.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from nlnet.demo.jobs import jobs_for
from nlnet.demo.video_seeds import dense_seed_rows, markdown_table, parse_seeds

METRIC = {"segmentation": "mIoU", "unet": "mDice"}


def run(task: str, seeds: list[int], out: Path, jobs: int, quick: bool) -> dict[str, Any]:
    """Train and test both models of every seed (the demo's recipe, or its quick setting)."""
    torch.set_num_threads(1)
    if task == "unet":
        from nlnet.demo.unet import UNetDemoSettings, run_unet_demo

        settings = UNetDemoSettings.quick() if quick else None
        return run_unet_demo(seeds, out_dir=out, settings=settings, jobs=jobs, pictures=False)
    from nlnet.demo.dense import DEMO_EPOCHS, run_dense_demo
    from nlnet.demo.digits_dense import DenseDigitsConfig

    data = DenseDigitsConfig(size=48, num_train=16, num_val=4, num_test=8) if quick else None
    return run_dense_demo(
        "segmentation", seeds, out_dir=out, data=data, epochs=1 if quick else DEMO_EPOCHS,
        batch_size=4 if quick else 32, jobs=jobs, pictures=False,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=sorted(METRIC), default="segmentation")
    parser.add_argument("--seeds", default="0-4", help="reported seeds (default 0-4)")
    parser.add_argument("--threads", default="auto", help="jobs side by side (default: cores)")
    parser.add_argument("--output-dir", default="runs", help="parent of the outputs (runs)")
    parser.add_argument("--quick", action="store_true", help="tiny setting (numbers meaningless)")
    parser.add_argument("--report", default=None, help="a summary.json to table, no training")
    args = parser.parse_args(argv)
    try:
        seeds, jobs = parse_seeds(args.seeds), jobs_for(args.threads)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.output_dir) / f"dense-seeds-{args.task}"
    if args.report:
        summary = json.loads(Path(args.report).read_text())
    else:
        start = time.perf_counter()
        summary = run(args.task, seeds, out, jobs, args.quick)
        print(f"{len(seeds)} seed(s) in {time.perf_counter() - start:.0f} s", flush=True)
    metric = METRIC[args.task]
    models, rows = dense_seed_rows(summary, metric)
    table = markdown_table(models, rows, f"test {metric}", f"gap ({models[-1]} - {models[0]})")
    seeds_run = ", ".join(str(r["seed"]) for r in rows)
    text = f"{args.task} demo, seeds {seeds_run}: test {metric}\n\n{table}\n"
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    path = Path(args.output_dir) / f"dense-seeds-{args.task}.md"
    path.write_text(text)
    print(f"{text}\nwritten to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
