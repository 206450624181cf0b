"""Validation of an experiment configuration: numbers in range, choices, model overrides.

Every check raises a one-line :class:`~nlnet.engine.errors.ConfigError` naming the dotted key
and what was expected (a learning rate, weight decay or momentum that is not finite or out of
range; ``model.overrides`` tried on a ``meta``-device build of the registered model; a typed
``data`` section checked by its task).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from nlnet.engine.config.schema import Config, ModelConfig, OptimConfig
from nlnet.engine.config.sections import build_section, task_class_or_none
from nlnet.engine.errors import ConfigError

_CHOICES = {
    ("train", "amp"): ("none", "bf16", "fp16"),
    ("train", "loss"): ("ce", "bce"),
    ("train", "compile"): ("none", "inductor", "aot_eager", "eager"),
    ("optim", "optimizer"): ("sgd", "adamw"),
    ("optim", "implementation"): ("default", "fused", "foreach", "for-loop"),
    ("optim", "schedule"): ("multistep", "onecycle", "cosine", "poly"),
}


# --------------------------------------------------------------------------------------------
# dict <-> dataclass
# --------------------------------------------------------------------------------------------
def build_config_section(cls: type, data: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """A section dataclass from a mapping, with the config's choices (one-line errors)."""
    return build_section(cls, data, path, _CHOICES)


def check_number(where: str, value: float | None, low: float, high: float = math.inf,
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
    check_number("optim.lr", o.lr, 0, low_open=True)
    check_number("optim.momentum", o.momentum, 0, 1)
    check_number("optim.weight_decay", o.weight_decay, 0)
    check_number("optim.weight_decay_bn", o.weight_decay_bn, 0)
    check_number("optim.gamma", o.gamma, 0, 1, low_open=True, high_open=False)
    check_number("optim.warmup_factor", o.warmup_factor, 0, 1, low_open=True, high_open=False)
    check_number("optim.clip_grad_norm", o.clip_grad_norm, 0)
    check_number("optim.pct_start", o.pct_start, 0, 1, low_open=True)
    check_number("optim.max_iters", o.max_iters, 1)
    check_number("optim.epochs", o.epochs, 0)
    check_number("optim.warmup_iters", o.warmup_iters, 0)
    check_number("optim.min_lr", o.min_lr, 0)
    check_number("optim.power", o.power, 0, low_open=True)
    check_number("optim.layer_decay", o.layer_decay, 0, 1, low_open=True, high_open=False)
    check_number("optim.non_local_lr_mult", o.non_local_lr_mult, 0, low_open=True)
    if list(o.steps) != sorted(o.steps):
        raise ConfigError(f"optim.steps: expected increasing iterations, got {list(o.steps)}")
    if o.schedule == "multistep" and o.steps and o.steps[0] < o.warmup_iters:
        raise ConfigError(
            f"optim.steps: the first decay ({o.steps[0]}) falls inside the warm-up "
            f"(optim.warmup_iters={o.warmup_iters})"
        )


def _validate_tools(cfg: Config) -> None:
    """EMA, precise BN and block health settings."""
    check_number("ema.decay", cfg.ema.decay, 0, 1)
    check_number("precise_bn.batches", cfg.precise_bn.batches, 0)
    h = cfg.health
    check_number("health.batches", h.batches, 1)
    for key in ("warn_after", "identity_below", "uniform_above"):
        check_number(f"health.{key}", getattr(h, key), 0, 1, high_open=False)


def validate_config(cfg: Config) -> None:
    """Check the numbers, choices and model overrides of a built config (one-line errors)."""
    check_number("model.num_classes", cfg.model.num_classes, 1)
    _validate_optim(cfg.optim)
    _validate_tools(cfg)
    t = cfg.train
    for key in ("batch_size", "accum_steps", "log_every", "prefetch"):
        check_number(f"train.{key}", getattr(t, key), 1)
    if isinstance(t.workers, str) and t.workers != "auto":
        raise ConfigError(f"train.workers: expected an int >= 0 or 'auto', got {t.workers!r}")
    for key in ("workers", "ckpt_every", "eval_every", "eval_times", "stop_after"):
        if getattr(t, key) != "auto":
            check_number(f"train.{key}", getattr(t, key), 0)
    check_number("model.dropout", cfg.model.dropout, 0, 1)
    check_number("eval.batch_size", cfg.eval.batch_size, 1)
    check_number("eval.workers", cfg.eval.workers, 0)
    if t.fold_frozen_bn and not t.freeze_bn:
        raise ConfigError(
            "train.fold_frozen_bn: folds frozen BatchNorm layers; set train.freeze_bn: true too"
        )
    n = cfg.model.num_classes
    if cfg.class_names is not None and n is not None and len(cfg.class_names) != n:
        raise ConfigError(
            f"class_names: expected {n} names (model.num_classes), got {len(cfg.class_names)}"
        )
    _validate_model(cfg.model)
    task_checks = getattr(task_class_or_none(cfg.task), "check_config", None)
    if task_checks is not None:  # the task's own sections (e.g. the video task's augment)
        task_checks(cfg)


def _validate_init(init: Any) -> None:
    """``model.init``: a source string, or ``{from: SOURCE, reset_head: BOOL}`` whose source is
    a file or a checkpoint (``{reset_head: true}`` alone: a base config's half, no source)."""
    from nlnet.engine.config.files import looks_like_path

    if init is None or (isinstance(init, str) and init):
        return
    if isinstance(init, Mapping):
        extra = sorted(set(init) - {"from", "reset_head"})
        source, reset = init.get("from"), init.get("reset_head", False)
        if not extra and isinstance(reset, bool) and (source is None or isinstance(source, str)):
            if reset and source and not looks_like_path(source):
                raise ConfigError(
                    f"model.init: reset_head applies to a checkpoint or a file; {source!r} is a "
                    "weights name, whose classifier is kept fresh when its size differs"
                )
            return
    raise ConfigError(
        f"model.init: expected a torchvision weights name, a file or a checkpoint, or "
        f"{{from: SOURCE, reset_head: true}}; got {init!r}"
    )


def _validate_model(m: ModelConfig) -> None:
    """Read ``init``, then ``block`` and ``placement`` with their typed readers (for any model),
    then trial-build a registered model on the meta device: unknown/bad overrides are errors."""
    _validate_init(m.init)
    if not m.overrides:
        return
    from nlnet.models.placement import BlockOptions, Placement

    try:
        if m.overrides.get("block") is not None:
            BlockOptions.of(m.overrides["block"])
        if m.overrides.get("placement") is not None:
            Placement.of(m.overrides["placement"])
    except ValueError as exc:
        raise ConfigError(f"model.overrides for {m.name!r}: {exc}") from None
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
