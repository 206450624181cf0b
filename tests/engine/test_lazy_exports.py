"""Every name a lazy package namespace exports (``nlnet.engine``, its ``config``, ``hooks`` and
``checkpoint`` packages) resolves to an object of its module: a module that moves cannot leave
a name behind that fails only when a user first touches it."""

from __future__ import annotations

import importlib

import pytest

PACKAGES = ("nlnet.engine", "nlnet.engine.config", "nlnet.engine.hooks", "nlnet.engine.checkpoint")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_lazy_export_resolves(package):
    module = importlib.import_module(package)
    missing = []
    for name in module.__all__:
        try:
            getattr(module, name)
        except (AttributeError, ImportError) as exc:
            missing.append(f"{name}: {exc}")
    assert not missing, missing
