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
    python benchmarks/dense_seeds.py --task unet --seeds 100-104 --split val  # screening
    python benchmarks/dense_seeds.py --task unet --report runs/dense-seeds-unet-test/summary.json

Seed ``k`` draws its own images, initialisation and data order. The screening seeds
(:data:`nlnet.demo.video_seeds.SCREENING_SEEDS`) give validation figures only: their test
figures are refused, as by ``nlnet demo --seeds``.
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
from nlnet.demo.video_seeds import SCREENING_SEEDS, dense_seed_rows, markdown_table, parse_seeds

METRIC = {"segmentation": "mIoU", "unet": "mDice"}


def run(
    task: str, seeds: list[int], out: Path, jobs: int, quick: bool, split: str = "test"
) -> dict[str, Any]:
    """Train both models of every seed (the demo's recipe, or its quick setting); their figures
    on ``split``."""
    torch.set_num_threads(1)
    if task == "unet":
        from nlnet.demo.unet import UNetDemoSettings, run_unet_demo

        settings = UNetDemoSettings.quick() if quick else None
        return run_unet_demo(
            seeds, out_dir=out, settings=settings, jobs=jobs, pictures=False, split=split
        )
    from nlnet.demo.dense import DEMO_EPOCHS, run_dense_demo
    from nlnet.demo.digits_dense import DenseDigitsConfig

    data = DenseDigitsConfig(size=48, num_train=16, num_val=4, num_test=8) if quick else None
    return run_dense_demo(
        "segmentation", seeds, out_dir=out, data=data, epochs=1 if quick else DEMO_EPOCHS,
        batch_size=4 if quick else 32, jobs=jobs, pictures=False, split=split,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=sorted(METRIC), default="segmentation")
    parser.add_argument("--seeds", default="0-4", help="reported seeds (default 0-4)")
    parser.add_argument("--threads", default="auto", help="jobs side by side (default: cores)")
    parser.add_argument("--output-dir", default="runs", help="parent of the outputs (runs)")
    parser.add_argument("--quick", action="store_true", help="tiny setting (numbers meaningless)")
    parser.add_argument("--report", default=None, help="a summary.json to table, no training")
    parser.add_argument("--split", choices=("test", "val"), default="test",
                        help="test (reported seeds) or val (screening seeds)")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        seeds, jobs = parse_seeds(args.seeds), jobs_for(args.threads)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    screening = [s for s in seeds if s in SCREENING_SEEDS]
    if args.split == "test" and screening and not args.report:
        print(f"error: --seeds: {screening} are screening seeds, whose test figures are never "
              "reported; use --split val for them (docs/demo.md, Protocol)", file=sys.stderr)  # fmt: skip
        return 2
    out = Path(args.output_dir) / f"dense-seeds-{args.task}-{args.split}"
    if args.report:
        try:
            summary = json.loads(Path(args.report).read_text())
        except (OSError, ValueError) as exc:
            print(f"error: --report: cannot read {args.report}: {exc}", file=sys.stderr)
            return 2
        args.split = summary.get("split", "test")
    else:
        start = time.perf_counter()
        summary = run(args.task, seeds, out, jobs, args.quick, args.split)
        print(f"{len(seeds)} seed(s) in {time.perf_counter() - start:.0f} s", flush=True)
    metric = METRIC[args.task]
    models, rows = dense_seed_rows(summary, metric)
    what = f"{args.split} {metric}"
    table = markdown_table(models, rows, what, f"gap ({models[-1]} - {models[0]})")
    seeds_run = ", ".join(str(r["seed"]) for r in rows)
    text = f"{args.task} demo, seeds {seeds_run}: {what}\n\n{table}\n"
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    path = Path(args.output_dir) / f"dense-seeds-{args.task}-{args.split}.md"
    path.write_text(text)
    print(f"{text}\nwritten to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
