"""TensorBoard (``torch.utils.tensorboard``) and Weights & Biases logging beside
``metrics.jsonl``: every numeric value of every record, under ``<kind>/<key>``, at its iteration.

Both are optional extras (``pip install nlnet[tensorboard]`` / ``nlnet[wandb]``); asked for but
not installed, a logger is skipped with one line saying how to install it.  Rank 0 only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from nlnet.engine.hooks.base import HookBase, RunView
from nlnet.engine.runlog import say

__all__ = ["ExternalLoggersHook", "scalars"]


def scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """``{"<kind>/<key>": value}`` for the finite numbers of a record (``iter``/``epoch``
    excluded: they are the step)."""
    kind = record.get("kind", "train")
    out = {}
    for key, value in record.items():
        if key in ("kind", "iter", "epoch") or isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) and math.isfinite(value):
            out[f"{kind}/{key}"] = float(value)
    return out


class ExternalLoggersHook(HookBase):
    """Mirrors the run's records to TensorBoard and/or W&B (``logging.tensorboard``/``wandb``)."""

    name = "external_loggers"
    events = ("before_train", "after_train")

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.sinks: list[tuple[Callable[[dict[str, float], int], None], Callable[[], None]]] = []

    def before_train(self, run: RunView) -> None:
        if not run.main:
            return
        if self.cfg.tensorboard:
            self._tensorboard(run)
        if self.cfg.wandb:
            self._wandb(run)
        if self.sinks:
            run.logger.add_sink(self.write)

    def _tensorboard(self, run: RunView) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            say("logging.tensorboard: the tensorboard package is not installed "
                "(pip install 'nlnet[tensorboard]'); skipped")  # fmt: skip
            return
        writer = SummaryWriter(
            log_dir=str(run.run_dir / "tensorboard"), purge_step=run.state.iteration + 1
        )

        def write(values: dict[str, float], step: int) -> None:
            for key, value in values.items():
                writer.add_scalar(key, value, step)

        self.sinks.append((write, writer.close))

    def _wandb(self, run: RunView) -> None:
        try:
            import wandb
        except ImportError:
            say("logging.wandb: the wandb package is not installed (pip install 'nlnet[wandb]'); "
                "skipped")  # fmt: skip
            return
        from nlnet.engine.config.loading import config_to_dict

        session = wandb.init(project=self.cfg.wandb_project, name=run.cfg.name or None,
                             dir=str(run.run_dir), config=config_to_dict(run.cfg),
                             resume="allow")  # fmt: skip
        self.sinks.append((lambda values, step: session.log(values, step=step), session.finish))

    def write(self, record: Mapping[str, Any]) -> None:
        values = scalars(record)
        if values:
            for write, _close in self.sinks:
                write(values, int(record.get("iter") or 0))

    def after_train(self, run: RunView) -> None:
        for _write, close in self.sinks:
            close()
        self.sinks = []
