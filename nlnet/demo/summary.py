"""``summary.json`` of a demo run, with the machine's load average (the figures' conditions)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["load_average", "write_summary"]


def load_average() -> list[float] | None:
    """The 1/5/15-minute load averages, or ``None`` where the OS does not report them."""
    try:
        return list(os.getloadavg())
    except (AttributeError, OSError):
        return None


def write_summary(out: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """Add ``loadavg_end`` and write ``out/summary.json`` (non-JSON numbers as floats)."""
    summary = {**summary, "loadavg_end": load_average()}
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
    return summary
