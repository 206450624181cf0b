"""The dense demos' seed table: every reported seed, then mean, standard deviation and minimum.

The protocol of docs/demo.md for the dense demos: the reported figures are the test figures of
seeds 0-4, all of them. This script trains both models of each seed side by side (one PyTorch
thread per job, ``--threads`` jobs), then writes ``<output-dir>/dense-seeds-<task>-<split>.md``:
per seed the test metric of the model without and with the block, the gap, and the training
wall time of the slower model; or, with ``--report``, writes it from an existing run's
``summary.json`` without training (several files of one recipe, e.g. one seed each, make one
table). Under the table of the segmentation and U-Net demos: the seeds whose gap misses the bar
(:data:`nlnet.demo.seeds.GAP_BAR`, +10 points) with the 95% interval of the failure rate.

Usage::

    python benchmarks/dense_seeds.py --task segmentation --seeds 0-4    # mIoU
    python benchmarks/dense_seeds.py --task unet --seeds 0-4            # mDice
    python benchmarks/dense_seeds.py --task unet --seeds 100-109 --split val  # screening
    python benchmarks/dense_seeds.py --task unet --report runs/dense-seeds-unet-test/summary.json
    python benchmarks/dense_seeds.py --task unet --report runs/s*/dense-seeds-unet-val/summary.json
    python benchmarks/dense_seeds.py --task super-resolution --seeds 0-4 --threads 1   # PSNR-Y
    python benchmarks/dense_seeds.py --task super-resolution --seeds 100-104 --split val \
        --set steps=600 --output-dir runs/sr-600    # a candidate recipe, screened

Seed ``k`` draws its own images (segmentation, U-Net; the super-resolution photographs' bands are
fixed), initialisation and data order. ``--set KEY=VALUE`` changes one setting of the
super-resolution demo (:class:`nlnet.demo.sr.SRDemoSettings`, e.g. ``steps=600``,
``photos=builtin``) or of the U-Net demo (:class:`nlnet.demo.dense.UNetDemoSettings`, e.g.
``lr=3e-2``, ``"block={bias: true}"``), read as YAML; the super-resolution table also gives both
models' parameters and multiply-adds. The screening seeds
(:data:`nlnet.demo.seeds.SCREENING_SEEDS`) give validation figures only: their test
figures are refused, as by ``nlnet demo --seeds``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nlnet.analysis.seeds import merged_summary, parse_seeds
from nlnet.demo.seeds import METRIC, run_seed_table, write_seed_table
from nlnet.demo.settings import dense_settings
from nlnet.engine.jobs import jobs_for

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=sorted(METRIC), default="segmentation")
    parser.add_argument("--seeds", default="0-4", help="reported seeds (default 0-4)")
    parser.add_argument("--threads", default="auto", help="jobs side by side (default: cores)")
    parser.add_argument("--output-dir", default="runs", help="parent of the outputs (runs)")
    parser.add_argument("--quick", action="store_true", help="tiny setting (numbers meaningless)")
    parser.add_argument("--report", nargs="+", default=None, metavar="SUMMARY",
                        help="summary.json file(s) of one recipe to table, no training")  # fmt: skip
    parser.add_argument("--split", choices=("test", "val"), default="test",
                        help="test (reported seeds) or val (screening seeds)")  # fmt: skip
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="change one setting of the demo's recipe (repeatable)")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        seeds, jobs = parse_seeds(args.seeds), jobs_for(args.threads)
        settings = dense_settings(args.task, args.set, args.quick)  # the one reading of --set
        if args.report:
            summary = merged_summary(args.report)
            split = summary.get("split", "test")
            path = write_seed_table(args.task, summary, split, Path(args.output_dir))
        else:
            path = run_seed_table(args.task, seeds, Path(args.output_dir), jobs, settings,
                                  split=args.split)  # fmt: skip
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{path.read_text()}\nwritten to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
