"""Experiment configuration: nested frozen dataclasses, YAML files with ``_base_`` inheritance,
dotted command-line overrides and strict validation.

The defaults follow the training recipe of the paper ("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971), Section 4.1):
SGD with momentum 0.9, weight decay 1e-4, learning rate 0.01 decayed by 0.1 at 150k and 300k of
400k iterations, dropout 0.5 after global pooling, BatchNorm trained, and 10-clip testing with
averaged softmax scores.  Section 5.1 (128-frame fine-tune, frozen BN, lr 0.0025) and Section 5.2
(Charades, per-category sigmoid, lr 0.00125 decayed every 75k of 200k iterations) are expressed as
YAML files in ``configs/`` that override these defaults.

A YAML file may name a base file (or a list of them) with ``_base_: ../base.yaml``; the bases are
merged first (dictionaries merged recursively, everything else replaced), then the file itself,
then the command-line overrides (``optim.lr=0.005``, values parsed as YAML scalars).  Any key that
is not part of the schema is an error that names the key and the valid ones.  The section
``data`` is checked by the task's dataset builder and ``model.overrides`` against the parameters
of the registered model's builder (a trial build on the ``meta`` device), so a typo such as
``model.overrides.sub_sampel=2`` is a config error, not a failure deep inside the model.  Numbers
are checked too: a learning rate, weight decay or momentum that is not finite or out of range is a
config error.

Why hand-written dataclasses and not pydantic/OmegaConf: this one module holds the schema, the
``_base_`` merging and the dotted overrides with no dependency; a library would add one and still
need the same ``_base_`` and registry checks.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import re
import typing
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nlnet.engine.config_tools import (
    AugmentConfig,
    EMAConfig,
    LoggingConfig,
    MultigridConfig,
    PreciseBNConfig,
)
from nlnet.engine.errors import ConfigError
from nlnet.engine.sections import build_data_section, build_section, plain

_plain = plain  # (module-private name kept for the callers below)

__all__ = [
    "ModelConfig",
    "OptimConfig",
    "TrainConfig",
    "EvalConfig",
    "EMAConfig",
    "PreciseBNConfig",
    "AugmentConfig",
    "LoggingConfig",
    "MultigridConfig",
    "Config",
    "ConfigError",
    "load_config",
    "resolve_config_path",
    "list_configs",
    "config_from_dict",
    "config_to_dict",
    "save_config",
    "apply_overrides",
    "parse_overrides",
    "replace",
    "absolute_paths",
]


@dataclass(frozen=True)
class ModelConfig:
    """Which network to build (passed to ``nlnet.models.create_model``).

    Attributes:
        name: registry name, e.g. ``c2d_r50_nl5`` (Table 2b: 5 non-local blocks).
        num_classes: classifier width (400 for Kinetics, 157 for Charades); ``null`` (the
            default): the number of classes of the training data.
        pretrained_2d: ImageNet 2D weights to inflate (Section 4.1): a torchvision weights name
            (``IMAGENET1K_V1``, read from ``$TORCH_HOME/hub/checkpoints``), a path or ``None``.
        weights: whole-model weights for fine-tuning (image models: ``IMAGENET1K_V1`` for
            ViT/Swin/ResNet; any model: a file of its own weights); every tensor is loaded
            except a classifier of another size, which is rebuilt with ``num_classes`` outputs.
        pretrained: a checkpoint (``.pt`` written by ``nlnet train``) to initialise from, e.g. the
            32-frame model for the 128-frame fine-tune (Section 5.1) or a Kinetics model for
            Charades (Section 5.2).
        reset_head: with ``pretrained``, drop the classifier weights and keep the fresh ones,
            so a model of another class count can be used as a backbone.
        head_names: parameter-name prefixes of the classifier; ``null`` (default): the model's
            own (``ModelFacts.classifier`` of the registry, e.g. ``fc`` or ``head``).
        dropout: dropout ratio before the classifier (0.5 after global pooling, Section 4.1);
            passed to models that have one (not the dense models).  Formerly ``train.dropout``
            (still read, with a ``DeprecationWarning``).
        overrides: extra keyword arguments for ``create_model`` (free-form).
    """

    name: str = "c2d_r50"
    num_classes: int | None = None
    pretrained_2d: str | None = None
    weights: str | None = None
    pretrained: str | None = None
    reset_head: bool = False
    head_names: tuple[str, ...] | None = None
    dropout: float = 0.5
    overrides: dict = field(default_factory=dict)


@dataclass(frozen=True)
class OptimConfig:
    """SGD and the iteration-based multi-step schedule (Section 4.1).

    Attributes:
        lr: base learning rate for the whole (global) mini-batch.
        momentum: SGD momentum (0.9 in the paper).
        weight_decay: L2 weight decay (1e-4 in the paper).
        weight_decay_bn: weight decay of BatchNorm scales/shifts; ``None`` means ``weight_decay``.
        nesterov: Nesterov momentum.
        max_iters: number of optimizer steps (400k in the paper); ignored when ``epochs`` is set.
        epochs: if set (> 0), train for this many passes over the data instead of ``max_iters``.
        steps: iterations at which the learning rate is multiplied by ``gamma``.
        gamma: decay factor (0.1).
        warmup_iters: linear warm-up length in iterations (0: none).
        warmup_factor: learning-rate multiplier at iteration 0 of the warm-up.
        clip_grad_norm: clip the global gradient norm to this value (0: off).
        optimizer: ``sgd`` (the paper) or ``adamw`` (``nlnet demo``).
        schedule: ``multistep`` (warm-up + steps, the paper), ``onecycle`` (``nlnet demo``),
            ``cosine`` or ``poly`` (after the warm-up, down to ``min_lr`` at ``max_iters``).
        pct_start: fraction of the one-cycle schedule spent increasing the rate.
        min_lr: final rate of the ``cosine``/``poly`` schedules.
        power: exponent of the ``poly`` schedule (``(1 - t/T) ** power``).
        layer_decay: layer-wise lr decay for transformers (ViT/Swin/video transformers): the
            block ``i`` of ``L`` gets ``lr * layer_decay ** (L - i)``, the embeddings
            ``layer_decay ** (L + 1)``, the head 1 (1.0: off).
    """

    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 1e-4
    weight_decay_bn: float | None = None
    nesterov: bool = False
    max_iters: int = 400_000
    epochs: int = 0
    steps: tuple[int, ...] = (150_000, 300_000)
    gamma: float = 0.1
    warmup_iters: int = 0
    warmup_factor: float = 0.1
    clip_grad_norm: float = 0.0
    optimizer: str = "sgd"
    schedule: str = "multistep"
    pct_start: float = 0.15
    min_lr: float = 0.0
    power: float = 0.9
    layer_decay: float = 1.0


@dataclass(frozen=True)
class TrainConfig:
    """The training loop.

    Attributes:
        batch_size: clips per process (per GPU) and micro-batch (8 per GPU in Section 4.1).
        accum_steps: micro-batches accumulated per optimizer step.
        amp: ``none`` | ``bf16`` | ``fp16`` (mixed precision, CUDA only; ignored on the CPU).
        freeze_bn: BatchNorm in eval mode with frozen affine parameters (Section 5.1).
        sync_bn: convert BatchNorm to SyncBatchNorm under DDP on CUDA.
        loss: ``ce`` (softmax cross-entropy) or ``bce`` (per-category sigmoid, Section 5.2).
        seed: seed of model init, data order and augmentation.
        workers: DataLoader worker processes (decoding overlaps the training steps).
        prefetch: batches each worker keeps ready (``prefetch_factor``; ignored without workers).
        log_every: iterations between metric records.
        ckpt_every: iterations between checkpoints (0: only at the end).
        eval_every: iterations between validation runs (0: only at the end, if ``data.val`` is set).
        stop_after: stop this invocation after that many iterations, with a checkpoint, as if the
            job had been pre-empted (0: off); ``--resume`` continues exactly.
        device: ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``.
        split: dataset split to train on.
        val_split: split to validate on every ``eval_every`` iterations and at the end (multi-clip
            testing with ``eval.clips``/``eval.crops``); ``null``: no validation while training.
        deterministic: ask PyTorch for deterministic kernels (else cuDNN benchmark mode on CUDA).
        progress: a tqdm progress bar (rank 0 only); ``null`` (default): only when stderr is a
            terminal, else one log line per ``log_every`` iterations.
    """

    batch_size: int = 8
    accum_steps: int = 1
    amp: str = "none"
    freeze_bn: bool = False
    sync_bn: bool = True
    loss: str = "ce"
    seed: int = 0
    workers: int = 4
    prefetch: int = 2
    log_every: int = 20
    ckpt_every: int = 1000
    eval_every: int = 0
    stop_after: int = 0
    device: str = "auto"
    split: str = "train"
    val_split: str | None = None
    deterministic: bool = False
    progress: bool | None = None


@dataclass(frozen=True)
class EvalConfig:
    """Multi-clip testing (Section 4.1, "Inference").

    Attributes:
        clips: clips sampled uniformly over each video (10 in the paper).
        crops: spatial crops per clip (1: fully-convolutional on the whole resized frame; 3: the
            three-crop option).
        batch_size: clips per forward pass.
        workers: DataLoader worker processes.
        split: dataset split used by ``nlnet eval``.
    """

    clips: int = 10
    crops: int = 1
    batch_size: int = 1
    workers: int = 2
    split: str = "val"


@dataclass(frozen=True)
class Config:
    """A full experiment: model, data, optimizer, training loop, evaluation, output directory.

    ``data`` is the typed data section of the task named by ``task`` (the task class's
    ``data_config``, e.g. :class:`nlnet.data.config.VideoDataConfig`), read when the config
    loads; a task without a ``data_config`` keeps a plain dict.

    Attributes:
        model: the network (:class:`ModelConfig`).
        data: the typed data section of the task.
        optim: optimizer and schedule (:class:`OptimConfig`).
        train: the training loop (:class:`TrainConfig`).
        eval: multi-clip testing (:class:`EvalConfig`).
        ema: an exponential moving average of the weights, evaluated beside them.
        precise_bn: BatchNorm statistics recomputed over training batches before evaluation.
        augment: MixUp / CutMix / RandAugment (one draw per clip) and label smoothing.
        logging: TensorBoard and Weights & Biases beside ``metrics.jsonl``.
        multigrid: multigrid training of the video task (Wu et al., CVPR 2020).
        output_dir: the run directory (checkpoints, metrics, curves, summary).
        name: a free label of the experiment.
        class_names: the output class names stored in checkpoints (default: the data's classes).
        task: the task that trains and evaluates (``video_classification``, ``segmentation``,
            ``detection``, ``super_resolution``, ...).
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    data: Any = field(default_factory=dict)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    ema: EMAConfig = field(default_factory=EMAConfig)
    precise_bn: PreciseBNConfig = field(default_factory=PreciseBNConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    multigrid: MultigridConfig = field(default_factory=MultigridConfig)
    output_dir: str = "runs/default"
    name: str = ""
    class_names: tuple[str, ...] | None = None
    task: str = "video_classification"


_FLOAT_RE = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
_FREE_FORM = {("data",), ("model", "overrides")}
#: task -> ``"module:callable"`` checking its ``data`` section at load (raises ConfigError);
#: by name, because the task modules import this one
DATA_CHECKS: dict[str, str] = {"image": "nlnet.engine.tasks.image:ImageDataConfig.from_mapping"}
_CHOICES = {
    ("train", "amp"): ("none", "bf16", "fp16"),
    ("train", "loss"): ("ce", "bce"),
    ("optim", "optimizer"): ("sgd", "adamw"),
    ("optim", "schedule"): ("multistep", "onecycle", "cosine", "poly"),
}


# --------------------------------------------------------------------------------------------
# dict <-> dataclass
# --------------------------------------------------------------------------------------------
def _build(cls: type, data: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    return build_section(cls, data, path, _CHOICES)


def _check_number(where: str, value: float | None, low: float, high: float = math.inf,
                  *, low_open: bool = False, high_open: bool = True) -> None:  # fmt: skip
    """``value`` must be finite and in the interval (``low_open``/``high_open`` exclude ends)."""
    if value is None:
        return
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if not math.isfinite(value) or too_low or too_high:
        lo = f"{'(' if low_open else '['}{low:g}"
        hi = f"{high:g}{')' if high_open else ']'}" if math.isfinite(high) else "inf)"
        raise ConfigError(f"{where}: expected a finite number in {lo}, {hi}, got {value!r}")


def _validate_optim(o: OptimConfig) -> None:
    _check_number("optim.lr", o.lr, 0, low_open=True)
    _check_number("optim.momentum", o.momentum, 0, 1)
    _check_number("optim.weight_decay", o.weight_decay, 0)
    _check_number("optim.weight_decay_bn", o.weight_decay_bn, 0)
    _check_number("optim.gamma", o.gamma, 0, 1, low_open=True, high_open=False)
    _check_number("optim.warmup_factor", o.warmup_factor, 0, 1, low_open=True, high_open=False)
    _check_number("optim.clip_grad_norm", o.clip_grad_norm, 0)
    _check_number("optim.pct_start", o.pct_start, 0, 1, low_open=True)
    _check_number("optim.max_iters", o.max_iters, 1)
    _check_number("optim.epochs", o.epochs, 0)
    _check_number("optim.warmup_iters", o.warmup_iters, 0)
    _check_number("optim.min_lr", o.min_lr, 0)
    _check_number("optim.power", o.power, 0, low_open=True)
    _check_number("optim.layer_decay", o.layer_decay, 0, 1, low_open=True, high_open=False)
    if list(o.steps) != sorted(o.steps):
        raise ConfigError(f"optim.steps: expected increasing iterations, got {list(o.steps)}")
    if o.schedule == "multistep" and o.steps and o.steps[0] < o.warmup_iters:
        raise ConfigError(
            f"optim.steps: the first decay ({o.steps[0]}) falls inside the warm-up "
            f"(optim.warmup_iters={o.warmup_iters})"
        )


def _validate_tools(cfg: Config) -> None:
    """EMA, precise BN, augmentation and multigrid settings."""
    _check_number("ema.decay", cfg.ema.decay, 0, 1)
    _check_number("precise_bn.batches", cfg.precise_bn.batches, 0)
    a = cfg.augment
    for key in ("mixup_alpha", "cutmix_alpha"):
        _check_number(f"augment.{key}", getattr(a, key), 0)
    _check_number("augment.mix_prob", a.mix_prob, 0, 1, high_open=False)
    _check_number("augment.label_smoothing", a.label_smoothing, 0, 1)
    _check_number("augment.randaugment_ops", a.randaugment_ops, 1)
    _check_number("augment.randaugment_magnitude", a.randaugment_magnitude, 0, 30,
                  high_open=False)  # fmt: skip
    if (a.mixup_alpha or a.cutmix_alpha or a.label_smoothing) and cfg.train.loss != "ce":
        raise ConfigError(
            "augment.mixup_alpha/cutmix_alpha/label_smoothing: need train.loss=ce (single-label)"
        )
    m = cfg.multigrid
    _check_number("multigrid.epoch_factor", m.epoch_factor, 0, low_open=True)
    if (m.long_cycle or m.short_cycle) and cfg.task != "video_classification":
        raise ConfigError(f"multigrid: for task video_classification only, not {cfg.task!r}")
    if m.long_cycle:
        stages = list(m.stages)
        if cfg.optim.epochs <= 0:
            raise ConfigError("multigrid.long_cycle: set optim.epochs (the baseline's epochs)")
        if (
            len(stages) < 2
            or stages[0] != 0
            or stages != sorted(set(stages))
            or (stages[-1] >= cfg.optim.epochs)
        ):
            raise ConfigError(
                "multigrid.stages: expected the start epochs of the learning-rate stages, "
                f"from 0, increasing, below optim.epochs={cfg.optim.epochs}, got {stages}"
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


def _validate(cfg: Config) -> None:
    _check_number("model.num_classes", cfg.model.num_classes, 1)
    _validate_optim(cfg.optim)
    _validate_tools(cfg)
    t = cfg.train
    for key in ("batch_size", "accum_steps", "log_every", "prefetch"):
        _check_number(f"train.{key}", getattr(t, key), 1)
    for key in ("workers", "ckpt_every", "eval_every", "stop_after"):
        _check_number(f"train.{key}", getattr(t, key), 0)
    _check_number("model.dropout", cfg.model.dropout, 0, 1)
    for key in ("clips", "crops", "batch_size"):
        _check_number(f"eval.{key}", getattr(cfg.eval, key), 1)
    _check_number("eval.workers", cfg.eval.workers, 0)
    n = cfg.model.num_classes
    if cfg.class_names is not None and n is not None and len(cfg.class_names) != n:
        raise ConfigError(
            f"class_names: expected {n} names (model.num_classes), got {len(cfg.class_names)}"
        )
    _validate_model(cfg.model)
    check = DATA_CHECKS.get(cfg.task)
    if check is not None:  # a task whose data section is typed (a frozen dataclass)
        import importlib

        module, attr = check.split(":")
        target: Any = importlib.import_module(module)
        for part in attr.split("."):
            target = getattr(target, part)
        target(cfg.data)


def _validate_model(m: ModelConfig) -> None:
    """Trial-build a registered model on the meta device: unknown/bad overrides are errors."""
    if not m.overrides:
        return
    try:
        from nlnet.models.registry import create_model, get_model_entry

        get_model_entry(m.name)
    except ValueError:
        return  # not registered: the caller passes its own network (or build_model says so)
    import torch

    try:
        with torch.device("meta"):
            create_model(m.name, num_classes=m.num_classes, **m.overrides)
    except (TypeError, ValueError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"model.overrides for {m.name!r}: {msg}") from None


def config_from_dict(data: Mapping[str, Any] | None = None) -> Config:
    """Build and validate a :class:`Config` from a (possibly partial) nested mapping.

    Missing keys take their defaults; unknown keys raise :class:`ConfigError`.  ``data`` is
    read into the data-config class of the task (:func:`~nlnet.engine.sections.build_data_section`).
    """
    data = _migrate(dict(data or {}))
    raw_data = data.pop("data", None)
    cfg = _build(Config, data, ())
    cfg = dataclasses.replace(cfg, data=build_data_section(cfg.task, raw_data))
    _validate(cfg)
    return cfg


#: Keys that moved: old dotted path -> new dotted path (still read, with a DeprecationWarning).
MOVED_KEYS: dict[str, str] = {"train.dropout": "model.dropout"}


def _moved(key: str) -> str:
    new = MOVED_KEYS.get(key)
    if new is None:
        return key
    warnings.warn(f"config key {key!r} is deprecated; use {new!r}", DeprecationWarning,
                  stacklevel=4)  # fmt: skip
    return new


def _migrate(data: dict) -> dict:
    """Move deprecated keys (:data:`MOVED_KEYS`) of a nested config dict to their new place."""
    for old, new in MOVED_KEYS.items():
        (osec, okey), (nsec, nkey) = old.split("."), new.split(".")
        section = data.get(osec)
        if not isinstance(section, Mapping) or okey not in section:
            continue
        section = dict(section)
        value = section.pop(okey)
        data[osec] = section
        target = dict(data.get(nsec) or {})
        if nkey in target and target[nkey] != value:
            raise ConfigError(f"{old} ({value!r}) and {new} ({target[nkey]!r}) disagree; set {new}")
        target[nkey] = value
        data[nsec] = target
        _moved(old)
    return data


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """Return the configuration as plain nested dicts/lists/scalars (YAML- and torch-safe)."""
    return _plain(cfg)


def replace(cfg: Config, **dotted: Any) -> Config:
    """Return a copy of ``cfg`` with dotted keys replaced: ``replace(cfg, **{"optim.lr": 0.1})``."""
    data = config_to_dict(cfg)
    for key, value in dotted.items():
        _set_dotted(data, key, value)
    return config_from_dict(data)


def _abs_if_exists(value: Any, base: Path | None = None) -> Any:
    if not isinstance(value, str) or not value or os.path.isabs(value):
        return value
    for anchor in (Path.cwd(), base):
        if anchor is not None and (anchor / value).exists():
            return str((anchor / value).resolve())
    return value


def absolute_paths(cfg: Config) -> Config:
    """``cfg`` with its relative file paths made absolute (the saved config then works from any
    directory): ``output_dir``, ``data.root``, ``model.pretrained``, ``model.pretrained_2d`` and,
    when such files exist, ``data.annotations``/``data.classes``/``data.cache``."""
    data = _plain(cfg.data) if dataclasses.is_dataclass(cfg.data) else dict(cfg.data)
    root = data.get("root")
    if isinstance(root, str) and root:
        data["root"] = str(Path(root).expanduser().resolve())
    base = Path(data["root"]) if data.get("root") else None
    for key in ("classes", "cache"):
        if key in data:
            data[key] = _abs_if_exists(data[key], base)
    ann = data.get("annotations")
    if isinstance(ann, Mapping):
        data["annotations"] = {k: _abs_if_exists(v, base) for k, v in ann.items()}
    elif isinstance(ann, str) and "{split}" not in ann:
        data["annotations"] = _abs_if_exists(ann, base)
    dotted: dict[str, Any] = {
        "data": data,
        "output_dir": str(Path(cfg.output_dir).expanduser().resolve()),
    }
    for key in ("pretrained", "pretrained_2d", "weights"):
        value = getattr(cfg.model, key)
        if isinstance(value, str) and value and (key == "pretrained" or looks_like_path(value)):
            dotted[f"model.{key}"] = str(Path(value).expanduser().resolve())
    return replace(cfg, **dotted)


def looks_like_path(value: str) -> bool:
    """A weights value that names a file (an existing one, or one with a directory part or a
    weights-file suffix), not a torchvision weights name such as ``IMAGENET1K_V1`` or
    ``ResNet50_Weights.IMAGENET1K_V2`` (those resolve through ``$TORCH_HOME``'s cache)."""
    return (
        os.path.exists(os.path.expanduser(value))
        or "/" in value
        or os.sep in value
        or value.startswith("~")
        or value.endswith((".pt", ".pth", ".pkl", ".bin", ".safetensors"))
    )


def save_config(cfg: Config, path: str | os.PathLike) -> Path:
    """Write the resolved configuration as YAML (the run directory's ``config.yaml``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=None)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------------------------
# YAML files, _base_ inheritance, named configs
# --------------------------------------------------------------------------------------------
def _config_dirs() -> list[Path]:
    here = Path(__file__).resolve()
    dirs = []
    env = os.environ.get("NLNET_CONFIG_PATH")
    if env:
        dirs += [Path(p) for p in env.split(os.pathsep) if p]
    dirs += [here.parents[2] / "configs", here.parents[1] / "configs"]
    return [d for d in dirs if d.is_dir()]


def list_configs() -> list[str]:
    """Names of the shipped configs (``kinetics/c2d_r50_nl5``, ...), usable with ``--config``."""
    names: set[str] = set()
    for d in _config_dirs():
        for p in d.rglob("*.yaml"):
            name = p.relative_to(d).with_suffix("").as_posix()
            if not name.startswith("_base_/"):
                names.add(name)
    return sorted(names)


def resolve_config_path(name_or_path: str | os.PathLike) -> Path:
    """Find a config file: an existing path, or a name relative to the shipped ``configs/``.

    ``kinetics/c2d_r50_nl5`` resolves to ``configs/kinetics/c2d_r50_nl5.yaml``.
    Set ``NLNET_CONFIG_PATH`` (``os.pathsep``-separated) to search more directories first.
    """
    raw = Path(name_or_path)
    candidates = [raw, raw.with_name(raw.name + ".yaml")]
    for d in _config_dirs():
        candidates += [d / raw, d / (str(raw) + ".yaml")]
    for c in candidates:
        if c.is_file():
            return c.resolve()
    raise FileNotFoundError(
        f"config {str(name_or_path)!r} not found (as a path or under "
        f"{', '.join(str(d) for d in _config_dirs()) or 'configs/'}); "
        f"shipped configs: {', '.join(list_configs()) or 'none'}"
    )


def _deep_merge(base: dict, update: Mapping) -> dict:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(dict(out[key]), value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _load_yaml_tree(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    if path in seen:
        chain = " -> ".join(str(p) for p in (*seen, path))
        raise ConfigError(f"_base_ cycle: {chain}")
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    data = dict(data)
    bases = data.pop("_base_", None)
    if bases is None:
        return data
    if isinstance(bases, str):
        bases = [bases]
    merged: dict = {}
    for base in bases:
        base_path = (path.parent / base).resolve()
        if not base_path.is_file():
            base_path = resolve_config_path(base)
        merged = _deep_merge(merged, _load_yaml_tree(base_path, (*seen, path)))
    return _deep_merge(merged, data)


# --------------------------------------------------------------------------------------------
# dotted overrides
# --------------------------------------------------------------------------------------------
def parse_overrides(items: Iterable[str]) -> list[tuple[str, Any]]:
    """Parse ``key.sub=value`` strings; values are YAML scalars (``0.005``, ``[1, 2]``, ``null``)."""
    out = []
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected KEY=VALUE, e.g. optim.lr=0.005")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key or any(not part for part in key.split(".")):
            raise ConfigError(f"override {item!r}: empty key")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
            if isinstance(value, str) and _FLOAT_RE.fullmatch(value.strip()):
                value = float(value)  # "1e-3": YAML 1.1 would keep it a string
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {item!r}: value is not valid YAML ({exc})") from exc
        out.append((key, value))
    return out


def _schema_keys(path: tuple[str, ...]) -> list[str] | None:
    """Valid keys at ``path`` in the schema, or ``None`` for free-form sections."""
    if any(path[: len(p)] == p for p in _FREE_FORM):
        return None
    cls: Any = Config
    for part in path:
        hints = typing.get_type_hints(cls)
        cls = hints.get(part)
        if not dataclasses.is_dataclass(cls):
            return []
    return [f.name for f in dataclasses.fields(cls)]


def _set_dotted(data: dict, key: str, value: Any) -> None:
    parts = _moved(key).split(".")
    node = data
    for depth, part in enumerate(parts):
        valid = _schema_keys(tuple(parts[:depth]))
        if valid is not None and part not in valid:
            where = ".".join(parts[:depth]) or "config"
            raise ConfigError(
                f"unknown config key {'.'.join(parts[: depth + 1])!r}; "
                f"valid keys in {where}: {', '.join(sorted(valid)) or '(none: not a section)'}"
            )
        if depth == len(parts) - 1:
            node[part] = value
        else:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child


def apply_overrides(data: dict, overrides: Iterable[str] | Mapping[str, Any]) -> dict:
    """Apply dotted overrides to a nested dict (in place) and return it."""
    pairs = overrides.items() if isinstance(overrides, Mapping) else parse_overrides(overrides)
    for key, value in pairs:
        _set_dotted(data, key, value)
    return data


def load_config(
    name_or_path: str | os.PathLike | None = None,
    overrides: Iterable[str] | Mapping[str, Any] = (),
) -> Config:
    """Load a YAML config (with ``_base_`` inheritance), apply dotted overrides and validate.

    Args:
        name_or_path: a YAML path or a shipped config name (``kinetics/c2d_r50_nl5``); ``None``
            starts from the defaults.
        overrides: ``["optim.lr=0.005", "train.batch_size=2"]`` or ``{"optim.lr": 0.005}``.

    Returns:
        The validated, frozen :class:`Config`.  ``name`` defaults to the file's stem and
        ``output_dir`` to ``runs/<name>``.
    """
    data: dict = {}
    if name_or_path is not None:
        path = resolve_config_path(name_or_path)
        data = _load_yaml_tree(path)
        data.setdefault("name", path.stem)
    apply_overrides(data, overrides)
    if data.get("name") and "output_dir" not in data:
        data["output_dir"] = f"runs/{data['name']}"
    return config_from_dict(data)
