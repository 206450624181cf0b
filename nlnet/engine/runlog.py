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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["MetricsLogger", "jsonable", "say", "use_progress_bar"]


def say(msg: str, main: bool = True) -> None:
    """Print one line on the main process (through tqdm, so a progress bar stays intact)."""
    if main:
        from tqdm.auto import tqdm

        tqdm.write(msg, file=sys.stdout)


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
        with open(self.jsonl, "a") as f:
            f.write(json.dumps(jsonable(record)) + "\n")

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

    def plot(self) -> Path | None:
        """Training loss, learning rate and validation metrics against the iteration."""
        if not self.enabled:
            return None
        records = self.records()
        train = [r for r in records if r.get("kind") == "train"]
        val = [r for r in records if r.get("kind") == "val"]
        if not train and not val:
            return None
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

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
            keys = [k for k in PLOTTED_VAL_METRICS if _points(val, k)]
            for k in keys:
                axes[2].plot(*zip(*_points(val, k)), marker="o", label=k)
            axes[2].set(xlabel="iteration", ylabel="%", title="validation")
            if keys:
                axes[2].legend()
        fig.tight_layout()
        fig.savefig(self.png, dpi=100)
        plt.close(fig)
        return self.png


#: Validation metrics drawn in the third panel of ``curves.png`` (those a task reports):
#: video classification, image classification, segmentation (mIoU) and detection (AP).
PLOTTED_VAL_METRICS: tuple[str, ...] = (
    "video_top1", "video_top5", "clip_top1", "video_mAP", "clip_mAP", "top1", "top5",
    "mIoU", "pixel_acc", "box_AP", "mask_AP", "kp_AP",
)  # fmt: skip


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
