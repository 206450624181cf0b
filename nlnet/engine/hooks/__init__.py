"""Hooks of the training loop (detectron2's ``engine/hooks`` role), one module per hook.

=====================  ==========================================================
``base``               :class:`HookBase`, the events, :class:`RunView`, :class:`StepPlan`
``build``              :func:`build_hooks`: the hooks of a config, in call order
``train_log``          ``train`` / ``epoch`` records (:class:`LoggingHook`)
``validation``         validation every ``train.eval_every`` and at the end
``checkpointing``      ``last.pt`` / ``final.pt``
``ema``                exponential moving average of the weights
``precise_bn``         BatchNorm statistics recomputed before validation
``external_loggers``   TensorBoard / Weights & Biases
``block_health``       the non-local blocks' health at every validation (on by default)
``curves``             Figure 4's training and validation top-1, several times per epoch
=====================  ==========================================================

A task's own hooks live in its package (the video task's multigrid hook:
:mod:`nlnet.engine.tasks.video.multigrid`).  Names are imported lazily from their module on
first use.
"""

from __future__ import annotations

from nlnet.engine.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "EVENTS": "base",
        "HookBase": "base",
        "RunView": "base",
        "StepPlan": "base",
        "build_hooks": "build",
        "BlockHealthHook": "block_health",
        "CheckpointHook": "checkpointing",
        "CurveHook": "curves",
        "EMAHook": "ema",
        "EvalHook": "validation",
        "ExternalLoggersHook": "external_loggers",
        "LoggingHook": "train_log",
        "PreciseBNHook": "precise_bn",
    },
)
