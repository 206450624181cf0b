"""The ``train`` and ``epoch`` records of a run: the logging hook and the epoch summary.

A ``train`` record every ``train.log_every`` iterations (mean loss of the window over all
processes, lr, items/s, a task's loss terms), an ``epoch`` record when an epoch closes; a loss
that is not finite stops the run (:class:`~nlnet.engine.errors.DivergedError`), and so does a
whole epoch in which no item decoded (:class:`~nlnet.engine.errors.DataError`).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch

from nlnet.engine import distributed as du
from nlnet.engine.errors import DataError, DivergedError
from nlnet.engine.hooks.base import HookBase, RunView
from nlnet.engine.runlog import say

__all__ = ["LoggingHook", "epoch_summary", "task_words"]


def task_words(task: Any) -> tuple[str, str]:
    """The task's names for a training item and for its source file, used in the loop's messages
    (``task.words``, e.g. ``("clip", "video")``; default ``("item", "item")``)."""
    return tuple(getattr(task, "words", ("item", "item")))  # type: ignore[return-value]


class LoggingHook(HookBase):
    """One ``train`` record per ``train.log_every`` iterations (and at the last one): the mean
    loss of the window over all processes (``null`` when every item failed), the lr, items/s
    (the record's ``items_per_s``)."""

    name = "logging"
    events = ("after_step",)

    def after_step(self, run: RunView) -> None:
        st = run.state
        if st.iteration % run.cfg.train.log_every == 0 or st.at_end:
            self.log_window(run)

    def log_window(self, run: RunView) -> None:
        st, c, lr = run.state, run.state.counters, run.state.lr
        item, _source = task_words(run.task)
        count = torch.tensor(float(c.window_count), device=run.device, dtype=torch.float64)
        total, n = du.all_reduce_sum(torch.stack([c.window_sum, count])).tolist()
        c.new_window()
        loss = total / n if n else None
        if loss is not None and not math.isfinite(loss):
            raise DivergedError(
                f"training loss is {loss} at iteration {st.iteration} (lr {lr:.3g}) on {item}s "
                "that decoded: the run diverged; lower optim.lr or check the inputs"
            )
        st.events.put_scalar("loss", loss)
        rate = st.speed.rate  # NaN until the window holds two steps: not a speed yet
        rate = rate if math.isfinite(rate) else None
        record = {"kind": "train", "iter": st.iteration, "epoch": st.step_epoch, "loss": loss,
                  "lr": lr, "items_per_s": rate,
                  "time_s": time.perf_counter() - run.t_start}  # fmt: skip
        if run.device.type == "cuda":
            record["max_mem_mb"] = torch.cuda.max_memory_allocated(run.device) / 2**20
        record.update(_loss_terms(run))
        run.logger.log(record)
        text = f"no decodable {item}" if loss is None else f"loss {loss:.4f}"
        speed = f"{rate:.1f} {item}s/s" if rate is not None else f"first {item}s"
        if run.bar is not None:
            run.bar.set_postfix_str(f"{text}, lr {lr:.2e}, {speed}")
        else:
            say(f"iter {st.iteration}/{st.max_iters}: {text}, lr {lr:.2e}, {speed}", run.main)


def _loss_terms(run: RunView) -> dict[str, float]:
    """Window means of a task's loss terms (``task.pop_terms()``, e.g. a detector's
    ``loss_classifier``, ``loss_mask``...), averaged over the processes."""
    pop = getattr(run.task, "pop_terms", None)
    if pop is None:
        return {}
    per_rank = du.all_gather_object(pop())
    keys = sorted({k for terms in per_rank for k in terms})
    return {k: float(np.mean([t[k] for t in per_rank if k in t])) for k in keys}


def epoch_summary(run: RunView, epoch: int, t_epoch: float, complete: bool = True) -> None:
    """The ``epoch`` record; a whole epoch in which no item decoded stops the run."""
    item, source = task_words(run.task)
    c = run.state.counters
    stats = torch.tensor(
        [float(c.loss_sum), c.loss_count, c.epoch_skipped, c.empty_batches],
        dtype=torch.float64,
    )
    loss_sum, count, skipped, empty = du.all_reduce_sum(stats).tolist()
    if count == 0 and complete:
        raise DataError(
            f"no {item} of split {run.cfg.train.split!r} could be decoded in epoch {epoch} "
            f"({int(skipped)} bad item(s) skipped); check the {source}s: the warnings above name "
            "each skipped one and why (nothing was learned)"
        )
    run.logger.log(
        {
            "kind": "epoch",
            "iter": run.state.iteration,
            "epoch": epoch,
            "loss": loss_sum / count if count else None,
            "skipped": int(skipped),
            "empty_batches": int(empty),
            "time_s": time.perf_counter() - t_epoch,
        }  # fmt: skip
    )
    loss = f"{loss_sum / count:.4f}" if count else f"none (no decodable {item})"
    say(
        f"epoch {epoch}: iteration {run.state.iteration}/{run.state.max_iters}, loss "
        f"{loss}, skipped {int(skipped)} bad {source}(s)"
        + (f", {int(empty)} empty batch(es)" if empty else ""),
        run.main,
    )
    run.logger.write_csv()
