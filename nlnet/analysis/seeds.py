"""Figures over seeds: a claim about a training recipe is a claim over seeds.

Per-seed rows of figures as a Markdown table with mean, standard deviation (n - 1) and minimum
rows; the failure count of a bar over the seeds with its exact (Clopper-Pearson) 95% interval;
``--seeds`` lists such as ``0-9,20``; and the rows of runs recorded as ``{"seed", "model",
"metrics"}`` (one ``summary.json`` or several merged). Used by ``nlnet demo --seeds`` and
``benchmarks/dense_seeds.py``; usable for any sweep that records its runs this way.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

__all__ = ["format_cell", "markdown_table", "merged_summary", "parse_seeds", "seed_rows_of_runs",
           "verdict_line"]  # fmt: skip


def parse_seeds(text: str) -> list[int]:
    """``"0-9"``, ``"0,2,5-7"`` or ``"3"`` as a sorted list of distinct seeds.

    Raises:
        ValueError: not a list of non-negative integers and ranges ``a-b`` with ``a <= b``.
    """
    seeds: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            a, b = int(lo), int(hi) if hi else int(lo)
            if a < 0 or b < a:
                raise ValueError
            seeds.update(range(a, b + 1))
    except ValueError:
        raise ValueError(
            f"--seeds: expected seeds and ranges such as '0-9' or '0,2,5-7', got {text!r}"
        ) from None
    return sorted(seeds)


def format_cell(value: float, digits: int = 1, unit: str = "", sign: str = "") -> str:
    """A table cell: ``value`` with ``digits`` decimals, a ``sign`` format and a ``unit``; ``–``
    for NaN (a model missing, a figure not recorded)."""
    return "–" if math.isnan(value) else f"{value:{sign}.{digits}f}{unit}"


def verdict_line(verdicts: dict[int, bool | None], bar: str) -> str:
    """``failures (BAR not met): k of n seeds: seed(s) ...; 95% interval ...`` over the seeds
    judged (``None``: not judged), with the exact (Clopper-Pearson) interval of the failure
    rate; ``""`` when no seed was judged."""
    from scipy.stats import binomtest

    judged = {s: v for s, v in verdicts.items() if v is not None}
    if not judged:
        return ""
    failed = sorted(s for s, v in judged.items() if not v)
    ci = binomtest(len(failed), len(judged)).proportion_ci(method="exact")
    which = f": seed(s) {', '.join(map(str, failed))}" if failed else ""
    return (
        f"failures ({bar} not met): {len(failed)} of {len(judged)} seeds{which}; 95% interval "
        f"of the failure rate (exact binomial) {100 * ci.low:.1f}-{100 * ci.high:.1f}%"
    )


def seed_rows_of_runs(
    summary: dict[str, Any], metric: str
) -> tuple[list[str], list[dict[str, Any]]]:
    """Per seed of a ``summary.json`` that records ``runs`` of every seed and model (the dense
    demos'): each model's test ``metric`` (e.g. ``mIoU``, ``mDice``), the gap of the
    second model (with the block) to the first, and the training wall seconds of the slower
    model (they train side by side); the CPU seconds of all its models where the runs record
    ``cpu_s`` (super-resolution), else none."""
    models: list[str] = []
    for r in summary["runs"]:
        models += [r["model"]] if r["model"] not in models else []
    rows = []
    for seed in sorted({r["seed"] for r in summary["runs"]}):
        runs = {r["model"]: r for r in summary["runs"] if r["seed"] == seed}
        row: dict[str, Any] = {"seed": seed}
        for m in models:
            row[m] = float(runs[m]["metrics"][metric]) if m in runs else math.nan
        row["gap"] = row[models[-1]] - row[models[0]] if len(models) > 1 else math.nan
        row["wall"] = max(float(r["train_s"]) for r in runs.values())
        cpu = [r.get("cpu_s") for r in runs.values()]
        row["cpu"] = math.nan if None in cpu else float(sum(cpu))
        rows.append(row)
    return models, rows


def markdown_table(
    models: list[str], rows: list[dict[str, Any]], what: str, gap: str, digits: int = 1
) -> str:
    """A Markdown table of per-seed rows (``seed``, each model's figure, ``gap``, ``wall``,
    ``cpu``) plus mean, standard deviation (sample, n - 1) and minimum rows over the seeds; NaN
    (a model missing, an old summary without CPU time) shows as ``–`` and is left out of the
    statistics. ``what`` names the figure (``test top-1``), ``gap`` the gap column, ``digits``
    the decimals of the figures and the gap."""
    cols = [*models, "gap", "wall", "cpu"]
    heads = [f"{m} {what}" for m in models] + [gap, "wall", "CPU"]
    units = {"wall": " s", "cpu": " s"}
    places = {"wall": 0, "cpu": 0}

    def cell(c: str, value: float, signed: bool = True) -> str:
        sign = "+" if c == "gap" and signed else ""  # a spread has no sign
        return format_cell(value, places.get(c, digits), units.get(c, ""), sign)

    lines = ["| seed | " + " | ".join(heads) + " |", "| --- " * (len(cols) + 1) + "|"]
    for row in rows:
        cells = [cell(c, row[c]) for c in cols]
        lines.append(f"| {row['seed']} | " + " | ".join(cells) + " |")
    for label, fn in (("mean", statistics.fmean), ("std", statistics.stdev), ("min", min)):
        cells = []
        for c in cols:
            values = [row[c] for row in rows if not math.isnan(row[c])]
            ok = len(values) >= (2 if label == "std" else 1)
            cells.append(cell(c, fn(values) if ok else math.nan, signed=label != "std"))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
