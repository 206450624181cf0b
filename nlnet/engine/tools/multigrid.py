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
:class:`MultigridSchedule` answers "which shape at this epoch / iteration".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["LongCyclePhase", "MultigridSchedule", "long_cycle_schedule", "short_cycle_shapes"]


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
