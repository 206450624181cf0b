"""Validation during training: every ``train.eval_every`` iterations (or ``train.eval_times``
times spread over the run) and at the end of the run;
the metrics are handed over as the run's ``"val"`` event (:mod:`nlnet.engine.events`)."""

from __future__ import annotations

from nlnet.engine.hooks.base import HookBase, RunView

__all__ = ["EvalHook"]


class EvalHook(HookBase):
    """Validation every ``train.eval_every`` iterations (not at the last one) and at the end."""

    name = "eval"
    events = ("after_step", "after_train")

    def after_step(self, run: RunView) -> None:
        tc = run.cfg.train
        every = tc.eval_every
        if not every and tc.eval_times > 1:  # spread evenly; the last one is the final one
            every = max(1, run.state.max_iters // tc.eval_times)
        if every and run.state.iteration % every == 0 and not run.state.at_end:
            run.state.events.put("val", run.validate())

    def after_train(self, run: RunView) -> None:
        if not run.state.stopped and run.val_dataset is not None:
            run.state.events.put("val", run.validate())
