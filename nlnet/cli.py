"""The ``nlnet`` command line.

Each sub-command is a module of :mod:`nlnet.commands`, imported only when used, so
``nlnet --help`` imports no torch. A command module exposes two functions:

* ``configure_parser(parser: argparse.ArgumentParser) -> None`` adds its arguments;
* ``main(args: argparse.Namespace) -> int`` runs it and returns the exit status.

A user error (:class:`nlnet.engine.errors.UserError`: bad config, data, checkpoint, occupied run
directory) is printed as one line on stderr with exit status 2; any other exception is a bug and
keeps its traceback.  ``nlnet --debug COMMAND ...`` shows the traceback of user errors too.

On Linux the command line puts PyTorch's large CPU tensors (2 MB and more) on transparent huge
pages (``THP_MEM_ALLOC_ENABLE=1``, PyTorch's own switch, read at its first allocation), unless
the environment already sets it: a tensor above glibc's 32 MB ``mmap`` limit is otherwise mapped
afresh and faulted in 4 KB page by page at every allocation, which took two thirds of the time
of a 1x1 convolution's forward and backward at 8 x 56 x 56 (docs/benchmarks/training_step.md).
The numbers computed are the same; ``THP_MEM_ALLOC_ENABLE=0 nlnet ...`` turns it off.

With glibc it also keeps freed memory in the process for the next allocation, as the jemalloc or
tcmalloc that PyTorch's CPU performance guide recommends would: every block comes from the heap
(``M_MMAP_MAX`` 0, so no block of the main thread is mapped afresh and faulted in again at every
step) and up to 2 GiB free at the heap's top stay mapped (``M_TRIM_THRESHOLD``), set with
``mallopt`` before torch is imported, unless the environment sets glibc's own switches (any
``MALLOC_*`` variable or a ``glibc.malloc`` tunable). A training step repeats the same sizes, so its
memory is the previous step's. Same numbers again; ``MALLOC_MMAP_MAX_=65536 nlnet ...`` (glibc's
default) turns it off.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import os
import platform
import sys

#: name -> (module, one-line summary). Order is the order shown by ``nlnet --help``.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("nlnet.commands.demo", "train C2D vs. non-local on the built-in digits video task"),
    "train": ("nlnet.commands.train", "train a model from a YAML config"),
    "eval": ("nlnet.commands.evaluate", "evaluate a checkpoint (multi-clip testing)"),
    "predict": ("nlnet.commands.predict", "top-k classes for video files"),
    "models": ("nlnet.commands.models", "list the registered models"),
    "cost": ("nlnet.commands.cost", "parameters and multiply-adds of a model"),
    "visualize": ("nlnet.commands.visualize", "draw the attention maps of non-local blocks"),
    "inspect": ("nlnet.commands.inspect", "block health of a checkpoint (is each block open?)"),
    "showcase": ("nlnet.commands.showcase", "the non-local block on a synthetic video tensor"),
    "import-caffe2": ("nlnet.commands.import_caffe2", "convert a released Caffe2 .pkl model"),
    "export": ("nlnet.commands.export", "export a checkpoint to ONNX / TorchScript / torch.export"),
}


def usage_text() -> str:
    """The top-level usage: the commands of :data:`COMMANDS` with their one-line summaries."""
    width = max(map(len, COMMANDS))
    lines = ["usage: nlnet [--debug] COMMAND [options]   (nlnet COMMAND --help for details)", "",
             "commands:"]  # fmt: skip
    lines += [f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


class _OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (and exit status 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser(command: str) -> argparse.ArgumentParser:
    """Return the argument parser of one sub-command (imports its module)."""
    module_name, summary = COMMANDS[command]
    module = importlib.import_module(module_name)
    parser = _OneLineParser(
        prog=f"nlnet {command}",
        description=(module.__doc__ or summary).strip().splitlines()[0],
        epilog=getattr(module, "EXAMPLES", None),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.configure_parser(parser)
    parser.set_defaults(_main=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``nlnet`` console script and of ``python -m nlnet``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage_text())
        return 0
    if argv[0] == "--version":
        from nlnet import __version__

        print(__version__)
        return 0
    debug = argv[0] == "--debug"
    if debug:
        argv = argv[1:] or ["--help"]
        if argv[0] in ("-h", "--help"):
            return main(argv)
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"nlnet: unknown command {command!r}\n\n{usage_text()}", file=sys.stderr)
        return 2
    cpu_allocation_defaults()
    # Options and KEY=VALUE overrides may come in any order.
    try:
        args = build_parser(command).parse_intermixed_args(rest)
    except SystemExit as exc:  # --help (0) or a usage error (2, one line on stderr)
        return int(exc.code or 0)
    return _run(command, args, debug)


#: glibc's ``mallopt`` parameters (``<malloc.h>``) -> the value the command line sets, and the
#: environment variable with which glibc reads the same parameter at a process's start.
HEAP_SETTINGS: dict[str, tuple[int, int]] = {
    "MALLOC_MMAP_MAX_": (-4, 0),  # M_MMAP_MAX: no block mapped on its own
    "MALLOC_TRIM_THRESHOLD_": (-1, 2**31 - 1),  # M_TRIM_THRESHOLD: keep up to 2 GiB at the top
}


def cpu_allocation_defaults() -> None:
    """``THP_MEM_ALLOC_ENABLE=1`` on Linux unless set, and with glibc freed memory kept for reuse
    (module docstring); only before torch is imported: PyTorch reads its switch once, at its
    first allocation, and a process's allocations should all follow one policy."""
    if sys.platform.startswith("linux") and "torch" not in sys.modules:
        os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
        keep_freed_memory()


def keep_freed_memory() -> bool:
    """Set :data:`HEAP_SETTINGS` with glibc's ``mallopt``; False (nothing set) where the C
    library is not glibc or the environment sets any of glibc's malloc switches
    (``MALLOC_*`` variables, ``glibc.malloc.*`` tunables). Forked DataLoader workers inherit
    it; threads other than the main one still map requests above 64 MB on their own."""
    if platform.libc_ver()[0] != "glibc" or "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    if any(k.startswith("MALLOC_") for k in os.environ):  # glibc's own (MALLOC_ARENA_MAX too)
        return False
    mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return all(mallopt(param, value) == 1 for param, value in HEAP_SETTINGS.values())


def _run(command: str, args: argparse.Namespace, debug: bool) -> int:
    """Run a command; a user error is one line on stderr and exit status 2."""
    try:
        return int(args._main(args) or 0)
    except KeyboardInterrupt:
        print(f"nlnet {command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug or not _is_user_error(exc):
            raise
        text = " ".join(str(exc).split()) or type(exc).__name__
        print(f"nlnet {command}: {text}", file=sys.stderr)
        return 2


def _is_user_error(exc: BaseException) -> bool:
    errors = sys.modules.get("nlnet.engine.errors")  # loaded by any command that can raise one
    return errors is not None and isinstance(exc, errors.UserError)


if __name__ == "__main__":
    sys.exit(main())
