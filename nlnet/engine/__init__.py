"""Training and evaluation: configs, the train loop, checkpoints, distributed helpers, metrics."""

from nlnet.engine.checkpoint import (
    CheckpointMismatchError,
    load_backbone,
    load_checkpoint,
    save_checkpoint,
)
from nlnet.engine.config import (
    Config,
    ConfigError,
    EvalConfig,
    ModelConfig,
    OptimConfig,
    TrainConfig,
    config_from_dict,
    config_to_dict,
    list_configs,
    load_config,
    save_config,
)
from nlnet.engine.distributed import get_rank, get_world_size, init_distributed, is_main_process
from nlnet.engine.evaluator import run_evaluation
from nlnet.engine.metrics import VideoScoreAggregator, mean_average_precision, topk_accuracy
from nlnet.engine.trainer import MetricsLogger, WarmupMultiStepLR, build_model, evaluate, train

__all__ = [
    "CheckpointMismatchError",
    "Config",
    "ConfigError",
    "EvalConfig",
    "MetricsLogger",
    "ModelConfig",
    "OptimConfig",
    "TrainConfig",
    "VideoScoreAggregator",
    "WarmupMultiStepLR",
    "build_model",
    "config_from_dict",
    "config_to_dict",
    "evaluate",
    "get_rank",
    "get_world_size",
    "init_distributed",
    "is_main_process",
    "list_configs",
    "load_backbone",
    "load_checkpoint",
    "load_config",
    "mean_average_precision",
    "run_evaluation",
    "save_checkpoint",
    "save_config",
    "topk_accuracy",
    "train",
]
