"""Learning curves of several models in one figure ("Non-local Neural Networks" (Wang et al.,
CVPR 2018, arXiv:1711.07971), Figure 4: training and validation error against iterations).

One run's own curves are drawn by the run log (``curves.png``, :mod:`nlnet.engine.runlog`);
these put models side by side, e.g. a baseline and its non-local counterpart trained from the
same start. Drawn with the package's one matplotlib set-up
(:func:`nlnet.analysis.plotting.pyplot`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot_curves", "plot_figure4"]


def plot_curves(logs: dict[str, dict[str, Any]], path: Path) -> None:
    """Training loss and validation top-1 per epoch, one line per model: ``logs[name]`` holds
    ``epoch``, ``train_loss`` and ``val_top1`` (fractions)."""
    from nlnet.analysis.plotting import pyplot

    plt = pyplot()

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.4))
    for name, log in logs.items():
        a1.plot(log["epoch"], log["train_loss"], marker="o", label=name)
        a2.plot(log["epoch"], [100 * v for v in log["val_top1"]], marker="o", label=name)
    a1.set_xlabel("epoch")
    a1.set_ylabel("training loss")
    a2.set_xlabel("epoch")
    a2.set_ylabel("validation top-1 (%)")
    a2.set_ylim(0, 100)
    for a in (a1, a2):
        a.grid(alpha=0.3)
    a2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_figure4(logs: dict[str, dict[str, Any]], path: Path) -> None:
    """Figure 4 of the paper: training error (dashed) and validation error (solid) of every model
    against iterations: ``logs[name]`` holds ``curve_iter``, ``curve_train_top1`` and
    ``curve_val_top1`` (fractions; the points of :class:`nlnet.engine.hooks.curves.CurveHook`)."""
    from nlnet.analysis.plotting import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for i, (name, log) in enumerate(logs.items()):
        colour = f"C{i}"
        it = log["curve_iter"]
        ax.plot(it, [100 * (1 - v) for v in log["curve_train_top1"]], "--", color=colour,
                label=f"{name} train")  # fmt: skip
        ax.plot(it, [100 * (1 - v) for v in log["curve_val_top1"]], "-", color=colour,
                label=f"{name} val")  # fmt: skip
    ax.set_xlabel("iterations")
    ax.set_ylabel("error (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("training (dashed) and validation (solid) error", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
