"""The loop's shape: one class whose attributes are all declared in ``__init__``, hooks that
declare their events and read a frozen view, results handed over through an EventStorage."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from engine_standins import TinyClipDataset, TinyVideoNet, collate_standin, tiny_run_config

from nlnet.engine.events import EventStorage
from nlnet.engine.hooks.base import EVENTS, HookBase
from nlnet.engine.loop import train

LOOP = Path(__file__).resolve().parents[2] / "nlnet" / "engine" / "loop.py"


def _assigned(fn: ast.FunctionDef) -> set[str]:
    return {
        t.attr
        for node in ast.walk(fn)
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))
        for tgt in (node.targets if isinstance(node, ast.Assign) else [node.target])
        for t in ast.walk(tgt)
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }


def test_every_attribute_of_run_is_set_in_init():
    tree = ast.parse(LOOP.read_text())
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert [c.name for c in classes] == ["Run"]  # one class in the loop's file
    methods = [n for n in classes[0].body if isinstance(n, ast.FunctionDef)]
    init = next(m for m in methods if m.name == "__init__")
    declared = _assigned(init)
    later = {name: _assigned(m) - declared for m in methods if m.name != "__init__"
             for name in [m.name]}  # fmt: skip
    assert not any(later.values()), f"attributes first set outside __init__: {later}"
    assert len(declared) <= 30, sorted(declared)


def test_a_hook_must_list_exactly_the_events_it_overrides():
    with pytest.raises(TypeError, match="must list exactly the events"):

        class Undeclared(HookBase):
            def after_step(self, run):
                pass

    with pytest.raises(TypeError, match="must list exactly the events"):

        class NotOverridden(HookBase):
            events = ("after_step",)

    with pytest.raises(TypeError, match="must list exactly the events"):

        class Unknown(HookBase):
            events = ("after_everything",)

    class Declared(HookBase):
        events = ("before_step", "after_train")

        def before_step(self, run):
            pass

        def after_train(self, run):
            pass

    assert set(Declared.events) <= set(EVENTS)


def test_event_storage_keeps_latest_and_history_by_iteration():
    s = EventStorage()
    assert s.latest("val") is None and s.history("val") == [] and s.names() == []
    s.put_scalar("loss", 2)
    s.step(3)
    s.put("val", {"top1": 50.0})
    s.put_scalar("loss", None)
    s.step(7)
    s.put_scalar("loss", 0.5)
    assert s.history("loss") == [(0, 2.0), (3, None), (7, 0.5)]
    assert s.latest("loss") == 0.5 and s.latest("val") == {"top1": 50.0}
    assert s.latest("missing", default=-1) == -1 and s.names() == ["loss", "val"]


class _Probe(HookBase):
    """Records what it sees through the view; tries to write onto it."""

    name = "probe"
    events = ("before_train", "after_step", "after_train")

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.frozen = False

    def before_train(self, run) -> None:
        self.calls.append(("before_train", run.state.iteration))
        try:
            run.val_metrics = {}  # hooks hand results over through run.state.events
        except dataclasses.FrozenInstanceError:
            self.frozen = True

    def after_step(self, run) -> None:
        self.calls.append(("after_step", run.state.iteration))

    def after_train(self, run) -> None:
        self.calls.append(("after_train", run.state.iteration))
        self.vals = run.state.events.history("val")
        self.ckpts = run.state.events.history("checkpoint")
        self.losses = run.state.events.history("loss")


def test_hooks_see_the_declared_events_and_the_results_of_the_others(tmp_path):
    probe = _Probe()
    cfg = tiny_run_config(tmp_path, **{"optim.max_iters": 4, "train.eval_every": 2,
                                       "train.ckpt_every": 2, "train.log_every": 2})  # fmt: skip
    summary = train(cfg, model=TinyVideoNet(), train_dataset=TinyClipDataset(n=8),
                    val_dataset=TinyClipDataset(n=4), collate_fn=collate_standin,
                    hooks=(probe,))  # fmt: skip
    assert probe.frozen
    assert probe.calls == [("before_train", 0), ("after_step", 1), ("after_step", 2),
                           ("after_step", 3), ("after_step", 4), ("after_train", 4)]  # fmt: skip
    # the user hook runs before validation and checkpointing: at its after_train only the
    # periodic results (iteration 2) are there; the final ones follow it
    assert [it for it, _ in probe.vals] == [2] and [it for it, _ in probe.ckpts] == [2]
    assert [it for it, _ in probe.losses] == [2, 4]
    assert summary["val"] is not None and summary["checkpoint"].endswith("final.pt")
