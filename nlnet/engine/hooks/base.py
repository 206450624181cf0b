"""Extension points of the training loop: :class:`HookBase`, the view a hook reads, and the
events it declares (detectron2's ``HookBase`` shape).

The loop (:class:`nlnet.engine.loop.Run`) calls, for every hook in order, the events that the
hook lists in its ``events`` class attribute (and only those)::

    before_train(run)       after the state is built and restored, before the first step
    before_step(run)        before the micro-batches of an optimizer step
    after_step(run)         after the optimizer step, the schedule step and the epoch
                            bookkeeping (``run.state.epoch`` is already the next epoch when this
                            step closed one; ``run.state.step_epoch`` is the epoch of the step)
    before_eval(run)        before each validation (e.g. precise BN statistics)
    eval_extra(run)         more validation metrics, merged into the ``val`` record (e.g. EMA)
    after_train(run)        once, at the end of the invocation (``run.state.stopped`` says
                            whether it was cut by ``train.stop_after`` or a signal)

and, for every hook, ``state_dict()`` / ``load_state_dict(state)``: the hook's own part of a
checkpoint (``extra["hooks"][name]``), so a resumed run continues exactly.  A subclass that
overrides an event without listing it, or lists one it does not override, is refused when the
class is defined.

``run`` is a :class:`RunView`: frozen, so a hook cannot write onto the loop.  It reads the
run's :class:`~nlnet.engine.state.TrainState` (``run.state``: model, optimizer, position, lr,
``at_end``, ``stopping``...) and hands its results over through ``run.state.events`` (an
:class:`~nlnet.engine.events.EventStorage`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch
    from torch.utils.data import Dataset

    from nlnet.engine.config.schema import Config
    from nlnet.engine.distributed import DistInfo
    from nlnet.engine.runlog import MetricsLogger
    from nlnet.engine.state import TrainState
    from nlnet.engine.tasks import Task

__all__ = ["EVENTS", "HookBase", "RunView", "StepPlan"]

#: The events of the loop, in the order of one run.
EVENTS = ("before_train", "before_step", "after_step", "before_eval", "eval_extra", "after_train")


@dataclass(frozen=True)
class RunView:
    """What a hook may read of a run (built once before the first step).

    Attributes:
        cfg: the run's :class:`~nlnet.engine.config.Config` (``model.num_classes`` resolved).
        task: the :class:`~nlnet.engine.tasks.Task`.
        info: rank, world size and device (:class:`~nlnet.engine.distributed.DistInfo`).
        device: the training device.
        amp: ``"none"``, ``"fp16"`` or ``"bf16"`` (``"none"`` off CUDA).
        progress: whether a progress bar is shown.
        bar: the tqdm bar, or ``None``.
        run_dir: the run directory.
        logger: the run's :class:`~nlnet.engine.runlog.MetricsLogger`.
        state: the run's :class:`~nlnet.engine.state.TrainState` (read; hooks write only to
            ``state.events`` and to their own attributes).
        train_dataset: the training dataset.
        val_dataset: the validation dataset, or ``None``.
        t_start: ``time.perf_counter()`` when the run started.
        validate: runs one validation and returns its metrics (``None`` without validation).
        checkpoint: writes a checkpoint of the run at a path (returns it; ``None`` off rank 0).
    """

    cfg: Config
    task: Task
    info: DistInfo
    device: torch.device
    amp: str
    progress: bool
    bar: Any
    run_dir: Path
    logger: MetricsLogger
    state: TrainState
    train_dataset: Dataset
    val_dataset: Dataset | None
    t_start: float
    validate: Callable[[], dict[str, Any] | None]
    checkpoint: Callable[[Path], Path | None]

    @property
    def main(self) -> bool:
        """Whether this is the main process (rank 0)."""
        return bool(self.info.is_main)


class HookBase:
    """A no-op hook.  A subclass overrides the events it handles and lists them in ``events``
    (checked when the class is defined); ``name`` keys its state in a checkpoint."""

    name: ClassVar[str] = "hook"
    events: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        unknown = set(cls.events) - set(EVENTS)
        overridden = {e for e in EVENTS if getattr(cls, e) is not getattr(HookBase, e)}
        if unknown or overridden != set(cls.events):
            raise TypeError(
                f"{cls.__name__}.events must list exactly the events it overrides "
                f"(of {EVENTS}): overrides {sorted(overridden)}, lists {sorted(cls.events)}"
            )

    def before_train(self, run: RunView) -> None:
        """Called once before the first step of this invocation."""

    def before_step(self, run: RunView) -> None:
        """Called before each optimizer step."""

    def after_step(self, run: RunView) -> None:
        """Called after each optimizer step (and the epoch bookkeeping)."""

    def before_eval(self, run: RunView) -> None:
        """Called before each validation."""

    def eval_extra(self, run: RunView) -> dict[str, Any]:
        """More validation metrics (merged into the ``val`` record)."""
        return {}

    def after_train(self, run: RunView) -> None:
        """Called once at the end of the invocation."""

    def state_dict(self) -> dict[str, Any]:
        """This hook's state for a checkpoint (plain data and tensors)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""


class StepPlan(HookBase):
    """A hook that also sets the size of each step and so the length of the run (at most one
    per run; the video task's multigrid schedule is one).  The loop asks it, before building the state:"""

    def batch_factor(self, epoch: int, iteration: int) -> int:
        """Loader batches of the step at ``iteration``, per ``train.accum_steps``."""
        raise NotImplementedError

    def total_iterations(self, batches_per_epoch: int, accum: int) -> int:
        """The run's number of optimizer steps."""
        raise NotImplementedError

    def build_scheduler(self, optimizer: Any, optim: Any, max_iters: int) -> Any:
        """The learning-rate schedule of the run."""
        raise NotImplementedError
