"""Experiment configuration: nested frozen dataclasses, YAML files with ``_base_`` inheritance,
dotted command-line overrides and strict validation.

The defaults follow the training recipe of the paper ("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971), Section 4.1):
SGD with momentum 0.9, weight decay 1e-4, learning rate 0.01 decayed by 0.1 at 150k and 300k of
400k iterations, dropout 0.5 after global pooling, BatchNorm trained (the video task adds its
multi-view testing, :mod:`nlnet.engine.tasks.video.config`).  Section 5.1 (128-frame fine-tune, frozen BN, lr 0.0025) and Section 5.2
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

This module holds the public entry points; the section dataclasses are in
:mod:`nlnet.engine.config.schema`, the YAML files, ``_base_`` merging and dotted overrides in
:mod:`nlnet.engine.config.files` and the checks in :mod:`nlnet.engine.config.checks` (all names
importable from :mod:`nlnet.engine.config`).

Why hand-written dataclasses and not pydantic/OmegaConf: these modules hold the schema, the
``_base_`` merging and the dotted overrides with no dependency; a library would add one and still
need the same ``_base_`` and registry checks.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from nlnet.engine.config.checks import build_config_section, validate_config
from nlnet.engine.config.files import (
    apply_overrides,
    list_configs,
    load_yaml_tree,
    looks_like_path,
    migrate_moved_keys,
    parse_overrides,
    resolve_config_path,
    set_dotted,
)
from nlnet.engine.config.schema import (
    CORE_SECTIONS,
    Config,
    EvalConfig,
    ModelConfig,
    OptimConfig,
    TrainConfig,
    config_keys,
)
from nlnet.engine.config.sections import (
    build_data_section,
    plain,
    take_task_sections,
    task_class_or_none,
)
from nlnet.engine.config.tool_sections import (
    EMAConfig,
    HealthConfig,
    LoggingConfig,
    PreciseBNConfig,
)
from nlnet.engine.errors import ConfigError

__all__ = [
    "ModelConfig",
    "OptimConfig",
    "TrainConfig",
    "EvalConfig",
    "EMAConfig",
    "PreciseBNConfig",
    "LoggingConfig",
    "HealthConfig",
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


def config_from_dict(data: Mapping[str, Any] | None = None) -> Config:
    """Build and validate a :class:`Config` from a (possibly partial) nested mapping.

    Missing keys take their defaults; unknown keys raise :class:`ConfigError`.  ``data`` is
    read into the data-config class of the task (:func:`~nlnet.engine.config.sections.build_data_section`).
    """
    data = migrate_moved_keys(dict(data or {}))
    raw_data = data.pop("data", None)
    task = data.get("task", Config.task)
    keys = config_keys(task)
    if isinstance(task, str):
        own = take_task_sections(task, data, CORE_SECTIONS, [f.name for f in fields(Config)])
    else:
        own = {}
    unknown = [k for k in data if k not in keys]
    if unknown:  # the task's sections listed with the core keys (``sections`` is not a key)
        raise ConfigError(
            f"unknown config key {unknown[0]!r}; valid keys in config: {', '.join(sorted(keys))}"
        )
    cfg = build_config_section(Config, data, ())
    raw_data = _model_statistics(cfg, raw_data)
    core = {k: v for k, v in own.items() if k in CORE_SECTIONS}
    sections = {k: v for k, v in own.items() if k not in CORE_SECTIONS}
    data_section = build_data_section(cfg.task, raw_data)
    cfg = dataclasses.replace(cfg, data=data_section, sections=sections, **core)
    validate_config(cfg)
    return cfg


def _model_statistics(cfg: Config, raw: Any) -> Any:
    """A ``data`` mapping that sets none of the keys the task takes from the model (its class's
    ``data_from_model``, e.g. ``("mean", "std")``) gets the model's (``ModelCfg.mean``: ImageNet's
    for the paper's networks, Kinetics' for ``r3d_18``); an unregistered model keeps the
    section's defaults, and a mapping that sets some of them is the user's."""
    keys = getattr(task_class_or_none(cfg.task), "data_from_model", ())
    if not keys or not isinstance(raw, Mapping | None):
        return raw
    raw = dict(raw or {})
    if any(k in raw for k in keys):  # the user's statistics: never half of the model's
        return raw
    from nlnet.models.registry import model_facts

    try:
        facts = model_facts(cfg.model.name)
    except ValueError:
        return raw
    return {**{k: list(getattr(facts, k)) for k in keys}, **raw}


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """Return the configuration as plain nested dicts/lists/scalars (YAML- and torch-safe);
    the task's own sections are top-level keys, as in a YAML file."""
    out = plain(cfg)
    out.update(out.pop("sections"))
    return out


def replace(cfg: Config, **dotted: Any) -> Config:
    """Return a copy of ``cfg`` with dotted keys replaced: ``replace(cfg, **{"optim.lr": 0.1})``."""
    data = config_to_dict(cfg)
    for key, value in dotted.items():
        set_dotted(data, key, value)
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
    directory): ``output_dir``, ``data.root``, ``model.init`` (a file, not a torchvision
    weights name) and, when such files exist, the other ``data`` keys the task names as paths
    (its class's ``data_paths``: the video task's ``annotations``, ``classes``, ``cache``)."""
    data = plain(cfg.data) if dataclasses.is_dataclass(cfg.data) else dict(cfg.data)
    root = data.get("root")
    if isinstance(root, str) and root:
        data["root"] = str(Path(root).expanduser().resolve())
    base = Path(data["root"]) if data.get("root") else None
    keys = getattr(task_class_or_none(cfg.task), "data_paths", ("root",))
    for key in (k for k in keys if k != "root" and k in data):
        value = data[key]
        if isinstance(value, Mapping):  # per split
            data[key] = {k: _abs_if_exists(v, base) for k, v in value.items()}
        elif not (isinstance(value, str) and "{split}" in value):
            data[key] = _abs_if_exists(value, base)
    dotted: dict[str, Any] = {
        "data": data,
        "output_dir": str(Path(cfg.output_dir).expanduser().resolve()),
    }
    init = cfg.model.init
    source = init.get("from") if isinstance(init, Mapping) else init
    if isinstance(source, str) and source and looks_like_path(source):
        path = str(Path(source).expanduser().resolve())
        dotted["model.init"] = {**init, "from": path} if isinstance(init, Mapping) else path
    return replace(cfg, **dotted)


def save_config(cfg: Config, path: str | os.PathLike) -> Path:
    """Write the resolved configuration as YAML (the run directory's ``config.yaml``)."""
    from nlnet.data.atomic import atomic_path

    text = yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=None)
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def _dotted_keys(values: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``{"optim": {"max_iters": 5}, "train.seed": 1}`` -> ``["optim.max_iters", "train.seed"]``."""
    keys: list[str] = []
    for k, v in values.items():
        key = f"{prefix}{k}"
        keys += _dotted_keys(v, f"{key}.") if isinstance(v, Mapping) else [key]
    return keys


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
    overrides = overrides if isinstance(overrides, Mapping) else list(overrides)
    if name_or_path is not None:
        path = resolve_config_path(name_or_path)
        data = load_yaml_tree(path)
        data.setdefault("name", path.stem)
    apply_overrides(data, overrides)
    if data.get("name") and "output_dir" not in data:
        data["output_dir"] = f"runs/{data['name']}"
    cfg = config_from_dict(data)
    keys = _dotted_keys(overrides) if isinstance(overrides, Mapping) else [
        str(o).split("=", 1)[0].strip() for o in overrides]  # fmt: skip
    if "optim.max_iters" in keys and "optim.epochs" not in keys and cfg.optim.epochs > 0:
        warnings.warn(
            f"optim.max_iters={cfg.optim.max_iters} has no effect: optim.epochs="
            f"{cfg.optim.epochs} of the config decides the run's length (add optim.epochs=0 to "
            "train for optim.max_iters steps)",
            UserWarning,
            stacklevel=2,
        )
    return cfg
