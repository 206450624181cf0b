"""The command line's CPU allocation default: PyTorch's large tensors on transparent huge pages
(``THP_MEM_ALLOC_ENABLE``), unless the user's environment says otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nlnet import cli

_FAULTS = (
    "import resource, torch\n"
    "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
    "for _ in range(5):\n"
    "    torch.empty(1 << 24).fill_(1.0)\n"
    "faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before\n"
)
#: Page faults of five fresh 64 MB tensors, each written once (as an activation is).
_PROBE = (
    "from nlnet.cli import cpu_allocation_defaults; cpu_allocation_defaults()\n"
    + _FAULTS
    + "import os; print(os.environ.get('THP_MEM_ALLOC_ENABLE'), faults)\n"
)
_THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _probe() -> tuple[str, int]:
    clean = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=clean, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    value, faults = out.stdout.split()
    return value, int(faults)


@pytest.mark.skipif(
    not _THP.exists() or "[never]" in _THP.read_text(),
    reason="the kernel has no transparent huge pages (nothing for the switch to use)",
)
def test_large_cpu_tensors_go_on_huge_pages():
    on, faults_on = _probe()
    assert on == "1"
    assert os.environ.get("THP_MEM_ALLOC_ENABLE") is None  # this process: PyTorch's default
    scope: dict = {}
    exec(_FAULTS, scope)
    # 4 KB pages: 16k faults per 64 MB tensor; 2 MB pages: a few dozen
    assert scope["faults"] > 40_000 and faults_on < scope["faults"] / 4


def test_the_users_setting_wins(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch")  # as in a fresh `nlnet` process
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")
    cli.cpu_allocation_defaults()
    assert os.environ["THP_MEM_ALLOC_ENABLE"] == "0"
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE")
    cli.cpu_allocation_defaults()
    assert os.environ["THP_MEM_ALLOC_ENABLE"] == "1"


def test_the_command_line_sets_it_before_any_command(monkeypatch):
    calls = []
    monkeypatch.setattr(cli, "cpu_allocation_defaults", lambda: calls.append(1))
    assert cli.main(["cost", "--help"]) == 0
    assert calls == [1]


def test_it_is_not_set_once_torch_is_imported(monkeypatch):
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    assert "torch" in sys.modules  # too late: PyTorch has read it already
    cli.cpu_allocation_defaults()
    assert "THP_MEM_ALLOC_ENABLE" not in os.environ
