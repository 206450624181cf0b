"""The hooks of a config, in call order: :func:`build_hooks`.

The core loop's hooks (``train_log``, ``validation``, ``checkpointing``), the training tools
every task has (EMA of the weights, precise BN statistics, block health, TensorBoard / Weights &
Biases) and the task's own hooks (its class's ``hooks(cfg)``: the video task's multigrid
schedules); see docs/training.md for their config keys."""

from __future__ import annotations

from typing import Any

from nlnet.engine.hooks.base import HookBase
from nlnet.engine.hooks.checkpointing import CheckpointHook
from nlnet.engine.hooks.train_log import LoggingHook
from nlnet.engine.hooks.validation import EvalHook

__all__ = ["build_hooks"]


def build_hooks(cfg: Any, extra: tuple[HookBase, ...] = ()) -> list[HookBase]:
    """The hooks of a config, in call order: the tools that change the weights or the BN
    statistics first (EMA, precise BN), the task's own hooks, then logging, block health, the
    external loggers, the caller's ``extra`` hooks, validation, checkpointing."""
    from nlnet.engine.hooks.block_health import BlockHealthHook
    from nlnet.engine.hooks.ema import EMAHook
    from nlnet.engine.hooks.external_loggers import ExternalLoggersHook
    from nlnet.engine.hooks.precise_bn import PreciseBNHook

    hooks: list[HookBase] = []
    if cfg.ema.decay > 0:
        hooks.append(EMAHook(cfg.ema))
    if cfg.precise_bn.batches > 0:
        hooks.append(PreciseBNHook(cfg.precise_bn.batches))
    from nlnet.engine.tasks import task_class

    task_hooks = getattr(task_class(cfg.task), "hooks", None)
    if task_hooks is not None:
        hooks += task_hooks(cfg)
    hooks.append(LoggingHook())
    if cfg.health.enabled:
        hooks.append(BlockHealthHook(cfg.health))
    if cfg.logging.tensorboard or cfg.logging.wandb:
        hooks.append(ExternalLoggersHook(cfg.logging))
    hooks += [*extra, EvalHook(), CheckpointHook()]
    names = [h.name for h in hooks]
    if len(set(names)) != len(names):
        raise ValueError(f"hooks: names must be unique (checkpoint keys), got {names}")
    return hooks
