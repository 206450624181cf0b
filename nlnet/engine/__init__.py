"""Training and evaluation: one loop built from small parts (see docs/ARCHITECTURE.md).

=================  ==============================================================
``config/``        typed YAML configs, ``_base_`` files, dotted overrides, checks
``tasks/``         the task protocol; one package per task, with its sections and hooks
``modeling``       the network from ``cfg.model``; frozen BN
``optim``          optimizer and schedule (PyTorch's SGD/AdamW, SequentialLR)
``state``          what a run changes: model, optimizer, schedule, position, counters
``events``         the values hooks hand over (validation metrics, last checkpoint)
``loop``           ``train(cfg)``: the :class:`~nlnet.engine.loop.Run` of one process
``hooks/``         the loop's hooks: logging, validation, checkpoints, EMA, precise BN...
``evaluation``     ``evaluate(cfg, checkpoint)``, the evaluation driver
``checkpoint/``    verified, weights-only checkpoints; ``build_model_from_checkpoint(path)``
``stop``           SIGINT/SIGTERM: stop after the step, save, say how to resume
``runlog``         metrics.jsonl/csv, curves, console lines
``rundir``         run-directory lock and refusal to mix runs
``distributed``    torchrun/DDP helpers, resumable samplers
``jobs``           independent trainings side by side, one thread each (seed sweeps)
``errors``         user errors (one line, exit status 2 on the command line)
``lazy``           the lazy namespaces of these packages
=================  ==============================================================

Names are imported lazily, so ``import nlnet.engine`` does not import torch.
"""

from __future__ import annotations

from nlnet.engine.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "CheckpointError": "errors",
        "DataError": "errors",
        "RunDirError": "errors",
        "UserError": "errors",
        "CheckpointInfo": "checkpoint.model_loading",
        "CheckpointMismatchError": "checkpoint.model_loading",
        "checkpoint_info": "checkpoint.model_loading",
        "load_backbone": "checkpoint.model_loading",
        "load_checkpoint": "checkpoint.file_io",
        "build_model_from_checkpoint": "checkpoint.model_loading",
        "save_checkpoint": "checkpoint.file_io",
        "Config": "config.schema",
        "ConfigError": "errors",
        "EvalConfig": "config.schema",
        "ModelConfig": "config.schema",
        "OptimConfig": "config.schema",
        "TrainConfig": "config.schema",
        "config_from_dict": "config.loading",
        "config_to_dict": "config.loading",
        "list_configs": "config.files",
        "load_config": "config.loading",
        "save_config": "config.loading",
        "get_rank": "distributed",
        "get_world_size": "distributed",
        "init_distributed": "distributed",
        "is_main_process": "distributed",
        "run_evaluation": "tasks.video.evaluation",
        "VideoScoreAggregator": "metrics",
        "mean_average_precision": "metrics",
        "topk_accuracy": "metrics",
        "MetricsLogger": "runlog",
        "build_model": "modeling",
        "freeze_batchnorm": "modeling",
        "freeze_parameters": "modeling",
        "build_optimizer": "optim",
        "build_scheduler": "optim",
        "Task": "tasks",
        "register_task": "tasks",
        "evaluate": "evaluation",
        "train": "loop",
        "EventStorage": "events",
        "HookBase": "hooks.base",
        "RunView": "hooks.base",
        "DatasetEvaluator": "evaluation",
        "inference_on_dataset": "evaluation",
    },
)
