"""``nlnet export``: a checkpoint's model to ONNX, TorchScript, a ``torch.export`` program or
safetensors, checked against PyTorch (the library: :mod:`nlnet.export`, ``nlnet.export_model``).

Parses the arguments, calls :func:`nlnet.export.export_model` and prints its report as JSON; a
user error is one line naming the option (exit 2), a check beyond ``--atol`` exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys

from nlnet.export import FORMATS

__all__ = ["configure_parser", "main", "EXAMPLES"]

EXAMPLES = """examples:
  nlnet export --checkpoint runs/demo/c2d_tiny_nl1.pt --format onnx --output nl.onnx
  nlnet export --checkpoint final.pt --format exported --output model.pt2 --input-size 3x8x112x112
  nlnet export --checkpoint final.pt --format torchscript --output model.ts --batch 4
  nlnet export --checkpoint final.pt --format safetensors --output my_model   (a folder)
"""

#: The library's argument names -> the command's options (in its one-line errors).
_OPTIONS = {"input_size:": "--input-size:", "batch:": "--batch:", "opset:": "--opset:",
            "format:": "--format:", "checkpoint:": "--checkpoint:", "format onnx": "--format onnx"}  # fmt: skip


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``nlnet export``."""
    parser.add_argument("--checkpoint", required=True, help="an nlnet checkpoint (.pt)")
    parser.add_argument("--format", required=True, choices=FORMATS, help="what to write")
    parser.add_argument("--output", required=True, help="file to write")
    parser.add_argument(
        "--input-size",
        default=None,
        help="one sample, CxTxHxW (video) or CxHxW (image); default: the checkpoint's own clip "
        "length and crop (its stored preprocessing)",
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=1,
        help="batch size of the check input (the batch axis is dynamic in the exported file)",
    )
    parser.add_argument("--opset", type=int, default=18, help="ONNX opset (>= 17)")
    parser.add_argument("--atol", type=float, default=1e-4, help="tolerance of the check run")
    parser.add_argument("--no-check", action="store_true", help="skip the check run")
    parser.add_argument(
        "--device", default="cpu", help="where the model is traced: cpu, cuda, cuda:N (cpu)"
    )


def _as_option(message: str) -> str:
    """The library's message with its argument named as the command's option."""
    for name, option in _OPTIONS.items():
        if message.startswith(name):
            return option + message[len(name) :]
    return message


def main(args: argparse.Namespace) -> int:
    """Export, then compare the exported file with PyTorch on random inputs."""
    from nlnet.engine.errors import UserError
    from nlnet.export import export_model

    try:
        report = export_model(
            args.checkpoint, args.output, args.format, input_size=args.input_size,
            batch=args.batch, opset=args.opset, device=args.device, check=not args.no_check,
            atol=args.atol,
        )  # fmt: skip
    except (OSError, ValueError, UserError) as err:
        print(f"nlnet export: {_as_option(str(err).splitlines()[0])}", file=sys.stderr)
        return 2
    if args.format == "safetensors":
        folder = report["output"]
        print(f"wrote {folder}/config.json and model.safetensors ({report['tensors']} tensors, "
              f"read back equal); nlnet.load_model({folder!r}) rebuilds the model")  # fmt: skip
        return 0
    print(json.dumps(report, indent=2))
    return 0 if report.get("check_ok", True) else 1
