"""Block health at every validation (``health`` config section; on by default).

For a model with non-local blocks, each validation measures, on its first ``health.batches``
batches, every block's output relative to its input, its norm scale and the concentration of
its attention (:mod:`nlnet.analysis.block_health`). The figures join the ``val`` record
(``health.<block>.<figure>``: ``metrics.jsonl``, TensorBoard, W&B) and the run's
``summary.json`` (``block_health``, the last validation's); after ``health.warn_after`` of the
training, a block that is (nearly) the identity, or attends uniformly, is named in one
warning line, once. A model without blocks adds nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nlnet.analysis.attention_record import find_non_local_blocks
from nlnet.analysis.block_health import HealthRecorder
from nlnet.engine.checkpoint.file_io import unwrap_model
from nlnet.engine.hooks.base import HookBase, RunView
from nlnet.engine.runlog import say

__all__ = ["BlockHealthHook", "health_warning"]


def health_warning(name: str, problems: list[str], fraction: float, describe: str) -> str:
    """The warning line: ``layer3.1.non_local is (nearly) the identity after 40% of training:
    output 0.2% of its input, ...``."""
    return (
        f"warning: {name} {' and '.join(problems)} after {100 * fraction:.0f}% of training: "
        f"{describe}"
    )


class BlockHealthHook(HookBase):
    """Measures the non-local blocks during each validation (see the module docstring)."""

    name = "block_health"
    events = ("before_train", "before_eval", "eval_extra")

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.active = False
        self.recorder: HealthRecorder | None = None
        self.warned: set[str] = set()

    def before_train(self, run: RunView) -> None:
        self.active = bool(find_non_local_blocks(unwrap_model(run.state.model)))

    def before_eval(self, run: RunView) -> None:
        if self.active:
            model = unwrap_model(run.state.model)
            self.recorder = HealthRecorder(model, max_calls=self.cfg.batches).__enter__()

    def eval_extra(self, run: RunView) -> dict[str, Any]:
        if self.recorder is None:
            return {}
        self.recorder.__exit__(None, None, None)
        results, self.recorder = self.recorder.results(), None
        st = run.state
        fraction = st.iteration / st.max_iters if st.max_iters else 1.0
        limits = {"identity_below": self.cfg.identity_below,
                  "uniform_above": self.cfg.uniform_above}  # fmt: skip
        report = {}
        for r in results:
            problems = r.problems(**limits)
            report[r.name] = {**dataclasses.asdict(r), "problems": problems}
            if problems and fraction >= self.cfg.warn_after and r.name not in self.warned:
                self.warned.add(r.name)
                say(health_warning(r.name, problems, fraction, r.describe()), run.main)
        st.events.put("summary.block_health", report)
        return {k: v for r in results for k, v in r.metrics().items()}

    def state_dict(self) -> dict[str, Any]:
        return {"warned": sorted(self.warned)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.warned = set(state.get("warned", ()))
