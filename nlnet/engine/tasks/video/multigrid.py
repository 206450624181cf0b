"""Multigrid schedules (Wu et al., "A Multigrid Method for Efficiently Training Video Models",
CVPR 2020): the clip shape ``(T, S)`` and the mini-batch size ``B`` change during training
while ``B * T * S**2`` stays about constant, so the cost of an iteration does too.

* Long cycle (Section 3.2): a cycle of base shapes, each a ``(t, s)`` factor of the default
  ``(T, S)`` -- by default ``(T/4, S/sqrt 2)``, ``(T/2, S/sqrt 2)``, ``(T/2, S)``, ``(T, S)``,
  i.e. batch sizes 8x, 4x, 2x, 1x -- repeated once per stage of the learning-rate schedule;
  each shape's share of a stage's epochs is proportional to its batch size (so each shape gets
  the same number of iterations).  A last fine-tuning stage trains at the default shape.
* Short cycle (Section 3.3): within any long-cycle shape, iterations cycle over three spatial
  sizes, ``S * f1``, ``S * f2`` (default ``1/2``, ``1/sqrt 2``) and ``S``, with batch sizes
  ``(1/f)**2`` times larger.
* The whole schedule is then stretched to ``epoch_factor`` times the baseline epochs (1.5 in the
  paper): multigrid trains more epochs in fewer iterations.

This module computes the schedules (the numbers PySlowFast's ``MULTIGRID`` options give);
:class:`MultigridSchedule` answers "which shape at this epoch / iteration", and
:class:`MultigridHook` trains the video task with it.  The clips are still decoded at the full
shape and resampled on the batch, so multigrid saves model compute, not decoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR

from nlnet.engine.errors import DataError
from nlnet.engine.hooks.base import RunView, StepPlan
from nlnet.engine.optim import build_scheduler

__all__ = [
    "LongCyclePhase",
    "MultigridHook",
    "MultigridSchedule",
    "long_cycle_schedule",
    "short_cycle_shapes",
]


@dataclass(frozen=True)
class LongCyclePhase:
    """One phase of the long cycle: train until ``end_epoch`` (exclusive) with clips of
    ``frames`` x ``size``**2 in batches ``batch_factor`` times the default, during stage
    ``stage`` of the learning-rate schedule (the last stage is the fine-tuning one)."""

    stage: int
    batch_factor: int
    frames: int
    size: int
    end_epoch: int


def _batch_factor(default_volume: float, frames: int, size: int) -> int:
    return int(round(default_volume / (frames * size * size)))


def short_cycle_shapes(
    frames: int, size: int, default_size: int, factors: Sequence[float] = (0.5, 0.5**0.5)
) -> list[tuple[int, int, int]]:
    """The three ``(batch_factor, frames, size)`` of the short cycle around ``(frames, size)``:
    the two smaller spatial sizes ``default_size * f`` (batch ``(size / (default_size * f))**2``
    times larger), then ``size`` itself (batch factor 1)."""
    shapes = []
    for f in factors:
        s = int(round(default_size * f))
        shapes.append((int(round((size / (f * default_size)) ** 2)), frames, s))
    return [*shapes, (1, frames, size)]


def long_cycle_schedule(
    frames: int,
    size: int,
    stage_epochs: Sequence[int],
    max_epoch: int,
    *,
    factors: Sequence[Sequence[float]] = ((0.25, 0.5**0.5), (0.5, 0.5**0.5), (0.5, 1), (1, 1)),
    short_cycle: bool = False,
    short_factors: Sequence[float] = (0.5, 0.5**0.5),
    epoch_factor: float = 1.5,
) -> list[LongCyclePhase]:
    """The long-cycle schedule of a baseline step schedule.

    Args:
        frames, size: the default clip length ``T`` and crop size ``S``.
        stage_epochs: start epochs of the baseline's learning-rate stages, from 0 (e.g.
            ``[0, 44, 88]`` for decays at 44 and 88 epochs); the last stage (from the last entry
            to ``max_epoch``) becomes the fine-tuning stage at the default shape.
        max_epoch: the baseline's training epochs.
        factors: the long cycle's ``(t, s)`` factors.
        short_cycle: the base shapes also run short cycles (their mean batch sets the shares).
        short_factors: the short cycle's spatial factors.
        epoch_factor: total epochs relative to the baseline.

    Returns:
        The phases in order; ``end_epoch`` is cumulative (the last equals about
        ``max_epoch * epoch_factor``).
    """
    if len(stage_epochs) < 2 or stage_epochs[0] != 0 or list(stage_epochs) != sorted(stage_epochs):
        raise ValueError(f"stage_epochs: expected increasing epochs from 0, got {stage_epochs}")
    volume = float(frames * size * size)
    bases, mean_batch = [], []
    for t_factor, s_factor in factors:
        t, s = int(round(frames * t_factor)), int(round(size * s_factor))
        if short_cycle:
            shapes = [
                (_batch_factor(volume, t, ss), t, ss)
                for _b, _t, ss in short_cycle_shapes(t, s, size, short_factors)
            ]
        else:
            shapes = [(_batch_factor(volume, t, s), t, s)]
        bases.append(shapes[-1])
        mean_batch.append(sum(b for b, _, _ in shapes) / len(shapes))
    phases: list[tuple[int, tuple[int, int, int], float]] = []
    iterations = 0.0
    for stage in range(len(stage_epochs) - 1):
        length = stage_epochs[stage + 1] - stage_epochs[stage]
        for base, batch in zip(bases, mean_batch):
            epochs = length * batch / sum(mean_batch)
            iterations += epochs / batch
            phases.append((stage, base, epochs))
    # the fine-tuning stage saves as many iterations as the cycles do
    saving = stage_epochs[-1] / iterations
    phases.append(
        (len(stage_epochs) - 1, bases[-1], (max_epoch - stage_epochs[-1]) / saving * mean_batch[-1])
    )
    stretch = max_epoch * epoch_factor / sum(p[2] for p in phases)
    out, total = [], 0.0
    for stage, (b, t, s), epochs in phases:
        total += epochs * stretch
        out.append(LongCyclePhase(stage, b, t, s, int(round(total))))
    return out


class MultigridSchedule:
    """Which clip shape and batch size to use: ``long_cycle(epoch)`` and ``short_cycle(it)``.

    Args:
        frames, size, batch_size: the default ``T``, ``S`` and batch size.
        phases: a :func:`long_cycle_schedule` (``None``: no long cycle).
        short_cycle: cycle the spatial size every iteration.
        short_factors: the short cycle's spatial factors.
    """

    def __init__(
        self,
        frames: int,
        size: int,
        batch_size: int,
        phases: Sequence[LongCyclePhase] | None = None,
        *,
        short_cycle: bool = False,
        short_factors: Sequence[float] = (0.5, 0.5**0.5),
    ) -> None:
        self.frames, self.size, self.batch_size = frames, size, batch_size
        self.phases = list(phases or [])
        self.short, self.short_factors = short_cycle, tuple(short_factors)

    def long_cycle(self, epoch: int) -> tuple[int, int, int]:
        """``(batch_size, frames, size)`` of the long-cycle phase containing ``epoch``."""
        if not self.phases:
            return self.batch_size, self.frames, self.size
        phase = next((p for p in self.phases if epoch < p.end_epoch), self.phases[-1])
        return self.batch_size * phase.batch_factor, phase.frames, phase.size

    def shape(self, epoch: int, iteration: int) -> tuple[int, int, int]:
        """``(batch_size, frames, size)`` at ``iteration`` of ``epoch`` (long and short cycle)."""
        batch, frames, size = self.long_cycle(epoch)
        if not self.short:
            return batch, frames, size
        factor, t, s = short_cycle_shapes(frames, size, self.size, self.short_factors)[
            iteration % 3
        ]
        return batch * factor, t, s


def _crop_size(crop: Any) -> int:
    if isinstance(crop, (list, tuple)):
        return int(crop[0])
    return int(crop)


class MultigridHook(StepPlan):
    """Multigrid training of the video task (``multigrid`` config section).

    A step of batch factor ``k`` runs ``k`` loader batches (times ``train.accum_steps``) before
    the optimizer step, each micro-batch's clips resampled to the schedule's ``(T, S)`` by the
    task (frames spread over the same span, frames resized), so BN sees a fixed number of clips
    as in the paper's sub-batch BN.  With the long cycle the run lasts the schedule's epochs and
    the rate of each phase is ``optim.lr * gamma ** stage * batch factor``, the fine-tuning stage
    split in two halves (``gamma ** (S - 1)``, then ``gamma ** S``), after the linear warm-up.
    """

    name = "multigrid"
    events = ("before_step", "after_train")

    def __init__(self, cfg: Any) -> None:
        from nlnet.data.video.config import VideoDataConfig

        m, d = cfg.multigrid, cfg.data
        d = d if isinstance(d, VideoDataConfig) else VideoDataConfig(**d)
        self.frames, self.size = int(d.num_frames), _crop_size(d.crop)
        self.phases = (
            long_cycle_schedule(
                self.frames, self.size, m.stages, cfg.optim.epochs,
                factors=m.long_cycle_factors, short_cycle=m.short_cycle,
                short_factors=m.short_cycle_factors, epoch_factor=m.epoch_factor,
            )
            if m.long_cycle
            else []
        )  # fmt: skip
        self.schedule = MultigridSchedule(
            self.frames, self.size, 1, self.phases,
            short_cycle=m.short_cycle, short_factors=m.short_cycle_factors,
        )  # fmt: skip
        self.epochs = self.phases[-1].end_epoch if self.phases else cfg.optim.epochs
        self.fixed_iters = cfg.optim.max_iters
        self.iteration_epochs: list[int] = []

    def batch_factor(self, epoch: int, iteration: int) -> int:
        """Loader batches per optimizer step at ``(epoch, iteration)``."""
        return self.schedule.shape(epoch, iteration)[0]

    def total_iterations(self, batches_per_epoch: int, accum: int) -> int:
        """The run's iterations: the schedule's epochs of variable-size steps (or
        ``optim.max_iters`` for an iteration-based run)."""
        if self.epochs <= 0:
            return self.fixed_iters
        it, self.iteration_epochs = 0, []
        for epoch in range(self.epochs):
            used, start = 0, it
            while used + accum * self.batch_factor(epoch, it) <= batches_per_epoch:
                used += accum * self.batch_factor(epoch, it)
                self.iteration_epochs.append(epoch)
                it += 1
            if it == start:
                raise DataError(
                    f"multigrid: epoch {epoch} has {batches_per_epoch} batch(es), fewer than one "
                    f"step of {accum * self.batch_factor(epoch, it)}; use more data or a smaller "
                    "train.batch_size"
                )
        return it

    def build_scheduler(self, optimizer: torch.optim.Optimizer, optim: Any, max_iters: int):
        """The phase-wise rate of the long cycle (a ``LambdaLR``), else the usual schedule."""
        if not self.phases:
            return build_scheduler(optimizer, optim, max_iters)
        last = self.phases[-1]
        ft_start = self.phases[-2].end_epoch
        middle = (ft_start + last.end_epoch) // 2
        epochs, warm = self.iteration_epochs, int(optim.warmup_iters)

        def factor(it: int) -> float:
            epoch = epochs[min(it, len(epochs) - 1)]
            phase = next((p for p in self.phases if epoch < p.end_epoch), last)
            stage = phase.stage - 1 if phase is last and epoch < middle else phase.stage
            value = optim.gamma**stage * phase.batch_factor
            if it < warm:
                value *= optim.warmup_factor + (1 - optim.warmup_factor) * it / warm
            return value

        return LambdaLR(optimizer, factor)

    def before_step(self, run: RunView) -> None:
        _k, frames, size = self.schedule.shape(run.state.epoch, run.state.iteration)
        run.task.set_step_shape((frames, size))

    def after_train(self, run: RunView) -> None:
        run.task.set_step_shape(None)
