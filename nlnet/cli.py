"""The ``nlnet`` command line.

Each sub-command lives next to the concept it drives and is imported only when used, so
``nlnet --help`` stays fast. A command module exposes two functions:

* ``configure_parser(parser: argparse.ArgumentParser) -> None`` adds its arguments;
* ``main(args: argparse.Namespace) -> int`` runs it and returns the exit status.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: name -> (module, one-line summary). Order is the order shown by ``nlnet --help``.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("nlnet.demo", "train C2D vs. non-local on the built-in digits video task"),
    "train": ("nlnet.engine.commands.train", "train a model from a YAML config"),
    "eval": ("nlnet.engine.commands.evaluate", "evaluate a checkpoint (multi-clip testing)"),
    "predict": ("nlnet.engine.commands.predict", "top-k classes for video files"),
    "models": ("nlnet.models.registry", "list the registered models"),
    "cost": ("nlnet.analysis.cost", "parameters and multiply-adds of a model"),
    "visualize": ("nlnet.analysis.visualize", "draw the attention maps of non-local blocks"),
    "showcase": ("nlnet.showcase", "the non-local block on a synthetic video tensor"),
    "export": ("nlnet.commands.export", "export a checkpoint to ONNX / TorchScript / torch.export"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: nlnet COMMAND [options]   (nlnet COMMAND --help for details)", "", "commands:"]
    lines += [f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


def build_parser(command: str) -> argparse.ArgumentParser:
    """Return the argument parser of one sub-command (imports its module)."""
    module_name, summary = COMMANDS[command]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(
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
        print(_usage())
        return 0
    if argv[0] == "--version":
        from nlnet import __version__

        print(__version__)
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"nlnet: unknown command {command!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    # Options and KEY=VALUE overrides may come in any order.
    args = build_parser(command).parse_intermixed_args(rest)
    return int(args._main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
