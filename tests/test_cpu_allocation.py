"""The command line's CPU allocation default: PyTorch's large tensors on transparent huge pages
(``THP_MEM_ALLOC_ENABLE``), unless the user's environment says otherwise."""

from __future__ import annotations

import inspect
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from nlnet import cli


def _eligible(t) -> int:
    """Whether the memory of tensor ``t`` may sit on huge pages (``THPeligible`` of its mapping
    in ``/proc/self/smaps``: 1 once PyTorch has ``madvise``-d it; whether the kernel then finds
    free huge pages depends on the machine's load, this does not)."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and head.replace("-", "").isalnum() and ":" not in head:
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= t.data_ptr() < hi
            elif inside and head == "THPeligible:":
                return int(line.split()[1])
    raise AssertionError("the tensor's mapping is not in /proc/self/smaps")


#: a fresh process through the command line's default, then a 64 MB tensor
_PROBE = (
    "from nlnet.cli import cpu_allocation_defaults; cpu_allocation_defaults()\n"
    "import os, torch\n"
    + inspect.getsource(_eligible)
    + "print(os.environ.get('THP_MEM_ALLOC_ENABLE'), _eligible(torch.empty(1 << 24)))\n"
)
_THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _probe() -> tuple[str, int]:
    clean = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=clean, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    value, eligible = out.stdout.split()
    return value, int(eligible)


@pytest.mark.skipif(
    not _THP.exists() or "[madvise]" not in _THP.read_text(),
    reason="huge pages only on request (madvise mode) show the switch; 'always' and 'never' do not",
)
def test_large_cpu_tensors_go_on_huge_pages():
    import torch

    assert _probe() == ("1", 1)
    if os.environ.get("THP_MEM_ALLOC_ENABLE") in (None, "0"):  # this process: PyTorch's default
        assert _eligible(torch.empty(1 << 24)) == 0


def test_the_users_setting_wins(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch")  # as in a fresh `nlnet` process
    monkeypatch.setattr(cli, "keep_freed_memory", lambda: False)  # not in this pytest process
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")
    cli.cpu_allocation_defaults()
    assert os.environ["THP_MEM_ALLOC_ENABLE"] == "0"
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE")
    cli.cpu_allocation_defaults()
    assert os.environ["THP_MEM_ALLOC_ENABLE"] == "1"


def test_the_command_line_sets_it_before_any_command(monkeypatch):
    calls = []
    build_parser = cli.build_parser
    monkeypatch.setattr(cli, "cpu_allocation_defaults", lambda: calls.append("allocation"))
    monkeypatch.setattr(cli, "build_parser", lambda c: calls.append(c) or build_parser(c))
    assert cli.main(["cost", "--help"]) == 0
    assert calls == ["allocation", "cost"]  # before the command's module (and torch) loads


def test_it_is_not_set_once_torch_is_imported(monkeypatch):
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    assert "torch" in sys.modules  # too late: PyTorch has read it already
    cli.cpu_allocation_defaults()
    assert "THP_MEM_ALLOC_ENABLE" not in os.environ


#: a fresh process through the command line's default, then the bytes glibc holds in blocks
#: mapped on their own (``mallinfo2().hblkhd``) while a 64 MB tensor lives
_HEAP_PROBE = """
import ctypes
from nlnet.cli import cpu_allocation_defaults; cpu_allocation_defaults()
import torch
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena ordblks smblks hblks hblkhd usmblks "
                                               "fsmblks uordblks fordblks keepcost").split()]
info = ctypes.CDLL(None).mallinfo2
info.restype = Info
x = torch.ones(1 << 24)
print(info().hblkhd)
"""


def _mapped_bytes(**env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_"))}
    out = subprocess.run([sys.executable, "-c", _HEAP_PROBE], env={**clean, **env},
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout)


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="the heap settings are glibc's (mallopt); other C libraries keep their own policy",
)
def test_large_blocks_come_from_the_heap_unless_the_user_sets_glibcs_switch():
    assert _mapped_bytes() < 1 << 26  # the 64 MB tensor is a heap block, kept after free
    assert _mapped_bytes(MALLOC_MMAP_MAX_="65536") >= 1 << 26  # glibc's default: mapped alone


def test_the_heap_settings_are_left_to_the_environment(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert cli.keep_freed_memory() is False
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_max=0")
    assert cli.keep_freed_memory() is False
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")  # any of glibc's malloc variables
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=2048")
    assert cli.keep_freed_memory() is False
