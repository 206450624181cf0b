"""The video task's own config sections: ``eval`` with its test views, ``augment``, ``multigrid``.

Declared by :class:`~nlnet.engine.tasks.video.VideoClassificationTask` (its ``sections``), so a
config of another task that sets them is a one-line error naming the task; checked by
:func:`check_video_sections` when the config loads (docs/training.md lists the keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nlnet.engine.config.checks import check_number
from nlnet.engine.config.schema import EvalConfig
from nlnet.engine.errors import ConfigError

__all__ = ["AugmentConfig", "MultigridConfig", "VideoEvalConfig", "check_video_sections"]


@dataclass(frozen=True)
class VideoEvalConfig(EvalConfig):
    """Multi-clip testing (Section 4.1, "Inference"): the ``eval`` section of the video task.

    Attributes:
        clips: clips sampled uniformly over each video (10 in the paper).
        crops: spatial crops per clip (1: fully-convolutional on the whole resized frame; 3: the
            three-crop option).
        batch_size, workers, split: as :class:`~nlnet.engine.config.EvalConfig` (``batch_size``
            counts clips).
    """

    clips: int = 10
    crops: int = 1


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


def _check_augment(a: AugmentConfig, loss: str) -> None:
    for key in ("mixup_alpha", "cutmix_alpha"):
        check_number(f"augment.{key}", getattr(a, key), 0)
    check_number("augment.mix_prob", a.mix_prob, 0, 1, high_open=False)
    check_number("augment.label_smoothing", a.label_smoothing, 0, 1)
    check_number("augment.randaugment_ops", a.randaugment_ops, 1)
    check_number("augment.randaugment_magnitude", a.randaugment_magnitude, 0, 30,
                 high_open=False)  # fmt: skip
    if (a.mixup_alpha or a.cutmix_alpha or a.label_smoothing) and loss != "ce":
        raise ConfigError(
            "augment.mixup_alpha/cutmix_alpha/label_smoothing: need train.loss=ce (single-label)"
        )


def _check_multigrid(m: MultigridConfig, epochs: int) -> None:
    check_number("multigrid.epoch_factor", m.epoch_factor, 0, low_open=True)
    if m.long_cycle:
        stages = list(m.stages)
        if epochs <= 0:
            raise ConfigError("multigrid.long_cycle: set optim.epochs (the baseline's epochs)")
        if (
            len(stages) < 2
            or stages[0] != 0
            or stages != sorted(set(stages))
            or stages[-1] >= epochs
        ):
            raise ConfigError(
                "multigrid.stages: expected the start epochs of the learning-rate stages, "
                f"from 0, increasing, below optim.epochs={epochs}, got {stages}"
            )
    if any(len(f) != 2 or min(f) <= 0 for f in m.long_cycle_factors) or not m.long_cycle_factors:
        raise ConfigError(
            "multigrid.long_cycle_factors: expected a list of [t, s] pairs of positive factors, "
            f"got {[list(f) for f in m.long_cycle_factors]}"
        )
    if len(m.short_cycle_factors) != 2 or not all(0 < f <= 1 for f in m.short_cycle_factors):
        raise ConfigError(
            "multigrid.short_cycle_factors: expected two spatial factors in (0, 1], got "
            f"{list(m.short_cycle_factors)}"
        )


def check_video_sections(cfg: Any) -> None:
    """The video sections of a built config: numbers in range, augmentation only with the
    single-label loss, a long cycle with the baseline's epochs and stages (one-line errors)."""
    for key in ("clips", "crops"):
        check_number(f"eval.{key}", getattr(cfg.eval, key), 1)
    _check_augment(cfg.augment, cfg.train.loss)
    _check_multigrid(cfg.multigrid, cfg.optim.epochs)
    _check_clip_cache(cfg.data, "train.workers", cfg.train.workers)
    _check_clip_cache(cfg.data, "eval.workers", cfg.eval.workers)
    _check_rgb(cfg)


def _check_rgb(cfg: Any) -> None:
    """Video frames are decoded as RGB (a grey video's three channels are equal), so the
    model's input channels and the normalisation are three (one-line errors otherwise); a
    config without ``data.root`` or ``data.annotations`` trains on datasets given in Python."""
    if getattr(cfg.data, "root", None) is None and getattr(cfg.data, "annotations", None) is None:
        return
    overrides = getattr(cfg.model, "overrides", None) or {}
    channels = overrides.get("in_channels", 3) if isinstance(overrides, dict) else 3
    if channels != 3:
        raise ConfigError(
            f"model.overrides.in_channels={channels}: video frames are decoded as RGB, 3 "
            "channels (a grey video's three are equal, so it trains as it is); remove it"
        )
    for key in ("mean", "std"):
        values = getattr(cfg.data, key, None)
        if values is not None and len(values) != 3:
            raise ConfigError(
                f"data.{key}: video frames are decoded as RGB: expected 3 values, got "
                f"{list(values)}"
            )


def _check_clip_cache(data: Any, key: str, workers: int | str) -> None:
    """A memory clip cache is per process, and a loader's workers are started anew every epoch
    (every validation): with a fixed count of workers, what they decode is gone when they end (a
    warning; ``auto`` starts in the training process and only reads what it stored)."""
    if getattr(data, "clip_cache", None) != "memory" or not isinstance(workers, int):
        return
    if workers > 0:
        import warnings

        warnings.warn(
            f"data.clip_cache=memory with {key}={workers}: the loader's workers start with an "
            "empty cache each time and keep nothing; use data.clip_cache=disk (shared by the "
            f"workers) or {key}=0",
            RuntimeWarning,
            stacklevel=2,
        )
