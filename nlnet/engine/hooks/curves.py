"""Figure 4's curves: training and validation top-1 several times per epoch (a hook).

The paper's Figure 4 plots training and validation error over iterations. :class:`CurveHook`
measures top-1 in eval mode on a fixed set of training items and on the validation items held
as tensors, ``points_per_epoch`` times per epoch, without changing the training: between
validations it restores the random state and the training mode after each measurement.
"""

from __future__ import annotations

from typing import Any

import torch

from nlnet.engine.hooks.base import HookBase
from nlnet.engine.modeling import set_train_mode

__all__ = ["CurveHook", "top1"]


@torch.no_grad()
def top1(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, device: Any, bs: int = 100
) -> float:
    """Top-1 accuracy (in [0, 1]) of ``model`` on ``(x, y)`` in eval mode, counted by the engine's
    :func:`nlnet.engine.metrics.topk_correct`."""
    from nlnet.engine.metrics import topk_correct

    if len(x) == 0:
        return 0.0
    model.eval()
    logits = torch.cat([model(x[i : i + bs].to(device)).cpu() for i in range(0, len(x), bs)])
    return topk_correct(logits, y, ks=(1,))[1] / len(x)


class CurveHook(HookBase):
    """Figure 4's curves: top-1 on a fixed set of training clips and on the validation clips
    (eval mode), ``points_per_epoch`` times per epoch.

    At the epoch ends (the engine's own validations) the points are measured beside the
    engine's; in between, by this hook, which restores the random state and the training mode
    afterwards, so the extra points leave the training (dropout masks) exactly as it was.

    Args:
        train: training clips and targets to measure (a fixed subset).
        val: the validation clips and targets.
        steps_per_epoch: iterations of an epoch.
        points_per_epoch: measurements per epoch (the epoch's end included).
    """

    events = ("after_step", "eval_extra")

    def __init__(
        self,
        train: tuple[torch.Tensor, torch.Tensor],
        val: tuple[torch.Tensor, torch.Tensor],
        steps_per_epoch: int,
        points_per_epoch: int,
    ) -> None:
        self.train, self.val, self.steps = train, val, steps_per_epoch
        p = max(1, points_per_epoch)
        self.offsets = {round(k * steps_per_epoch / p) for k in range(1, p)} - {0, steps_per_epoch}
        self.points: list[dict[str, float]] = []

    def _measure(self, run: Any) -> dict[str, float]:
        model, device = run.state.model, run.device
        point = {"iter": run.state.iteration, "train_top1": top1(model, *self.train, device),
                 "val_top1": top1(model, *self.val, device)}  # fmt: skip
        self.points = [q for q in self.points if q["iter"] != point["iter"]] + [point]
        return point

    def after_step(self, run: Any) -> None:
        if run.state.iteration % self.steps in self.offsets and not run.state.at_end:
            rng = torch.get_rng_state()
            self._measure(run)
            torch.set_rng_state(rng)
            set_train_mode(run.state.model, run.cfg.train.freeze_bn)

    def eval_extra(self, run: Any) -> dict[str, Any]:
        return {"train_top1": 100 * self._measure(run)["train_top1"]}
