"""Config sections as frozen dataclasses: dict <-> dataclass with strict keys and types, and
the typed ``data`` section each task declares (``Task.data_config``).

Used by :mod:`nlnet.engine.config`; a typo in any key of any section, the task's data section
included, is a :class:`~nlnet.engine.errors.ConfigError` that names the key and lists the valid
ones, raised when the config loads (before any run directory exists).  The data sections live
beside their datasets in :mod:`nlnet.data` and raise a plain ``ValueError`` naming the key;
:func:`data_section` is the one place that builds them (for the config loader and for a task
built directly from a mapping) and turns those into one-line config errors.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from nlnet.engine.errors import ConfigError

__all__ = [
    "build_section",
    "build_data_section",
    "coerce",
    "data_config_class",
    "data_section",
    "foreign_key_error",
    "plain",
    "task_class_or_none",
    "task_sections",
    "take_task_sections",
]


def type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce(value: Any, tp: Any, where: str) -> Any:
    """Check ``value`` against the annotation ``tp`` (a small subset of typing) and coerce."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(f"{where}: expected {type_name(tp)}, got {value!r}")
    if origin is tuple:
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            if isinstance(value, int) and not isinstance(value, bool):
                value = [value]
            else:
                raise ConfigError(f"{where}: expected a list, got {value!r}")
        (item_tp, *_rest) = typing.get_args(tp)
        return tuple(coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value))
    if tp is dict or origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return copy.deepcopy(dict(value))
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads "1e-4" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{where}: unsupported type {tp}")  # pragma: no cover


def build_section(
    cls: type,
    data: Mapping[str, Any],
    path: tuple[str, ...] = (),
    choices: Mapping[tuple[str, ...], tuple[str, ...]] | None = None,
) -> Any:
    """A frozen dataclass ``cls`` from a mapping: unknown keys (listing the valid ones), wrong
    types and values outside ``choices`` (by dotted path) are :class:`ConfigError`\\ s."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    where = ".".join(path) if path else "config"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {data!r}")
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = ".".join((*path, str(unknown[0])))
        raise ConfigError(
            f"unknown config key {key!r}; valid keys in {where}: {', '.join(sorted(fields))}"
        )
    kwargs = {}
    for name, value in data.items():
        tp = hints[name]
        sub_path = (*path, name)
        if dataclasses.is_dataclass(tp):
            kwargs[name] = build_section(tp, value or {}, sub_path, choices)
        else:
            kwargs[name] = coerce(value, tp, ".".join(sub_path))
        allowed = (choices or {}).get(sub_path)
        if allowed is not None and kwargs[name] not in allowed:
            raise ConfigError(
                f"{'.'.join(sub_path)}: expected one of {', '.join(allowed)}, got {value!r}"
            )
    return cls(**kwargs)


def plain(value: Any) -> Any:
    """Plain dicts/lists/scalars of (nested) dataclasses, mappings and sequences."""
    if dataclasses.is_dataclass(value):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def task_class_or_none(task: str) -> type | None:
    """The class of the registered task ``task`` (a task built by a plain factory function:
    ``None``); an unknown name is a :class:`ConfigError` listing the known ones."""
    from nlnet.engine.tasks import task_class

    try:
        return task_class(task)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None


def data_config_class(task: str) -> type | None:
    """The typed ``data`` class the task ``task`` declares (``None``: free-form dict)."""
    return getattr(task_class_or_none(task), "data_config", None)


def task_sections(task: str) -> dict[str, type]:
    """The config sections the task ``task`` owns (``Task.sections``: name -> frozen dataclass;
    a name of a core section, such as ``eval``, extends it with a subclass)."""
    return dict(getattr(task_class_or_none(task), "sections", None) or {})


def _other_owners(task: str, name: str) -> list[tuple[str, type]]:
    """``(task, class)`` of the other registered tasks that declare the section ``name``."""
    from nlnet.engine.tasks import task_names

    out = []
    for other in task_names():
        if other == task:
            continue
        try:
            cls = task_sections(other).get(name)
        except (ImportError, ConfigError):  # a plugin task that cannot load: not this config's
            continue
        if cls is not None:
            out.append((other, cls))
    return out


def foreign_key_error(task: str, path: tuple[str, ...]) -> ConfigError | None:
    """The error for the dotted key ``path`` (a section, or a key of one) that is not in the
    schema of ``task`` but another task declares; ``None`` if no task does."""
    for other, cls in _other_owners(task, path[0]):
        if len(path) == 1 or path[1] in {f.name for f in dataclasses.fields(cls)}:
            return _foreign_error(task, ".".join(path[:2]), other)
    return None


def _foreign_error(task: str, where: str, other: str) -> ConfigError:
    mine = ", ".join(sorted(task_sections(task))) or "none"
    what = (
        f"a key of the {other} task's {where.split('.')[0]} section"
        if "." in where
        else (f"a section of the {other} task")
    )
    return ConfigError(
        f"{where}: {what}, not of this config's task {task!r} (its own sections: {mine})"
    )


def _drop_foreign_section(task: str, name: str, value: Any) -> bool:
    """A top-level section of another task: ``True`` (drop it) when it holds that task's
    defaults (a config written when every config had every section), a one-line
    :class:`ConfigError` naming both tasks when it sets anything, ``False`` when no other task
    declares it (the schema's "unknown config key" error follows)."""
    value = {} if value is None else value  # ``augment:`` with nothing under it
    owners = _other_owners(task, name)
    if not owners:
        return False
    other, cls = owners[0]  # the first task (by name) that declares it
    defaults = plain(cls())
    if isinstance(value, Mapping) and all(
        k in defaults and defaults[k] == plain(v) for k, v in value.items()
    ):
        return True
    raise _foreign_error(task, name, other)


def _foreign_keys(task: str, name: str, value: Mapping[str, Any], core: type) -> set[str]:
    """The keys of the core section ``name`` that another task's extension of it declares (the
    video task's test views in ``eval``), to drop: at that task's defaults; set: a one-line
    :class:`ConfigError` naming both tasks.  Keys nobody declares stay (an unknown key)."""
    own = {f.name for f in dataclasses.fields(core)}
    extra = {k: v for k, v in value.items() if k not in own}
    drop: set[str] = set()
    for other, cls in _other_owners(task, name) if extra else ():
        defaults = plain(cls())
        for key in set(extra) & set(defaults) - drop:
            if defaults[key] != plain(extra[key]):
                raise _foreign_error(task, f"{name}.{key}", other)
            drop.add(key)
    return drop


def take_task_sections(
    task: str, data: dict, core: Mapping[str, type], keys: Collection[str]
) -> dict[str, Any]:
    """Pop the sections of ``task`` from the top-level config mapping ``data`` and build them;
    another task's section is dropped at its defaults or refused.

    Args:
        task: the config's task.
        data: the top-level mapping (changed in place: the task's sections and the foreign
            sections at their defaults removed; a core section's foreign keys removed).
        core: the core sections' classes by name.
        keys: every top-level key of the core schema (sections and plain values).

    Returns:
        The built sections by name (a core section the task extends, e.g. ``eval``, included).
    """
    own = task_sections(task)
    out = {name: build_section(cls, data.pop(name) or {}, (name,))
           for name, cls in own.items() if name in data}  # fmt: skip
    for name in [k for k in data if k not in keys]:
        if _drop_foreign_section(task, name, data[name]):
            data.pop(name)
    for name, cls in core.items():
        value = data.get(name)
        if name not in own and isinstance(value, Mapping):
            if drop := _foreign_keys(task, name, value, cls):
                data[name] = {k: v for k, v in value.items() if k not in drop}
    return out


def build_data_section(task: str, raw: Any) -> Any:
    """The ``data`` section as the task's data-config dataclass: unknown keys, wrong types and
    bad values are config errors naming the key (before any run directory exists)."""
    if dataclasses.is_dataclass(raw) and not isinstance(raw, type):
        raw = plain(raw)
    raw = dict(raw or {})
    cls = data_config_class(task)
    if cls is None:
        return copy.deepcopy(raw)
    return data_section(cls, raw)


def data_section(cls: type, value: Any) -> Any:
    """The typed ``data`` section ``cls`` (a frozen dataclass beside its dataset in
    :mod:`nlnet.data`) from an instance of it (returned as is) or from a mapping of its keys
    (``None``: the defaults).

    The one place where a task's data section is built: an unknown key (the valid ones listed),
    a wrong type or a ``ValueError`` of the class's own checks (``data.<key>: expected ...``)
    becomes a one-line :class:`ConfigError`.
    """
    if isinstance(value, cls):
        return value
    try:
        return build_section(cls, value or {}, ("data",))
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(str(exc).splitlines()[0]) from None
