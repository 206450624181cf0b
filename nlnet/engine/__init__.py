"""Training and evaluation: one loop built from small parts (see docs/ARCHITECTURE.md).

=================  ==============================================================
``config``         typed YAML configs, ``_base_`` files, dotted overrides
``tasks``          the task protocol (datasets, batches, loss, evaluation)
``modeling``       the network from ``cfg.model``; frozen BN
``optim``          optimizer and schedule (PyTorch's SGD/AdamW, SequentialLR)
``state``          what a run changes: model, optimizer, schedule, position, counters
``loop``           ``train(cfg)`` and ``evaluate(cfg, checkpoint)``
``checkpoint``     verified, weights-only checkpoints; ``build_model_from_checkpoint``
``runlog``         metrics.jsonl/csv, curves, console lines
``rundir``         run-directory lock and refusal to mix runs
``evaluator``      multi-clip testing (Section 4.1)
``distributed``    torchrun/DDP helpers, resumable samplers
``errors``         user errors (one line, exit status 2 on the command line)
=================  ==============================================================

Names are imported lazily, so ``import nlnet.engine`` does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CheckpointError": "errors",
    "DataError": "errors",
    "RunDirError": "errors",
    "UserError": "errors",
    "CheckpointInfo": "checkpoint",
    "CheckpointMismatchError": "checkpoint",
    "checkpoint_info": "checkpoint",
    "load_backbone": "checkpoint",
    "load_checkpoint": "checkpoint",
    "build_model_from_checkpoint": "checkpoint",
    "save_checkpoint": "checkpoint",
    "Config": "config",
    "ConfigError": "config",
    "EvalConfig": "config",
    "ModelConfig": "config",
    "OptimConfig": "config",
    "TrainConfig": "config",
    "config_from_dict": "config",
    "config_to_dict": "config",
    "list_configs": "config",
    "load_config": "config",
    "save_config": "config",
    "get_rank": "distributed",
    "get_world_size": "distributed",
    "init_distributed": "distributed",
    "is_main_process": "distributed",
    "run_evaluation": "evaluator",
    "VideoScoreAggregator": "metrics",
    "mean_average_precision": "metrics",
    "topk_accuracy": "metrics",
    "MetricsLogger": "runlog",
    "build_model": "modeling",
    "freeze_batchnorm": "modeling",
    "build_optimizer": "optim",
    "build_scheduler": "optim",
    "Task": "tasks",
    "register_task": "tasks",
    "evaluate": "loop",
    "train": "loop",
    "HookBase": "hooks",
    "DatasetEvaluator": "evaluation",
    "inference_on_dataset": "evaluation",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nlnet.engine' has no attribute {name!r}")
    return getattr(importlib.import_module(f"nlnet.engine.{module}"), name)


def __dir__() -> list[str]:
    return __all__
