"""The demos' seed tables (``nlnet demo --seeds``): every seed of a recipe, then mean,
standard deviation and minimum, and the failure count against the demo's bar.

The protocol (docs/demo.md, "Protocol"): every recipe choice is made on *validation* figures of
the screening seeds (:data:`SCREENING_SEEDS`, never reported); the reported figures are the
*test* figures of every reported seed. The video demo (``nlnet demo --seeds 0-9``) runs each seed
in its own run directory and tables them (``--report``: from the runs already in
``--output-dir``; ``--perturb``: each seed's pass/fail with and without a perturbation); the
dense demos (``--task segmentation|unet|super-resolution --seeds S``) run both models of every
seed side by side (one PyTorch thread per job) into ``<output-dir>/dense-seeds-<task>-<split>/``
and write ``dense-seeds-<task>-<split>.md`` (``benchmarks/dense_seeds.py`` tables
``summary.json`` files given by path). The tables themselves are :mod:`nlnet.analysis.seeds`'.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nlnet.analysis.seeds import (
    format_cell,
    markdown_table,
    merged_summary,
    seed_rows_of_runs,
    verdict_line,
)

__all__ = ["GAP_BAR", "METRIC", "SCREENING_SEEDS", "agreement_table", "check_seeds",
           "collect_runs", "gap_line", "run_seed_table", "seed_table", "write_seed_table"]  # fmt: skip


#: Seeds on which recipes are chosen (validation figures only); never reported. 100-104 at
#: first, then 100-109 for the dense demos; since December 2026 thirty (100-129), so that a
#: failure of one seed in twenty has a fair chance to show (docs/demo.md, Protocol).
SCREENING_SEEDS: tuple[int, ...] = tuple(range(100, 130))
BASELINE = "c2d_tiny"
NON_LOCAL = "c2d_tiny_nl1"


def collect_runs(
    root: Path,
    seeds: Sequence[int],
    *,
    quick: bool,
    task: str,
    settings_of: Callable[[int], dict[str, Any]] | None = None,
    changes: Sequence[str] = (),
) -> dict[int, dict[str, Any]]:
    """The newest ``summary.json`` of each seed among ``root/demo-*-seed<k>/`` with the same
    quick flag, task and recipe (the run directories' names sort by their timestamps).

    Args:
        settings_of: the settings a run of seed ``k`` must have recorded (``summary.json``'s
            ``settings``): runs of the same recipe match however it was spelled (``--set
            epochs=5`` and a default of 5 are one recipe). None: any recipe of the task.
        changes: the ``--set`` items, only to name the recipe in the error.

    Raises:
        ValueError: a seed without such a run.
    """
    found: dict[int, dict[str, Any]] = {}
    for path in sorted(Path(root).glob("demo-*-seed*/summary.json")):
        try:
            summary = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        seed = summary.get("seed")
        if (
            seed in seeds
            and bool(summary.get("quick")) == quick
            and summary.get("settings", {}).get("task", {}).get("task", "same") == task
            and (settings_of is None or summary.get("settings") == _as_json(settings_of(seed)))
        ):
            found[seed] = {**summary, "run_dir": str(path.parent)}
    missing = [s for s in seeds if s not in found]
    if missing:
        changed = "".join(f" --set {o}" for o in changes)
        raise ValueError(
            f"--report: no {'quick ' if quick else ''}{task!r}{changed} run of seed(s) {missing} "
            f"in {root} (run them with --seeds, without --report)"
        )
    return found


def _as_json(value: Any) -> Any:
    """``value`` as ``summary.json`` holds it (tuples as lists)."""
    return json.loads(json.dumps(value))


def seed_rows(
    summaries: dict[int, dict[str, Any]], split: str = "test"
) -> tuple[list[str], list[dict[str, Any]]]:
    """Per seed: each model's top-1 (%) on ``split``, the non-local model's gap to C2D, wall and
    CPU seconds. Returns the model names (baseline first) and the rows, by seed."""
    if split not in ("test", "val"):
        raise ValueError(f"split: expected 'test' or 'val', got {split!r}")
    key = f"{split}_top1"
    models: list[str] = []
    for summary in summaries.values():
        models += [m for m in summary["results"] if m not in models]
    models.sort(key=lambda m: (m != BASELINE, m != NON_LOCAL))
    rows = []
    for seed in sorted(summaries):
        res = summaries[seed]["results"]
        row: dict[str, Any] = {"seed": seed}
        for m in models:
            row[m] = 100 * res[m][key] if m in res else math.nan
        row["gap"] = row.get(NON_LOCAL, math.nan) - row.get(BASELINE, math.nan)
        row["wall"] = float(summaries[seed].get("total_time_s", math.nan))
        row["cpu"] = float(summaries[seed].get("cpu_time_s", math.nan))
        rows.append(row)
    return models, rows


#: The demo's bar (docs/demo.md, Protocol): the non-local model at least this top-1 (%) ...
NL_BAR = 90.0
#: ... and the C2D baseline at most this (it must stay blind to the relation).
C2D_BAR = 60.0


def passes(row: dict[str, Any]) -> bool | None:
    """Whether a seed's row clears the bar: ``c2d_tiny_nl1 >= 90`` and, where the row has it,
    ``c2d_tiny <= 60``; ``None`` for a row without the non-local model."""
    nl, base = row.get(NON_LOCAL, math.nan), row.get(BASELINE, math.nan)
    if math.isnan(nl):
        return None
    return nl >= NL_BAR and (math.isnan(base) or base <= C2D_BAR)


def failure_line(rows: list[dict[str, Any]]) -> str:
    """``failures: k of n seeds (...)`` with the exact (Clopper-Pearson) 95% interval of the
    failure rate; ``""`` when no row has the non-local model."""
    verdicts = {row["seed"]: passes(row) for row in rows}
    bar = f"{NON_LOCAL} >= {NL_BAR:.0f}%" + (
        f" and {BASELINE} <= {C2D_BAR:.0f}%"
        if any(not math.isnan(r.get(BASELINE, math.nan)) for r in rows) else ""
    )  # fmt: skip
    return verdict_line(verdicts, bar)


def seed_table(summaries: dict[int, dict[str, Any]], split: str = "test") -> str:
    """The video demo's seed table: :func:`seed_rows` as :func:`markdown_table`, then the
    failure count (:func:`failure_line`)."""
    models, rows = seed_rows(summaries, split)
    table = markdown_table(models, rows, f"{split} top-1", "gap (NL - C2D)")
    line = failure_line(rows)
    return table + (f"\n\n{line}" if line else "")


def agreement_table(
    base: dict[int, dict[str, Any]], perturbed: dict[int, dict[str, Any]], split: str, change: str
) -> str:
    """Pass/fail of each seed without and with a perturbation (``change``, e.g.
    ``init_noise=1e-6``): the protocol's check that an outcome does not hinge on rounding."""
    _, rows_a = seed_rows(base, split)
    _, rows_b = seed_rows(perturbed, split)
    by_seed = {r["seed"]: r for r in rows_b}
    lines = [f"| seed | {NON_LOCAL} {split} top-1 | with {change} | pass / pass | agree |",
             "| --- | --- | --- | --- | --- |"]  # fmt: skip
    agree = 0
    for a in rows_a:
        b = by_seed[a["seed"]]
        pa, pb = passes(a), passes(b)
        agree += pa == pb
        word = {True: "pass", False: "FAIL", None: "–"}
        lines.append(f"| {a['seed']} | {format_cell(a[NON_LOCAL])} | {format_cell(b[NON_LOCAL])} | "
                     f"{word[pa]} / {word[pb]} | {'yes' if pa == pb else 'NO'} |")  # fmt: skip
    lines.append(f"\nthe same pass/fail on {agree} of {len(rows_a)} seeds")
    return "\n".join(lines)


METRIC = {"segmentation": "mIoU", "unet": "mDice", "super-resolution": "psnr_y"}
LABEL = {"psnr_y": "PSNR-Y (dB)"}
#: The dense demos' bar (docs/demo.md, Protocol): the block's model gains at least this much on
#: every seed (mIoU, mDice points); super-resolution has none (it is reported as it is).
GAP_BAR = {"segmentation": 10.0, "unet": 10.0}


def gap_line(task: str, rows: list[dict[str, Any]], models: list[str]) -> str:
    """The failure count of ``rows`` against :data:`GAP_BAR` with its 95% interval; ``""`` for a
    task without a bar."""
    if task not in GAP_BAR or len(models) < 2:
        return ""
    bar = GAP_BAR[task]
    verdicts = {r["seed"]: r["gap"] >= bar for r in rows}
    return verdict_line(verdicts, f"{models[-1]} - {models[0]} >= +{bar:.0f} {METRIC[task]}")


def run_dense_seeds(
    task: str, seeds: list[int], out: Path, jobs: int, settings: Any, split: str = "test",
    device: str = "cpu", data_root: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Train both models of every seed with ``settings`` (the demo's recipe with its ``--set``
    changes: :func:`nlnet.demo.settings.dense_settings`); their figures on ``split``."""
    if task == "super-resolution":
        from nlnet.demo.sr import run_sr_demo

        return run_sr_demo(seeds, out_dir=out, settings=settings, jobs=jobs, pictures=False,
                           split=split, device=device)  # fmt: skip
    from nlnet.demo.dense import run_dense_demo

    return run_dense_demo(seeds, settings, out_dir=out, jobs=jobs, pictures=False, split=split,
                          device=device, data_root=data_root)  # fmt: skip


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
        lines += ["", f"settings: {_as_json(settings)}"]  # as summary.json holds them
    return "\n".join(lines) + "\n" if lines else ""


def seed_table_text(task: str, summary: dict[str, Any], split: str) -> str:
    """The seed table of ``summary``'s runs: rows, mean / std / min, the failure count against
    :data:`GAP_BAR` and the recipe's settings (and, for super-resolution, the models' cost)."""
    metric = METRIC[task]
    models, rows = seed_rows_of_runs(summary, metric)
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
    task: str, seeds: list[int], output_dir: Path, jobs: int, settings: Any, *,
    split: str = "test", report: bool = False, device: str = "cpu", data_root: Path | None = None,
) -> Path:  # fmt: skip
    """Train every seed with ``settings`` (or, ``report``, read the runs already in
    ``output_dir``: those of these seeds and this recipe) and write the table; returns its path.

    Raises:
        ValueError: one line: a screening seed's test figures, or (``report``) no summary of
            ``task`` and ``split`` in ``output_dir``, one of another recipe, or a seed missing.
    """
    check_seeds(seeds, split)
    out = Path(output_dir) / f"dense-seeds-{task}-{split}"
    if report:
        summary = _recorded(out / "summary.json", seeds, settings)
    else:
        start = time.perf_counter()
        summary = run_dense_seeds(task, seeds, out, jobs, settings, split, device, data_root)
        print(f"{len(seeds)} seed(s) in {time.perf_counter() - start:.0f} s", flush=True)
    return write_seed_table(task, summary, split, Path(output_dir))


def _recorded(path: Path, seeds: list[int], settings: Any) -> dict[str, Any]:
    """The runs of ``seeds`` in the summary at ``path``, which must hold ``settings``' recipe.

    Raises:
        ValueError: one line naming ``--report``.
    """
    import dataclasses

    if not path.is_file():
        raise ValueError(f"--report: no {path}; run the seeds first (without --report)")
    summary = merged_summary([str(path)])
    if summary.get("settings") != _as_json(dataclasses.asdict(settings)):
        raise ValueError(f"--report: {path} holds runs of another recipe (its settings: "
                         f"{summary.get('settings')}); run these seeds with this one first")  # fmt: skip
    if missing := sorted(set(seeds) - {r["seed"] for r in summary["runs"]}):
        raise ValueError(f"--report: no run of seed(s) {missing} in {path}")
    return {**summary, "runs": [r for r in summary["runs"] if r["seed"] in seeds]}
