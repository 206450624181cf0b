"""One recipe change of a demo's settings, ``KEY=VALUE``: how recipes are screened.

Every demo keeps its sizes and recipe in one dataclass (``DemoSettings`` of the video demo,
``UNetDemoSettings``, ``SRDemoSettings``); ``nlnet demo --set KEY=VALUE`` and
``benchmarks/dense_seeds.py --set KEY=VALUE`` change one field of it through
:func:`with_change`, so that a candidate recipe is screened by the command itself (docs/demo.md,
Protocol). The value is read as YAML (``3e-3``, ``8000``, ``[0, 1, 2]``, ``{bias: true}``,
``null``) and checked against the field's current type; ``PART.KEY`` changes a field of a nested
settings dataclass (``task.num_train=8000``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any, TypeVar

__all__ = ["dense_settings", "with_change"]

S = TypeVar("S")


def _typed(old: Any, value: Any, text: str) -> Any:
    """``value`` in the type of ``old`` (a list for a tuple, a number for a float); a
    ``ValueError`` when it has another type (``None`` on either side passes)."""
    if isinstance(old, tuple) and isinstance(value, list):
        value = tuple(value)
    elif isinstance(old, float) and not isinstance(value, bool):
        try:  # YAML 1.1 reads "3e-3" (no dot) as a string
            value = float(value)
        except (TypeError, ValueError):
            pass
    if old is not None and value is not None and type(value) is not type(old):
        raise ValueError(f"expected {type(old).__name__}, got {text.strip()!r}")
    return value


def with_change(settings: S, item: str, *, fixed: Collection[str] = ()) -> S:
    """A copy of the dataclass ``settings`` with one ``KEY=VALUE`` change.

    Args:
        settings: a dataclass instance (frozen or not); left unchanged.
        item: ``KEY=VALUE`` or ``PART.KEY=VALUE`` (a field of the dataclass in field ``PART``).
        fixed: keys (dotted for nested ones) that are not recipe settings (e.g. a seed).

    Raises:
        ValueError: not ``KEY=VALUE``; an unknown or fixed key (the message lists the valid
            ones); a value of another type; or whatever the dataclass's own checks raise.
    """
    import yaml

    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ValueError("expected KEY=VALUE, e.g. lr=3e-3 or task.num_train=8000")
    part, dot, name = key.rpartition(".")
    target = getattr(settings, part, None) if dot else settings
    names = [] if target is None or not dataclasses.is_dataclass(target) else [
        f.name for f in dataclasses.fields(target)
    ]  # fmt: skip
    if name not in names or key in fixed:
        where = f"{part}." if dot else ""
        valid = [where + f for f in names if where + f not in fixed]
        raise ValueError(f"unknown key {key!r}; valid: {', '.join(valid)}")
    value = _typed(getattr(target, name), yaml.safe_load(text), text)
    if dot:
        return dataclasses.replace(settings, **{part: dataclasses.replace(target, **{name: value})})  # type: ignore[type-var]
    return dataclasses.replace(settings, **{name: value})  # type: ignore[type-var]


def dense_settings(task: str, changes: Collection[str] = (), quick: bool = False) -> Any:
    """The settings of a dense demo (``segmentation``, ``unet``, ``super-resolution``; quick or
    not) with ``--set KEY=VALUE`` changes, one after the other (:func:`with_change`): the one
    reading of ``--set`` for ``nlnet demo`` and ``benchmarks/dense_seeds.py``.

    Raises:
        ValueError: one line naming ``--set``: not ``KEY=VALUE``, an unknown key, a bad value.
    """
    if task == "segmentation":
        from nlnet.demo.dense import SegDemoSettings as Settings
    elif task == "super-resolution":
        from nlnet.demo.sr import SRDemoSettings as Settings  # type: ignore[assignment]
    elif task == "unet":
        from nlnet.demo.dense import UNetDemoSettings as Settings  # type: ignore[assignment]
    else:
        raise ValueError(f"task: expected segmentation, unet or super-resolution, got {task!r}")
    settings = Settings.quick() if quick else Settings()
    for change in changes:
        try:
            settings = with_change(settings, change)
        except ValueError as exc:
            raise ValueError(f"--set {change}: {exc}") from None
    return settings
