"""Which classes the first epoch trained on: a class whose every video failed to decode.

The class-folder check before training (:meth:`~nlnet.data.video.dataset.VideoClipDataset.
classes_without_items`) sees the videos that could not be indexed; a video whose index reads
but whose frames do not decode (a corrupt payload) fails only when a clip is drawn, and is then
skipped and counted like any bad video. When all the videos of a class fail that way, the run
would train on the other classes alone without a word: :class:`ClassCoverageHook` names such
classes once, when the first epoch closes.
"""

from __future__ import annotations

from typing import Any

from nlnet.engine import distributed as du
from nlnet.engine.hooks.base import HookBase, RunView
from nlnet.engine.runlog import say

__all__ = ["ClassCoverageHook"]


class ClassCoverageHook(HookBase):
    """Warns once, when the first epoch closes, about the training classes (single-label
    ``targets`` of the training dataset) that no usable clip of that epoch had: the classes
    the task saw are ``task.seen_classes``, gathered over the processes."""

    name = "class_coverage"
    events = ("after_step",)

    def __init__(self) -> None:
        self.done = False
        self.seen: set[int] = set()  # restored from a checkpoint written inside epoch 0

    def after_step(self, run: RunView) -> None:
        if self.done:
            return
        self.seen |= set(getattr(run.task, "seen_classes", ()))  # kept in checkpoints
        if run.state.epoch < 1:
            return
        self.done = True
        targets = getattr(run.train_dataset, "targets", None)
        gathered = set().union(*du.all_gather_object(sorted(self.seen)))
        if targets is None or not all(isinstance(t, int) for t in targets):
            return  # multi-label or a dataset that does not say
        missing = sorted(set(targets) - gathered)
        if missing:
            names = getattr(run.train_dataset, "classes", None) or []
            named = [repr(names[c]) if c < len(names) else str(c) for c in missing]
            say(f"warning: class(es) {', '.join(named[:5])}{' ...' if len(named) > 5 else ''} "
                "had no usable training clip in the first epoch: every one of their videos "
                "failed to decode (the warnings above name them); the model does not learn "
                "them", run.info.is_main)  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {"done": self.done, "seen": sorted(self.seen)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.done = bool(state.get("done", False))
        self.seen = {int(c) for c in state.get("seen", [])}
