"""The dense demos' seed table (segmentation, U-Net, super-resolution): every seed of a recipe,
then mean, standard deviation and minimum, and the failure count against the demo's bar.

One runner for ``nlnet demo --task segmentation|unet|super-resolution --seeds S`` and
``benchmarks/dense_seeds.py`` (which also tables ``summary.json`` files given by path): both
models of each seed side by side (one PyTorch thread per job), the table written to
``<output-dir>/dense-seeds-<task>-<split>.md`` and the runs' summary under
``<output-dir>/dense-seeds-<task>-<split>/``.  The protocol (docs/demo.md): screening seeds give
validation figures only; the reported seeds' test figures are every one shown.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from nlnet.demo.settings import dense_settings
from nlnet.demo.video_seeds import SCREENING_SEEDS, dense_seed_rows, markdown_table

__all__ = ["GAP_BAR", "METRIC", "check_seeds", "gap_line", "merged_summary", "run",
           "run_seed_table", "seed_table_text", "write_seed_table"]  # fmt: skip

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


def run(
    task: str, seeds: list[int], out: Path, jobs: int, quick: bool, split: str = "test",
    changes: list[str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Train both models of every seed (the demo's recipe, or its quick setting; ``changes``:
    ``--set`` of the demo's settings); their figures on ``split``."""
    torch.set_num_threads(1)
    settings = dense_settings(task, changes or [], quick)
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


def seed_table_text(task: str, summary: dict[str, Any], split: str) -> str:
    """The seed table of ``summary``'s runs: rows, mean / std / min, the failure count against
    :data:`GAP_BAR` and the recipe's settings (and, for super-resolution, the models' cost)."""
    metric = METRIC[task]
    models, rows = dense_seed_rows(summary, metric)
    what = f"{split} {LABEL.get(metric, metric)}"
    digits = 2 if metric == "psnr_y" else 1
    table = markdown_table(models, rows, what, f"gap ({models[-1]} - {models[0]})", digits)
    seeds_run = ", ".join(str(r["seed"]) for r in rows)
    verdicts = gap_line(task, rows, models)
    verdicts = f"\n{verdicts}\n" if verdicts else ""
    return f"{task} demo, seeds {seeds_run}: {what}\n\n{table}\n{verdicts}{cost_lines(summary)}"


def write_seed_table(task: str, summary: dict[str, Any], split: str, output_dir: Path) -> Path:
    """:func:`seed_table_text` written to ``<output_dir>/dense-seeds-<task>-<split>.md``."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / f"dense-seeds-{task}-{split}.md"
    path.write_text(seed_table_text(task, summary, split))
    return path


def check_seeds(seeds: list[int], split: str) -> None:
    """Screening seeds give validation figures only (docs/demo.md, Protocol).

    Raises:
        ValueError: one line naming ``--seeds``: test figures of a screening seed asked for.
    """
    screening = [s for s in seeds if s in SCREENING_SEEDS]
    if split == "test" and screening:
        raise ValueError(f"--seeds: {screening} are screening seeds, whose test figures are never "
                         "reported; use --split val for them (docs/demo.md, Protocol)")  # fmt: skip


def run_seed_table(
    task: str, seeds: list[int], output_dir: Path, jobs: int, *, quick: bool = False,
    split: str = "test", changes: list[str] | None = None, report: bool = False,
) -> Path:  # fmt: skip
    """Train every seed (or, ``report``, read the runs already in ``output_dir``) and write the
    table; returns its path.

    Raises:
        ValueError: one line: a screening seed's test figures, a bad ``--set``, or (``report``)
            no summary of ``task`` and ``split`` in ``output_dir``.
    """
    check_seeds(seeds, split)
    dense_settings(task, changes or [], quick)  # the one check, before any work
    out = Path(output_dir) / f"dense-seeds-{task}-{split}"
    if report:
        path = out / "summary.json"
        if not path.is_file():
            raise ValueError(f"--report: no {path}; run the seeds first (without --report)")
        summary = merged_summary([str(path)])
    else:
        start = time.perf_counter()
        summary = run(task, seeds, out, jobs, quick, split, changes)
        print(f"{len(seeds)} seed(s) in {time.perf_counter() - start:.0f} s", flush=True)
    return write_seed_table(task, summary, split, Path(output_dir))
