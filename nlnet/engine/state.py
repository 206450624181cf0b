"""The state of a training run: every value that changes while training, in one dataclass.

What a checkpoint holds to continue a run exactly: model, optimizer, scheduler and AMP scaler;
the position (epoch, iteration, mini-batches of the epoch consumed); the running counters of the
epoch; and, per process, the generator states.  Beside them, the values of one invocation of
``train()`` (the step's learning rate, whether it ends the run or the invocation, the speed) and
the :class:`~nlnet.engine.events.EventStorage` through which the hooks hand over their results
(validation metrics, the last checkpoint written).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from nlnet.engine.checkpoint.rng import get_rng_state, set_rng_state
from nlnet.engine.events import EventStorage
from nlnet.engine.metrics import ThroughputMeter
from nlnet.engine.optim import load_optimizer_state

__all__ = ["Counters", "TrainState"]


@dataclass
class Counters:
    """Running sums of one process.

    ``loss_sum``/``loss_count``: item-weighted loss of the epoch (kept on the device, no sync per
    step); ``window_*``: the same since the last log record; ``epoch_skipped``/``total_skipped``:
    bad items dropped; ``empty_batches``: mini-batches of the epoch in which every item was bad.
    """

    device: torch.device
    loss_sum: torch.Tensor = field(init=False)
    window_sum: torch.Tensor = field(init=False)
    loss_count: int = 0
    window_count: int = 0
    epoch_skipped: int = 0
    total_skipped: int = 0
    empty_batches: int = 0
    total_empty_batches: int = 0

    def __post_init__(self) -> None:
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.window_sum = torch.zeros((), dtype=torch.float64, device=self.device)

    def add_loss(self, loss: torch.Tensor, n: int) -> None:
        value = loss.detach().double() * n
        self.loss_sum += value
        self.window_sum += value
        self.loss_count += n
        self.window_count += n

    def add_skipped(self, n_bad: int, empty: bool) -> None:
        self.epoch_skipped += n_bad
        self.total_skipped += n_bad
        self.empty_batches += int(empty)
        self.total_empty_batches += int(empty)

    def new_epoch(self) -> None:
        self.loss_sum.zero_()
        self.loss_count = self.epoch_skipped = self.empty_batches = 0

    def new_window(self) -> None:
        self.window_sum.zero_()
        self.window_count = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "loss_sum": float(self.loss_sum),
            "loss_count": self.loss_count,
            "epoch_skipped": self.epoch_skipped,
            "total_skipped": self.total_skipped,
            "empty_batches": self.empty_batches,
            "total_empty_batches": self.total_empty_batches,
        }

    def load(self, d: dict[str, Any]) -> None:
        self.loss_sum.fill_(float(d["loss_sum"]))
        self.loss_count = int(d["loss_count"])
        self.epoch_skipped, self.total_skipped = int(d["epoch_skipped"]), int(d["total_skipped"])
        self.empty_batches = int(d.get("empty_batches", 0))
        self.total_empty_batches = int(d.get("total_empty_batches", 0))


@dataclass
class TrainState:
    """Everything that changes while training (see the module docstring); built before the
    first step, read by the hooks through :class:`~nlnet.engine.hooks.base.RunView`.

    Checkpointed: ``model``, ``optimizer``, ``scheduler``, ``scaler``, ``counters``, ``epoch``
    (of the next step), ``iteration`` (steps done), ``batch_in_epoch`` (loader batches of the
    epoch consumed).  Of this invocation: ``max_iters`` (steps of the whole run),
    ``start_iteration``, ``step_epoch`` (the epoch of the step just done), ``step_batches``
    (loader batches of the current step), ``lr`` (its learning rate), ``at_end`` (the step was
    the run's last), ``stopping`` (it ends this invocation: ``train.stop_after`` or a signal),
    ``stopped`` (the invocation was cut), ``interrupted`` (by a signal), ``items_seen`` and
    ``train_time`` (for the summary's speed), ``speed`` (the items/s meter of the log records),
    ``events`` (the hooks' results).
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: Any
    counters: Counters
    speed: ThroughputMeter
    max_iters: int
    epoch: int = 0
    iteration: int = 0
    batch_in_epoch: int = 0
    start_iteration: int = 0
    step_epoch: int = 0
    step_batches: int = 1
    lr: float = 0.0
    at_end: bool = False
    stopping: bool = False
    stopped: bool = False
    interrupted: bool = False
    items_seen: int = 0
    train_time: float = 0.0
    events: EventStorage = field(default_factory=EventStorage)

    def current_lr(self) -> float:
        """The largest learning rate of the optimizer's groups (the rate of the next step)."""
        return max(g["lr"] for g in self.optimizer.param_groups)

    def rank_state(self) -> dict[str, Any]:
        """This process's part of a checkpoint: generators and counters."""
        return {"rng": get_rng_state(), **self.counters.to_dict()}

    def restore_rank(self, mine: dict[str, Any]) -> None:
        set_rng_state(mine["rng"])
        self.counters.load(mine)

    def restore_ranks(self, ranks: list[dict[str, Any]], rank: int, world_size: int) -> None:
        """This process's part of a checkpoint's ``extra["ranks"]``; a checkpoint written by
        another number of processes is continued, not exactly (a warning says so)."""
        if ranks and len(ranks) != world_size:
            warnings.warn(
                f"resume: the checkpoint was written by {len(ranks)} process(es), this run has "
                f"{world_size}; training continues but not exactly as the original run",
                RuntimeWarning,
                stacklevel=5,
            )
        if len(ranks) == world_size:
            self.restore_rank(ranks[rank])

    def restore(self, ckpt: dict[str, Any]) -> None:
        """Optimizer, scheduler, scaler and position from a checkpoint (weights loaded before)."""
        load_optimizer_state(self.optimizer, ckpt["optimizer"])
        self.scheduler.load_state_dict(ckpt["scheduler"])
        if ckpt.get("scaler"):
            self.scaler.load_state_dict(ckpt["scaler"])
        self.epoch = int(ckpt.get("epoch", 0))
        self.iteration = int(ckpt.get("iteration", 0))
        self.batch_in_epoch = int(ckpt.get("batch_in_epoch", 0))
