"""Run records: ``metrics.jsonl`` (one JSON object per line), ``metrics.csv``, ``curves.png``,
and the console (a progress bar on a terminal, one line per log interval elsewhere).

Record kinds: ``train`` (every ``train.log_every`` iterations: mean loss of the window, lr,
clips/s; ``loss`` is ``null`` when every clip of the window failed to decode), ``val``
(validation metrics), ``epoch`` (epoch mean loss, bad videos skipped, empty batches).  A ``null``
or a missing value never breaks plotting or the CSV.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["MetricsLogger", "PLOTTED_METRICS", "jsonable", "line_prefix", "plotted_metrics",
           "say", "use_progress_bar"]  # fmt: skip

#: validation metrics drawn in ``curves.png`` (each when present; ``ema_<key>`` too): video
#: top-k and mAP, image top-k, segmentation mIoU / Dice, detection box/mask/keypoint AP,
#: super-resolution PSNR.
PLOTTED_METRICS = ("video_top1", "video_top5", "clip_top1", "clip_top5", "video_mAP",
                   "clip_mAP", "top1", "top5", "mIoU", "mDice", "box_AP", "mask_AP", "kp_AP",
                   "psnr_y")  # fmt: skip


_PREFIX: list[str] = []


@contextlib.contextmanager
def line_prefix(prefix: str):
    """Every :func:`say` line inside starts with ``prefix`` (e.g. ``"c2d_tiny_nl1: "``), so that
    the lines of runs side by side (the demo's models) say whose they are."""
    _PREFIX.append(prefix)
    try:
        yield
    finally:
        _PREFIX.pop()


def say(msg: str, main: bool = True) -> None:
    """Print one line on the main process (through tqdm, so a progress bar stays intact)."""
    if main:
        from tqdm.auto import tqdm

        tqdm.write("".join(_PREFIX) + msg, file=sys.stdout)


def use_progress_bar(setting: bool | None) -> bool:
    """``train.progress``: ``True``/``False``, or ``None`` = only when stderr is a terminal."""
    if setting is None:
        return sys.stderr.isatty()
    return bool(setting)


def _points(records: list[dict[str, Any]], key: str) -> list[tuple[float, float]]:
    """``(iter, value)`` pairs of the records whose value is a finite number."""
    out = []
    for r in records:
        v, it = r.get(key), r.get("iter")
        if isinstance(v, (int, float)) and isinstance(it, (int, float)) and math.isfinite(v):
            out.append((it, v))
    return out


class MetricsLogger:
    """Appends records to ``metrics.jsonl``, mirrors them in ``metrics.csv``, draws the curves."""

    def __init__(self, run_dir: str | os.PathLike, enabled: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.enabled = enabled
        self.jsonl = self.run_dir / "metrics.jsonl"
        self.csv = self.run_dir / "metrics.csv"
        self.png = self.run_dir / "curves.png"
        self.sinks: list[Callable[[dict[str, Any]], None]] = []

    def add_sink(self, sink: Callable[[dict[str, Any]], None]) -> None:
        """Also send every record to ``sink`` (e.g. TensorBoard, W&B)."""
        self.sinks.append(sink)

    def truncate_after(self, iteration: int) -> None:
        """Drop records past ``iteration`` (written by a run that was killed before its next
        checkpoint) so a resumed run does not duplicate them."""
        if not self.enabled or not self.jsonl.exists():
            return
        keep = [r for r in self.records() if int(r.get("iter") or 0) <= iteration]
        with open(self.jsonl, "w") as f:
            for r in keep:
                f.write(json.dumps(r) + "\n")
        self.write_csv()

    def log(self, record: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        record = jsonable(record)
        with open(self.jsonl, "a") as f:
            f.write(json.dumps(record) + "\n")
        for sink in self.sinks:
            sink(record)

    def records(self) -> list[dict[str, Any]]:
        if not self.jsonl.exists():
            return []
        out = []
        for line in self.jsonl.read_text().splitlines():
            line = line.strip()
            if line:
                with contextlib.suppress(json.JSONDecodeError):
                    out.append(json.loads(line))
        return out

    def write_csv(self) -> None:
        if not self.enabled:
            return
        records = self.records()
        columns: list[str] = []
        for r in records:
            columns += [k for k in r if k not in columns]
        with open(self.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(records)

    def plot(self, num_classes: int | None = None) -> Path | None:
        """Training loss, learning rate and validation metrics against the iteration.

        Args:
            num_classes: the model's classes; top-5 is left out when there are <= 5.
        """
        if not self.enabled:
            return None
        records = self.records()
        train = [r for r in records if r.get("kind") == "train"]
        val = [r for r in records if r.get("kind") == "val"]
        if not train and not val:
            return None
        from nlnet.analysis.plotting import pyplot

        plt = pyplot()
        fig, axes = plt.subplots(1, 3 if val else 2, figsize=(13 if val else 9, 3.6))
        for ax, key, color in ((axes[0], "loss", "tab:blue"), (axes[1], "lr", "tab:orange")):
            pts = _points(train, key)
            if pts:
                ax.plot(*zip(*pts), color=color)
        axes[0].set(xlabel="iteration", ylabel="loss", title="training loss")
        axes[1].set(xlabel="iteration", ylabel="learning rate", title="learning rate")
        if any(v > 0 for _, v in _points(train, "lr")):
            axes[1].set_yscale("log")
        if val:
            keys = plotted_metrics(val, num_classes)
            for k in keys:
                axes[2].plot(*zip(*_points(val, k)), marker="o", label=k)
            axes[2].set(xlabel="iteration", ylabel="%", title="validation")
            if keys:
                axes[2].legend()
        fig.tight_layout()
        fig.savefig(self.png, dpi=100)
        plt.close(fig)
        return self.png


def plotted_metrics(val: list[dict[str, Any]], num_classes: int | None = None) -> list[str]:
    """The keys of :data:`PLOTTED_METRICS` (and their ``ema_`` twins) present in the ``val``
    records; top-5 left out when there are <= 5 classes (it is then 100% by construction)."""
    keys = [k for base in PLOTTED_METRICS for k in (base, f"ema_{base}")]
    if num_classes is not None and num_classes <= 5:
        keys = [k for k in keys if "top5" not in k]
    return [k for k in keys if _points(val, k)]


def jsonable(record: Mapping[str, Any]) -> dict[str, Any]:
    """Tensors to numbers/lists, non-finite floats to ``None`` (valid JSON)."""
    out = {}
    for k, v in record.items():
        if hasattr(v, "item") and hasattr(v, "numel"):
            v = v.item() if v.numel() == 1 else v.tolist()
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[k] = v
    return out
