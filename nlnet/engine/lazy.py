"""Lazy package namespaces: a package ``__init__`` names its public objects and the module
that defines each, and imports that module only when the name is first used (PEP 562), so
``import nlnet.engine`` (and ``nlnet --help``) imports no torch."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package`` whose name ``n`` lives in the
    submodule ``f"{package}.{exports[n]}"``."""
    names = sorted(exports)

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def __dir__() -> list[str]:
        return names

    return __getattr__, __dir__, names
