"""The dense demos' seed table: every reported seed, then mean, standard deviation and minimum.

The protocol of docs/demo.md for the dense demos: the reported figures are the test figures of
seeds 0-4, all of them. This script trains both models of each seed side by side (one PyTorch
thread per job, ``--threads`` jobs), then writes ``<output-dir>/dense-seeds-<task>.md``:
per seed the test metric of the model without and with the block, the gap, and the training
wall time of the slower model; or, with ``--report``, writes it from an existing run's
``summary.json`` without training (several files of one recipe, e.g. one seed each, make one
table). Under the table of the segmentation and U-Net demos: the seeds whose gap misses the bar
(:data:`GAP_BAR`, +10 points) with the 95% interval of the failure rate.

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
``photos=builtin``) or of the U-Net demo (:class:`nlnet.demo.unet.UNetDemoSettings`, e.g.
``lr=3e-2``, ``"block={bias: true}"``), read as YAML; the super-resolution table also gives both
models' parameters and multiply-adds. The screening seeds
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

METRIC = {"segmentation": "mIoU", "unet": "mDice", "super-resolution": "psnr_y"}
LABEL = {"psnr_y": "PSNR-Y (dB)"}
#: The dense demos' bar (docs/demo.md, Protocol): the block's model gains at least this much on
#: every seed (mIoU, mDice points); super-resolution has none (it is reported as it is).
GAP_BAR = {"segmentation": 10.0, "unet": 10.0}


def merged_summary(paths: list[str]) -> dict[str, Any]:
    """One summary of several runs' ``summary.json`` (e.g. one seed each): their runs together.

    Raises:
        ValueError: one line naming ``--report``: a file unreadable, or runs of another recipe
            (``settings``) or split than the first file's, or a seed in two files.
    """
    merged: dict[str, Any] = {}
    for path in paths:
        try:
            summary = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"--report: cannot read {path}: {exc}") from None
        if not merged:
            merged = {**summary, "runs": list(summary["runs"])}
            continue
        for key in ("settings", "split"):
            if summary.get(key) != merged.get(key):
                raise ValueError(f"--report: {path} has another {key} than {paths[0]}: "
                                 "one table holds one recipe")  # fmt: skip
        seen = {r["seed"] for r in merged["runs"]}
        if twice := sorted(seen & {r["seed"] for r in summary["runs"]}):
            raise ValueError(f"--report: {path}: seed(s) {twice} are in an earlier file too")
        merged["runs"] += summary["runs"]
    return merged


def gap_line(task: str, rows: list[dict[str, Any]], models: list[str]) -> str:
    """The failure count of ``rows`` against :data:`GAP_BAR` with its 95% interval; ``""`` for a
    task without a bar."""
    from nlnet.demo.video_seeds import verdict_line

    if task not in GAP_BAR or len(models) < 2:
        return ""
    bar = GAP_BAR[task]
    verdicts = {r["seed"]: r["gap"] >= bar for r in rows}
    return verdict_line(verdicts, f"{models[-1]} - {models[0]} >= +{bar:.0f} {METRIC[task]}")


def demo_settings(task: str, changes: list[str], quick: bool) -> Any:
    """The demo's settings with the ``--set`` changes (:func:`nlnet.demo.settings.dense_settings`)."""
    from nlnet.demo.settings import dense_settings

    return dense_settings(task, changes, quick)


def run(
    task: str, seeds: list[int], out: Path, jobs: int, quick: bool, split: str = "test",
    changes: list[str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Train both models of every seed (the demo's recipe, or its quick setting; ``changes``:
    ``--set`` of the demo's settings); their figures on ``split``."""
    torch.set_num_threads(1)
    settings = demo_settings(task, changes or [], quick)
    if task == "super-resolution":
        from nlnet.demo.sr import run_sr_demo

        return run_sr_demo(seeds, out_dir=out, settings=settings, jobs=jobs, pictures=False,
                           split=split)  # fmt: skip
    if task == "unet":
        from nlnet.demo.unet import run_unet_demo

        return run_unet_demo(
            seeds, out_dir=out, settings=settings, jobs=jobs, pictures=False, split=split
        )
    from nlnet.data.digits.dense import DenseDigitsConfig
    from nlnet.demo.dense import run_dense_demo

    data = DenseDigitsConfig(size=48, num_train=16, num_val=4, num_test=8) if quick else None
    return run_dense_demo(
        "segmentation",
        seeds,
        out_dir=out,
        data=data,
        settings=settings,
        jobs=jobs,
        pictures=False,
        split=split,
    )


def cost_lines(summary: dict[str, Any]) -> str:
    """The models' parameters and multiply-adds (``summary["cost"]``, super-resolution) and the
    recipe's settings (``summary["settings"]``: which recipe the table is of), as lines under
    the table ("" without either)."""
    lines = []
    if cost := summary.get("cost"):
        lines = ["", "| model | params | MACs / training patch | MACs / test tile |",
                 "| --- | --- | --- | --- |"]  # fmt: skip
        for model, c in cost.items():
            lines.append(f"| {model} | {c['params']:,} | {c['macs_patch'] / 1e6:.1f} M | "
                         f"{c['macs_tile'] / 1e6:.1f} M |")  # fmt: skip
    if (settings := summary.get("settings")) is not None:
        lines += ["", f"settings: {settings}"]
    return "\n".join(lines) + "\n" if lines else ""


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
        demo_settings(args.task, args.set, args.quick)  # the one check, before any work
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
            summary = merged_summary(args.report)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        args.split = summary.get("split", "test")
    else:
        start = time.perf_counter()
        summary = run(args.task, seeds, out, jobs, args.quick, args.split, args.set)
        print(f"{len(seeds)} seed(s) in {time.perf_counter() - start:.0f} s", flush=True)
    metric = METRIC[args.task]
    models, rows = dense_seed_rows(summary, metric)
    what = f"{args.split} {LABEL.get(metric, metric)}"
    digits = 2 if metric == "psnr_y" else 1
    table = markdown_table(models, rows, what, f"gap ({models[-1]} - {models[0]})", digits)
    seeds_run = ", ".join(str(r["seed"]) for r in rows)
    verdicts = gap_line(args.task, rows, models)
    verdicts = f"\n{verdicts}\n" if verdicts else ""
    text = (
        f"{args.task} demo, seeds {seeds_run}: {what}\n\n{table}\n{verdicts}{cost_lines(summary)}"
    )
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    path = Path(args.output_dir) / f"dense-seeds-{args.task}-{args.split}.md"
    path.write_text(text)
    print(f"{text}\nwritten to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
