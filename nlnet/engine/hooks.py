"""Extension points of the training loop: a small, explicit list of hooks.

The loop (:mod:`nlnet.engine.loop`) calls, for every hook of ``Run.hooks`` in order::

    before_train(run)       after the state is built and restored, before the first step
    before_step(run)        before the micro-batches of an optimizer step
    after_step(run)         after the optimizer step, the schedule step and the epoch
                            bookkeeping (``run.state.epoch`` is already the next epoch when this
                            step closed one; ``run.step_epoch`` is the epoch of the step)
    before_eval(run)        before each validation (e.g. precise BN statistics)
    eval_extra(run)         more validation metrics, merged into the ``val`` record (e.g. EMA)
    after_train(run)        once, at the end of the invocation (``run.stopped`` says whether it
                            was cut by ``train.stop_after``)
    state_dict() / load_state_dict(state)
                            the hook's own part of a checkpoint (``extra["hooks"][name]``), so a
                            resumed run continues exactly

What a hook may read on ``run`` (the :class:`~nlnet.engine.loop.Run`; nothing else): ``cfg``,
``task``, ``device``, ``main`` (rank 0), ``info`` (rank, world size), ``amp``, ``progress``,
``logger`` (:class:`MetricsLogger`), ``run_dir``, ``state``
(:class:`~nlnet.engine.state.TrainState`: ``model``, ``optimizer``, ``scheduler``, ``scaler``,
``counters``, ``epoch``, ``iteration``, ``batch_in_epoch``), ``ddp_model``, ``train_dataset``,
``val_dataset``, ``max_iters``, ``start_iteration``, ``lr`` (the rate of the step just done),
``step_epoch``, ``at_end`` (the step was the last of the run), ``stopping`` (the step ends this
invocation: ``train.stop_after``), ``speed`` (clips/s meter), ``bar`` (tqdm or ``None``),
``step_batches`` (loader batches of the current step), ``val_metrics`` and ``last_ckpt``
(written by the validation and checkpoint hooks).
It may call ``run.validate()`` and ``run.checkpoint(path)``.  Modelled on detectron2's
``HookBase`` (``before_train``/``before_step``/``after_step``/``after_train``).

The hooks of the core loop live here (logging, validation, checkpointing); the training tools
(EMA, precise BN, external loggers) in :mod:`nlnet.engine.tools`, whose
:func:`~nlnet.engine.tools.build_hooks` lists the hooks of a config.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from typing import Any

import numpy as np
import torch

from nlnet.engine import distributed as du
from nlnet.engine.errors import DataError, DivergedError
from nlnet.engine.runlog import say
from nlnet.engine.seeding import CHECKPOINT_DIR, FINAL, LAST

__all__ = ["HookBase", "LoggingHook", "EvalHook", "CheckpointHook", "epoch_summary"]


class HookBase:
    """A no-op hook; subclasses override the calls they need (see the module docstring)."""

    name = "hook"

    def before_train(self, run: Any) -> None:
        """Called once before the first step of this invocation."""

    def before_step(self, run: Any) -> None:
        """Called before each optimizer step."""

    def after_step(self, run: Any) -> None:
        """Called after each optimizer step (and the epoch bookkeeping)."""

    def before_eval(self, run: Any) -> None:
        """Called before each validation."""

    def eval_extra(self, run: Any) -> dict[str, Any]:
        """More validation metrics (merged into the ``val`` record)."""
        return {}

    def after_train(self, run: Any) -> None:
        """Called once at the end of the invocation."""

    def state_dict(self) -> dict[str, Any]:
        """This hook's state for a checkpoint (plain data and tensors)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""


def task_words(task: Any) -> tuple[str, str]:
    """The task's names for a training item and for its source file, used in the loop's messages
    (``task.words``, e.g. ``("clip", "video")``; default ``("item", "item")``)."""
    return tuple(getattr(task, "words", ("item", "item")))  # type: ignore[return-value]


class LoggingHook(HookBase):
    """One ``train`` record per ``train.log_every`` iterations (and at the last one): the mean
    loss of the window over all processes (``null`` when every item failed), the lr, items/s
    (the record's ``clips_per_s``)."""

    name = "logging"

    def after_step(self, run: Any) -> None:
        st = run.state
        if st.iteration % run.cfg.train.log_every == 0 or run.at_end:
            self.log_window(run)

    def log_window(self, run: Any) -> None:
        st, c, lr = run.state, run.state.counters, run.lr
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
        rate = run.speed.rate  # NaN until the window holds two steps: not a speed yet
        rate = rate if math.isfinite(rate) else None
        record = {"kind": "train", "iter": st.iteration, "epoch": run.step_epoch, "loss": loss,
                  "lr": lr, "clips_per_s": rate,
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
            say(f"iter {st.iteration}/{run.max_iters}: {text}, lr {lr:.2e}, {speed}", run.main)


def _loss_terms(run: Any) -> dict[str, float]:
    """Window means of a task's loss terms (``task.pop_terms()``, e.g. a detector's
    ``loss_classifier``, ``loss_mask``...), averaged over the processes."""
    pop = getattr(run.task, "pop_terms", None)
    if pop is None:
        return {}
    per_rank = du.all_gather_object(pop())
    keys = sorted({k for terms in per_rank for k in terms})
    return {k: float(np.mean([t[k] for t in per_rank if k in t])) for k in keys}


def epoch_summary(run: Any, epoch: int, t_epoch: float, complete: bool = True) -> None:
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
            f"({int(skipped)} bad item(s) skipped); check the {source}s (nothing was learned)"
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
        f"epoch {epoch}: iteration {run.state.iteration}/{run.max_iters}, loss "
        f"{loss}, skipped {int(skipped)} bad {source}(s)"
        + (f", {int(empty)} empty batch(es)" if empty else ""),
        run.main,
    )
    run.logger.write_csv()


class EvalHook(HookBase):
    """Validation every ``train.eval_every`` iterations (not at the last one) and at the end."""

    name = "eval"

    def after_step(self, run: Any) -> None:
        every = run.cfg.train.eval_every
        if every and run.state.iteration % every == 0 and not run.at_end:
            run.val_metrics = run.validate()

    def after_train(self, run: Any) -> None:
        if not run.stopped and run.val_dataset is not None:
            run.val_metrics = run.validate()


class CheckpointHook(HookBase):
    """``last.pt`` every ``train.ckpt_every`` iterations and when ``train.stop_after`` cuts the
    invocation; ``final.pt`` at the end (copied to ``last.pt``: a repeated ``--resume`` is a
    no-op)."""

    name = "checkpoint"

    def after_step(self, run: Any) -> None:
        every = run.cfg.train.ckpt_every
        due = bool(every) and run.state.iteration % every == 0
        if (due or run.stopping) and not run.at_end:
            run.last_ckpt = run.checkpoint(run.run_dir / CHECKPOINT_DIR / LAST)

    def after_train(self, run: Any) -> None:
        if run.stopped:
            return
        run.last_ckpt = run.checkpoint(run.run_dir / CHECKPOINT_DIR / FINAL)
        last = run.run_dir / CHECKPOINT_DIR / LAST
        if run.main and (last.exists() or run.cfg.train.ckpt_every):
            tmp = last.with_name(f".{LAST}.final.tmp")
            shutil.copyfile(run.last_ckpt, tmp)
            os.replace(tmp, last)
