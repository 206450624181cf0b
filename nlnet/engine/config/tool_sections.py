"""Config sections of the training tools (the hooks of :mod:`nlnet.engine.hooks` and the clip
augmentation of :mod:`nlnet.engine.augment`): ``ema``, ``precise_bn``, ``augment``, ``logging``,
``multigrid``, ``health``; part of :class:`nlnet.engine.config.Config`, validated there (docs/training.md
lists the keys)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "EMAConfig",
    "PreciseBNConfig",
    "AugmentConfig",
    "LoggingConfig",
    "MultigridConfig",
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
class AugmentConfig:
    """Batch augmentation of the training clips (video classification).

    Attributes:
        mixup_alpha: MixUp's Beta(alpha, alpha) (torchvision ``transforms.v2.MixUp``; 0: off).
        cutmix_alpha: CutMix's Beta(alpha, alpha) (``transforms.v2.CutMix``; 0: off), one box
            for all frames of a clip.  With both set, one of the two per batch at random.
        mix_prob: probability that a batch is mixed at all.
        label_smoothing: cross-entropy label smoothing (0: off).
        randaugment: RandAugment (``transforms.v2.RandAugment``) with one draw of operations
            per clip, applied identically to every frame.
        randaugment_ops: operations per clip.
        randaugment_magnitude: magnitude (0-30).
    """

    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0
    mix_prob: float = 1.0
    label_smoothing: float = 0.0
    randaugment: bool = False
    randaugment_ops: int = 2
    randaugment_magnitude: int = 9


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
class MultigridConfig:
    """Multigrid training (Wu et al., "A Multigrid Method for Efficiently Training Video
    Models", CVPR 2020): clip shape and batch size vary so that ``B * T * S**2`` stays constant.

    Attributes:
        long_cycle: vary ``(T, S)`` over the epochs by ``long_cycle_factors`` (Section 3.2);
            needs ``optim.epochs`` (the baseline's epochs) and ``stages``.
        short_cycle: vary ``S`` every iteration by ``short_cycle_factors`` (Section 3.3).
        stages: start epochs of the baseline's learning-rate stages, from 0 (e.g. ``[0, 94,
            154, 196]``); the rate is ``optim.lr * optim.gamma ** stage`` times the long cycle's
            batch factor, the last stage is the fine-tuning one.
        epoch_factor: epochs relative to the baseline schedule (1.5 in the paper).
        long_cycle_factors: ``(t, s)`` factors of the default frames and crop size.
        short_cycle_factors: the two smaller spatial factors of the short cycle.
    """

    long_cycle: bool = False
    short_cycle: bool = False
    stages: tuple[int, ...] = ()
    epoch_factor: float = 1.5
    long_cycle_factors: tuple[tuple[float, ...], ...] = (
        (0.25, 0.5**0.5), (0.5, 0.5**0.5), (0.5, 1.0), (1.0, 1.0),
    )  # fmt: skip
    short_cycle_factors: tuple[float, ...] = (0.5, 0.5**0.5)


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
