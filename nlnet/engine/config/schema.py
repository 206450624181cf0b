"""The section dataclasses of an experiment configuration (:class:`Config` and its parts).

Frozen dataclasses whose defaults follow the training recipe of Wang et al., CVPR 2018,
Sec. 4.1 (SGD, momentum 0.9, weight decay 1e-4, dropout 0.5). Reading them from
YAML is in :mod:`nlnet.engine.config.files`, their checks in :mod:`nlnet.engine.config.checks`
and the public entry points in :mod:`nlnet.engine.config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from nlnet.engine.config.tool_sections import (
    EMAConfig,
    HealthConfig,
    LoggingConfig,
    PreciseBNConfig,
)


@dataclass(frozen=True)
class ModelConfig:
    """Which network to build (passed to ``nlnet.models.create_model``).

    Attributes:
        name: registry name, e.g. ``c2d_r50_nl5`` (Table 2b: 5 non-local blocks).
        num_classes: classifier width (400 for Kinetics, 157 for Charades); ``null`` (the
            default): the number of classes of the training data.
        init: where the model's weights start from, one key for every source
            (:func:`nlnet.engine.modeling.build_model`): a torchvision weights name
            (``IMAGENET1K_V1``, read from ``$TORCH_HOME/hub/checkpoints``: ImageNet 2D weights
            copied or inflated into a video model, Section 4.1; ViT/Swin/ResNet weights; a
            detector's backbone), a file of weights (torchvision layout or the model's own),
            or a checkpoint written by ``nlnet train`` (e.g. the 32-frame model for the
            128-frame fine-tune, Section 5.1, or a Kinetics model for Charades, Section 5.2);
            ``{from: SOURCE, reset_head: true}`` keeps a fresh classifier even where the
            checkpoint's has the same size. A classifier of another size always stays fresh
            for weights and needs ``reset_head`` for a checkpoint. ``null``: the builder's own
            initialisation. Formerly ``pretrained_2d``, ``weights``, ``pretrained`` and
            ``reset_head`` (still read, with a ``DeprecationWarning``).
        head_names: parameter-name prefixes of the classifier; ``null`` (default): the model's
            own (``ModelCfg.classifier`` of the registry, e.g. ``fc`` or ``head``; for a
            network of one's own, what its ``get_classifier()`` returns, else its last
            ``nn.Linear``).
        dropout: dropout ratio before the classifier (0.5 after global pooling, Section 4.1);
            passed to models that have one (not the dense models).  Formerly ``train.dropout``
            (still read, with a ``DeprecationWarning``).
        overrides: extra keyword arguments for ``create_model`` (free-form).
    """

    name: str = "c2d_r50"
    num_classes: int | None = None
    init: str | dict | None = None
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
        non_local_lr_mult: the rate of the non-local blocks' parameters relative to the rest
            (1.0: the same; docs/nonlocal.md, "When the block stays closed").
        implementation: PyTorch's kernel for the update: ``default`` (PyTorch's choice),
            ``fused`` (one kernel for all parameters: on the CPU half the for-loop's time,
            equal to float rounding), ``foreach`` or ``for-loop``.
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
    non_local_lr_mult: float = 1.0
    implementation: str = "default"


@dataclass(frozen=True)
class TrainConfig:
    """The training loop.

    Attributes:
        batch_size: training items per process (per GPU) and micro-batch (8 per GPU in
            Section 4.1).
        accum_steps: micro-batches accumulated per optimizer step.
        amp: ``none`` | ``bf16`` | ``fp16`` (mixed precision, CUDA only; ignored on the CPU).
        freeze_bn: BatchNorm in eval mode with frozen affine parameters (Section 5.1).
        freeze: parameter-name prefixes whose weights stay fixed, e.g. ``[encoder., bottleneck.]``
            for a pre-trained U-Net encoder (detectron2's ``FREEZE_AT``); a non-local block
            under such a prefix that ``model.init`` does not initialise still trains (it
            starts as the identity).
        sync_bn: convert BatchNorm to SyncBatchNorm under DDP on CUDA.
        loss: ``ce`` (softmax cross-entropy) or ``bce`` (per-category sigmoid, Section 5.2).
        seed: seed of model init, data order and augmentation.
        workers: DataLoader worker processes (decoding overlaps the training steps), or
            ``auto``: chosen epoch by epoch from the measured waiting for data
            (:class:`nlnet.data.loader.WorkerTuner`; the count does not change the numbers of data
            that decodes).
        prefetch: batches each worker keeps ready (``prefetch_factor``; ignored without workers).
        log_every: iterations between metric records.
        ckpt_every: iterations between checkpoints (0: only at the end).
        eval_every: iterations between validation runs (0: only at the end, if ``data.val`` is set).
        eval_times: with ``eval_every: 0``, validate this many times spread evenly over the run
            (the last one at the end), whatever its length (0: only at the end).
        stop_after: stop this invocation after that many iterations, with a checkpoint, as if the
            job had been pre-empted (0: off); ``--resume`` continues exactly.
        device: ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``.
        split: dataset split to train on.
        val_split: split to validate on every ``eval_every`` iterations and at the end (the
            task's evaluation); ``null``: no validation while training.
        deterministic: ask PyTorch for deterministic kernels (else cuDNN benchmark mode on CUDA).
        progress: a tqdm progress bar (rank 0 only); ``null`` (default): only when stderr is a
            terminal, else one log line per ``log_every`` iterations.
        channels_last: keep the model's weights (and so its activations) channels-last
            (``torch.channels_last_3d`` for a video model, ``channels_last`` for an image
            model): the same numbers within float rounding, a faster layout for some kernels
            (docs/training.md, "Speed").
        fold_frozen_bn: with ``freeze_bn``, compute each frozen BatchNorm inside the
            convolution before it (``conv(x, W * s) + t``; :mod:`nlnet.engine.folding`): the
            same numbers within float rounding, one pass over each activation less; weights,
            gradients and checkpoints as without it.
        subsample_1x1: compute each strided 1x1 convolution (a ResNet's projection shortcuts)
            as a subsampling and a 1x1 convolution (:mod:`nlnet.engine.subsampling`): the same
            numbers within float rounding, 2-2.7x faster for those convolutions on the CPU.
        compile: ``none`` (default) or a ``torch.compile`` backend for the training forward
            (``inductor``, the default backend; ``aot_eager``): the model's code compiled once
            per input shape and reused for every later step and epoch.
    """

    batch_size: int = 8
    accum_steps: int = 1
    amp: str = "none"
    freeze_bn: bool = False
    freeze: tuple[str, ...] = ()
    sync_bn: bool = True
    loss: str = "ce"
    seed: int = 0
    workers: int | str = 4
    prefetch: int = 2
    log_every: int = 20
    ckpt_every: int = 1000
    eval_every: int = 0
    eval_times: int = 0
    stop_after: int = 0
    device: str = "auto"
    split: str = "train"
    val_split: str | None = None
    deterministic: bool = False
    progress: bool | None = None
    channels_last: bool = False
    fold_frozen_bn: bool = False
    subsample_1x1: bool = False
    compile: str = "none"


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation: the test loader and the split ``nlnet eval`` reads.  A task may extend it
    (the video task's :class:`~nlnet.engine.tasks.video.VideoEvalConfig` adds the test views).

    Attributes:
        batch_size: test items per forward pass.
        workers: DataLoader worker processes.
        split: dataset split used by ``nlnet eval``.
    """

    batch_size: int = 1
    workers: int = 2
    split: str = "val"


@dataclass(frozen=True)
class Config:
    """A full experiment: the core sections every task has, and the task's own sections.

    ``data`` is the typed data section of the task named by ``task`` (the task class's
    ``data_config``, e.g. :class:`nlnet.data.video.config.VideoDataConfig`), read when the config
    loads; a task without a ``data_config`` keeps a plain dict.  The task's own sections (its
    class's ``sections``: the video task's ``augment`` and ``multigrid``) are in ``sections``
    and read as attributes (``cfg.augment``); in YAML they are top-level keys like the others.
    A task may also extend a core section (the video task's ``eval`` adds its test views).

    Attributes:
        model: the network (:class:`ModelConfig`).
        data: the typed data section of the task.
        optim: optimizer and schedule (:class:`OptimConfig`).
        train: the training loop (:class:`TrainConfig`).
        eval: evaluation (:class:`EvalConfig`, or the task's extension of it).
        ema: an exponential moving average of the weights, evaluated beside them.
        precise_bn: BatchNorm statistics recomputed over training batches before evaluation.
        logging: TensorBoard and Weights & Biases beside ``metrics.jsonl``.
        health: block health of the non-local blocks at every validation (on by default).
        output_dir: the run directory (checkpoints, metrics, curves, summary).
        name: a free label of the experiment.
        class_names: the output class names stored in checkpoints (default: the data's classes).
        task: the task that trains and evaluates (``video_classification``, ``segmentation``,
            ``detection``, ``super_resolution``, ``image_classification``).
        sections: the task's own sections by name (filled with their defaults).
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    data: Any = field(default_factory=dict)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    ema: EMAConfig = field(default_factory=EMAConfig)
    precise_bn: PreciseBNConfig = field(default_factory=PreciseBNConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    output_dir: str = "runs/default"
    name: str = ""
    class_names: tuple[str, ...] | None = None
    task: str = "video_classification"
    sections: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """The task's sections at their defaults where not given, another task's dropped (a
        ``dataclasses.replace`` of ``task``); a core section the task extends (``eval``) read
        into the task's class, its values kept."""
        from nlnet.engine.config.sections import task_sections
        from nlnet.engine.errors import ConfigError

        try:
            declared = task_sections(self.task)
        except ConfigError:
            return  # an unknown task: the loader names it
        sections = {k: v for k, v in self.sections.items() if k in declared}  # another task's: gone
        if "eval" not in declared and type(self.eval) is not EvalConfig:  # another task's eval
            object.__setattr__(self, "eval", _as(EvalConfig, self.eval))
        for name, cls in declared.items():
            if name in CORE_SECTIONS:
                if not isinstance(getattr(self, name), cls):
                    object.__setattr__(self, name, _as(cls, getattr(self, name)))
            elif name not in sections:
                sections[name] = cls()
        object.__setattr__(self, "sections", sections)

    def __getattr__(self, name: str) -> Any:
        sections = self.__dict__.get("sections") or {}
        if name in sections:
            return sections[name]
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"Config has no section {name!r}: not a section of the task "
            f"{self.__dict__.get('task')!r} (its own: {', '.join(sorted(sections)) or 'none'})"
        )


def _as(cls: type, value: Any) -> Any:
    """``value`` (a section) as ``cls``, a subclass or base of its class: the fields both have."""
    names = {f.name for f in fields(cls)}
    return cls(**{f.name: getattr(value, f.name) for f in fields(value) if f.name in names})


def config_keys(task: Any) -> list[str]:
    """The top-level keys of a config of ``task``: the core ones and the task's own sections
    (``sections`` itself is not a key); an unknown task: the core ones."""
    from nlnet.engine.config.sections import task_sections
    from nlnet.engine.errors import ConfigError

    core = [f.name for f in fields(Config) if f.name != "sections"]
    try:
        own = task_sections(task) if isinstance(task, str) else {}
    except ConfigError:
        own = {}
    return core + [k for k in own if k not in core]


#: The sections every config has, by name (a task may extend one with a subclass).
CORE_SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "optim": OptimConfig,
    "train": TrainConfig,
    "eval": EvalConfig,
    "ema": EMAConfig,
    "precise_bn": PreciseBNConfig,
    "logging": LoggingConfig,
    "health": HealthConfig,
}


__all__ = [
    "CORE_SECTIONS",
    "Config",
    "config_keys",
    "EvalConfig",
    "ModelConfig",
    "OptimConfig",
    "TrainConfig",
]
