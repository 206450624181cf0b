"""YAML config files: named configs, ``_base_`` inheritance, dotted overrides, moved keys.

A YAML file may name a base file (or a list of them) with ``_base_``; the bases are merged first
(dictionaries recursively, everything else replaced), then the file, then the command-line
overrides (``optim.lr=0.005``, values parsed as YAML scalars). An override naming a key outside
the schema of :mod:`nlnet.engine.config.schema` is an error naming the valid keys.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import typing
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from nlnet.engine.config.schema import Config, config_keys
from nlnet.engine.config.sections import foreign_key_error, task_sections
from nlnet.engine.errors import ConfigError

_FLOAT_RE = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
_FREE_FORM = {("data",), ("model", "overrides")}


#: Keys that moved: old dotted path -> new dotted path (still read, with a DeprecationWarning).
MOVED_KEYS: dict[str, str] = {"train.dropout": "model.dropout"}

#: Task names of earlier releases -> the name (one vocabulary with ``ModelCfg.task``).
RENAMED_TASKS: dict[str, str] = {"image": "image_classification"}

#: Keys that are gone: old dotted path -> what replaces it (a config that sets one is an error
#: saying so, not an "unknown key").
REMOVED_KEYS: dict[str, str] = {
    "data.test_clips": "set eval.clips instead (the engine passes it on)",
    "data.test_crops": "set eval.crops instead (the engine passes it on)",
    "data.seed": "every random choice of a training item (clip window, scale, crop, flip) now "
    "derives from train.seed, the epoch and the item's index; delete data.seed (or set train.seed)",
}


#: The model's initialisation keys of earlier releases, read into ``model.init``.
OLD_INIT_KEYS: tuple[str, ...] = ("pretrained_2d", "weights", "pretrained", "reset_head")


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


def _old_init(old: Mapping[str, Any]) -> Any:
    """``model.init`` from the keys of earlier releases in one mapping: ``pretrained`` (a
    checkpoint, ``{from: X}``, with ``reset_head``) over ``weights`` over ``pretrained_2d``, the
    order in which they used to be applied (the last one loaded won)."""
    if old.get("pretrained"):
        init = {"from": old["pretrained"]}
        return {**init, "reset_head": True} if old.get("reset_head") else init
    for key in ("weights", "pretrained_2d"):
        if old.get(key):
            return old[key]
    if "reset_head" in old:  # a base config's half: the checkpoint comes from another file
        return {"reset_head": bool(old["reset_head"])}
    return None


def merge_init(model: dict, init: Any) -> None:
    """Set ``model["init"]``, merging two mappings (``{reset_head: true}`` of a base and
    ``{from: X}`` of a child) as ``_base_`` merging does."""
    current = model.get("init")
    if isinstance(current, Mapping) and isinstance(init, Mapping):
        model["init"] = {**current, **init}
    else:
        model["init"] = init


def migrate_init_keys(data: dict) -> dict:
    """``model.pretrained_2d`` / ``weights`` / ``pretrained`` (+ ``reset_head``) of earlier
    releases in one config mapping (a file before its ``_base_`` merge, a saved config) ->
    ``model.init`` (with a DeprecationWarning).

    Raises:
        ConfigError: the same mapping sets ``model.init`` too (the model starts from one source).
    """
    model = data.get("model")
    if not isinstance(model, Mapping) or not any(k in model for k in OLD_INIT_KEYS):
        return data
    model = dict(model)
    old = {k: model.pop(k) for k in OLD_INIT_KEYS if k in model}
    warnings.warn(f"config keys {', '.join('model.' + k for k in old)} are deprecated; use "
                  "model.init", DeprecationWarning, stacklevel=4)  # fmt: skip
    init = _old_init(old)
    if model.get("init") is not None and init is not None:
        raise ConfigError(f"model.init and {', '.join('model.' + k for k in old)}: a model "
                          "starts from one source; set model.init only")  # fmt: skip
    if init is not None:
        merge_init(model, init)
    data["model"] = model
    return data


def _moved(key: str) -> str:
    new = MOVED_KEYS.get(key)
    if new is None:
        return key
    warnings.warn(f"config key {key!r} is deprecated; use {new!r}", DeprecationWarning,
                  stacklevel=4)  # fmt: skip
    return new


def migrate_moved_keys(data: dict) -> dict:
    """Move deprecated keys (:data:`MOVED_KEYS`) of a nested config dict to their new place.

    Raises:
        ConfigError: a key of :data:`REMOVED_KEYS` is set (the message says what replaced it).
    """
    migrate_init_keys(data)
    task = data.get("task")
    if isinstance(task, str) and task in RENAMED_TASKS:
        new = RENAMED_TASKS[task]
        warnings.warn(f"task {task!r} is deprecated; use {new!r}", DeprecationWarning,
                      stacklevel=3)  # fmt: skip
        data["task"] = new
    for old, instead in REMOVED_KEYS.items():
        section, key = old.split(".")
        if isinstance(data.get(section), Mapping) and key in data[section]:
            raise ConfigError(f"{old} was removed: {instead}")
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
    import difflib

    shipped = list_configs()
    close = difflib.get_close_matches(str(name_or_path), shipped, n=3, cutoff=0.6)
    hint = (f"did you mean {', '.join(close)}? " if close else "") + (
        "`nlnet train --list-configs` or docs/training.md list the shipped configs")  # fmt: skip
    raise FileNotFoundError(
        f"config {str(name_or_path)!r} not found (as a path or under "
        f"{', '.join(str(d) for d in _config_dirs()) or 'configs/'}); {hint}"
    )


def _deep_merge(base: dict, update: Mapping) -> dict:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(dict(out[key]), value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_yaml_tree(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """A YAML config file with its ``_base_`` files merged first (a cycle is an error)."""
    if path in seen:
        chain = " -> ".join(str(p) for p in (*seen, path))
        raise ConfigError(f"_base_ cycle: {chain}")
    with open(path) as f:
        try:
            data = yaml.safe_load(f) or {}
        except yaml.YAMLError as exc:  # one line: where and what, not a parser traceback
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else path
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError(f"{where}: not valid YAML ({problem})") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    data = migrate_init_keys(dict(data))
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
        merged = _deep_merge(merged, load_yaml_tree(base_path, (*seen, path)))
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


def _schema_keys(path: tuple[str, ...], task: Any) -> list[str] | None:
    """Valid keys at ``path`` in the schema of a config of ``task`` (the core sections and the
    task's own), or ``None`` for free-form sections and an unknown task."""
    if any(path[: len(p)] == p for p in _FREE_FORM):
        return None
    try:
        own = task_sections(task) if isinstance(task, str) else {}
    except ConfigError:
        return None  # the loader names the unknown task
    if not path:
        return config_keys(task)
    cls: Any = own.get(path[0]) or typing.get_type_hints(Config).get(path[0])
    for part in path[1:]:
        if not dataclasses.is_dataclass(cls):
            return []
        cls = typing.get_type_hints(cls).get(part)
    return [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else []


def set_dotted(data: dict, key: str, value: Any) -> None:
    """Write ``value`` at the dotted ``key`` of a nested dict (a moved key at its new place)."""
    parts = _moved(key).split(".")
    if len(parts) == 2 and parts[0] == "model" and parts[1] in OLD_INIT_KEYS:
        model = data.setdefault("model", {})
        init = migrate_init_keys({"model": {parts[1]: value}})["model"].get("init")
        if init is not None or parts[1] != "reset_head":
            merge_init(model, init)
        return
    task = data.get("task", Config.task)
    node, task = data, RENAMED_TASKS.get(task, task) if isinstance(task, str) else None
    for depth, part in enumerate(parts):
        valid = _schema_keys(tuple(parts[:depth]), task)
        if valid is not None and part not in valid:
            other = foreign_key_error(task, tuple(parts[: depth + 1])) if depth < 2 else None
            if other is not None and isinstance(task, str):
                raise other
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
        set_dotted(data, key, value)
    return data
