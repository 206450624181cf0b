"""The demo's seed table: one row per seed, then mean, standard deviation and minimum.

The protocol (docs/demo.md, "Protocol"): every recipe choice is made on *validation* figures of
the screening seeds (:data:`SCREENING_SEEDS`, never reported); the reported figures are the
*test* figures of every reported seed (0-9 for ``nlnet demo``). ``nlnet demo --seeds 0-9`` runs
each seed and writes the table; ``--report`` writes it from the runs already in
``--output-dir``; ``--split val`` tables validation figures only (the screening table).
Statistics over seeds, not a single lucky seed, are what a claim about a recipe rests on (the
paper reports single runs of a large benchmark; a tiny demo needs the spread).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["C2D_BAR", "NL_BAR", "SCREENING_SEEDS", "agreement_table", "collect_runs",
           "dense_seed_rows", "failure_line", "markdown_table", "parse_seeds", "passes",
           "seed_rows", "seed_table"]  # fmt: skip

#: Seeds on which recipes are chosen (validation figures only); never reported. 100-104 at
#: first, then 100-109 for the dense demos; since December 2026 thirty (100-129), so that a
#: failure of one seed in twenty has a fair chance to show (docs/demo.md, Protocol).
SCREENING_SEEDS: tuple[int, ...] = tuple(range(100, 130))
BASELINE = "c2d_tiny"
NON_LOCAL = "c2d_tiny_nl1"


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


def _cell(value: float, digits: int = 1, unit: str = "", sign: str = "") -> str:
    return "–" if math.isnan(value) else f"{value:{sign}.{digits}f}{unit}"


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
        lines.append(f"| {a['seed']} | {_cell(a[NON_LOCAL])} | {_cell(b[NON_LOCAL])} | "
                     f"{word[pa]} / {word[pb]} | {'yes' if pa == pb else 'NO'} |")  # fmt: skip
    lines.append(f"\nthe same pass/fail on {agree} of {len(rows_a)} seeds")
    return "\n".join(lines)


def dense_seed_rows(summary: dict[str, Any], metric: str) -> tuple[list[str], list[dict[str, Any]]]:
    """Per seed of a dense demo's ``summary.json`` (segmentation or U-Net: ``runs`` of every
    seed and model): each model's test ``metric`` (e.g. ``mIoU``, ``mDice``), the gap of the
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
        return _cell(value, places.get(c, digits), units.get(c, ""), sign)

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
