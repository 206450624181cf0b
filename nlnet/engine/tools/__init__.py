"""Training tools, each one small hook or function on the loop's extension points
(:mod:`nlnet.engine.hooks`): EMA of the weights (``ema``), precise BN statistics
(``precise_bn``), TensorBoard / Weights & Biases (``external_loggers``), mixup / cutmix /
RandAugment / label smoothing (``augment``), multigrid schedules (``multigrid``).
See docs/training.md for their config keys."""

from __future__ import annotations

from typing import Any

from nlnet.engine.hooks import CheckpointHook, EvalHook, HookBase, LoggingHook

__all__ = ["build_hooks"]


def build_hooks(cfg: Any, extra: tuple[HookBase, ...] = ()) -> list[HookBase]:
    """The hooks of a config, in call order: the tools that change the weights or the BN
    statistics first (EMA, precise BN), then logging, the external loggers, the caller's
    ``extra`` hooks, validation, checkpointing."""
    from nlnet.engine.tools.ema import EMAHook
    from nlnet.engine.tools.external_loggers import ExternalLoggersHook
    from nlnet.engine.tools.multigrid import MultigridHook
    from nlnet.engine.tools.precise_bn import PreciseBNHook

    hooks: list[HookBase] = []
    if cfg.ema.decay > 0:
        hooks.append(EMAHook(cfg.ema))
    if cfg.precise_bn.batches > 0:
        hooks.append(PreciseBNHook(cfg.precise_bn.batches))
    if cfg.multigrid.long_cycle or cfg.multigrid.short_cycle:
        hooks.append(MultigridHook(cfg))
    hooks.append(LoggingHook())
    if cfg.logging.tensorboard or cfg.logging.wandb:
        hooks.append(ExternalLoggersHook(cfg.logging))
    hooks += [*extra, EvalHook(), CheckpointHook()]
    names = [h.name for h in hooks]
    if len(set(names)) != len(names):
        raise ValueError(f"hooks: names must be unique (checkpoint keys), got {names}")
    return hooks
