"""Config sections of the training tools every task has (the hooks of :mod:`nlnet.engine.hooks`):
``ema``, ``precise_bn``, ``logging``, ``health``; part of :class:`nlnet.engine.config.Config`,
validated there (docs/training.md lists the keys).  A task's own sections (the video task's
``augment`` and ``multigrid``) are declared by the task (:mod:`nlnet.engine.tasks`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "EMAConfig",
    "PreciseBNConfig",
    "LoggingConfig",
    "HealthConfig",
]


@dataclass(frozen=True)
class EMAConfig:
    """Exponential moving average of the weights (``torch.optim.swa_utils.AveragedModel``).

    Attributes:
        decay: ``ema = decay * ema + (1 - decay) * weights`` after every optimizer step (0: off;
            0.999-0.9999 are usual).
        evaluate: also validate the EMA weights (``ema_*`` metrics beside the raw ones).
    """

    decay: float = 0.0
    evaluate: bool = True


@dataclass(frozen=True)
class PreciseBNConfig:
    """Precise BatchNorm statistics before each validation (as in PySlowFast and detectron2).

    Attributes:
        batches: training batches whose exact (full-pass) mean/variance replace the running
            BN statistics before each validation (0: off).
    """

    batches: int = 0


@dataclass(frozen=True)
class LoggingConfig:
    """Optional loggers beside ``metrics.jsonl`` (extras ``tensorboard``, ``wandb``).

    Attributes:
        tensorboard: write TensorBoard event files to ``<output_dir>/tensorboard``.
        wandb: log to Weights & Biases (offline unless ``WANDB_MODE`` says otherwise).
        wandb_project: the W&B project name.
    """

    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str = "nlnet"


@dataclass(frozen=True)
class HealthConfig:
    """Block health (:mod:`nlnet.analysis.block_health`), on by default for a model with
    non-local blocks: at every validation, each block's output relative to its input, its norm
    scale and how concentrated its attention is, in the ``val`` record (``health.<block>.*``),
    TensorBoard and ``summary.json``; a one-line warning names a block that is still (nearly)
    the identity, or attends uniformly, after ``warn_after`` of the training.

    Attributes:
        enabled: record block health (a model without non-local blocks records nothing).
        batches: validation batches measured per evaluation.
        warn_after: fraction of the run's iterations after which a problem is warned about.
        identity_below: a block whose ``||z - x|| / ||x||`` is below this is "(nearly) the
            identity" (0.1: set on the demo's screening seeds, docs/demo.md).
        uniform_above: a block whose attention entropy is above this fraction of a uniform
            row's "attends uniformly".
    """

    enabled: bool = True
    batches: int = 1
    warn_after: float = 0.4
    identity_below: float = 0.1
    uniform_above: float = 0.99
