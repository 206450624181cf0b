"""Fixtures of the journey tests: a temporary ``TORCH_HOME`` holding small fake weight files
with the real torchvision file names, and checkpoints of every kind (made once per session)."""

from __future__ import annotations

from pathlib import Path

import helpers  # tests/journeys is on pytest's pythonpath (pyproject.toml)
import pytest


@pytest.fixture(scope="session")
def torch_home(tmp_path_factory):
    """A session-wide ``TORCH_HOME`` (fake files are written on demand by the tests)."""
    return tmp_path_factory.mktemp("torch_home")


@pytest.fixture
def fake_weights(torch_home, monkeypatch):
    """``TORCH_HOME`` set to the cache; returns ``write(arch)`` -> the fake file's path."""
    monkeypatch.setenv("TORCH_HOME", str(torch_home))
    return lambda arch, name="IMAGENET1K_V1": helpers.fake_weight_file(torch_home, arch, name)


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    """``get(kind)`` -> a checkpoint of that kind, trained (one step) the first time asked."""
    made: dict[str, Path] = {}
    root = tmp_path_factory.mktemp("checkpoints")

    def get(kind: str) -> Path:
        if kind not in made:
            made[kind] = helpers.make_checkpoint(kind, root / kind)
        return made[kind]

    return get
