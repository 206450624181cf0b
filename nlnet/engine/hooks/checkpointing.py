"""Checkpoints during training: ``last.pt`` every ``train.ckpt_every`` iterations and when the
invocation stops early, ``final.pt`` at the end; the path written is handed over as the run's
``"checkpoint"`` event (:mod:`nlnet.engine.events`)."""

from __future__ import annotations

import shutil

from nlnet.data.atomic import atomic_path
from nlnet.engine.checkpoint.paths import CHECKPOINT_DIR, FINAL, LAST
from nlnet.engine.hooks.base import HookBase, RunView

__all__ = ["CheckpointHook"]


class CheckpointHook(HookBase):
    """``last.pt`` every ``train.ckpt_every`` iterations and when ``train.stop_after`` cuts the
    invocation; ``final.pt`` at the end (copied to ``last.pt``: a repeated ``--resume`` is a
    no-op)."""

    name = "checkpoint"
    events = ("after_step", "after_train")

    def after_step(self, run: RunView) -> None:
        st, every = run.state, run.cfg.train.ckpt_every
        due = bool(every) and st.iteration % every == 0
        if (due or st.stopping) and not st.at_end:
            st.events.put("checkpoint", run.checkpoint(run.run_dir / CHECKPOINT_DIR / LAST))

    def after_train(self, run: RunView) -> None:
        if run.state.stopped:
            return
        final = run.checkpoint(run.run_dir / CHECKPOINT_DIR / FINAL)
        run.state.events.put("checkpoint", final)
        last = run.run_dir / CHECKPOINT_DIR / LAST
        if run.main and (last.exists() or run.cfg.train.ckpt_every):
            with atomic_path(last, durable=True) as tmp:
                shutil.copyfile(final, tmp)
