"""Export a trained model to ONNX, TorchScript or a ``torch.export`` program, and check it.

The checkpoint's registered model is rebuilt and loaded, exported for one fixed input shape, then
the exported file is read back and run on a random input next to the PyTorch model: the command
prints the largest absolute difference and fails (exit 1) if it exceeds ``--atol``.

* ``onnx``: ``torch.onnx.export(..., dynamo=True)`` (opset ``--opset``, default 18), checked with
  onnxruntime (``pip install onnx onnxruntime onnxscript``, in the ``dev`` extra);
* ``torchscript``: ``torch.jit.trace``, checked with ``torch.jit.load``;
* ``exported``: ``torch.export.export`` saved with ``torch.export.save`` (a ``.pt2`` file),
  checked with ``torch.export.load``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["FORMATS", "configure_parser", "export_model", "load_model", "main", "EXAMPLES"]

FORMATS = ("onnx", "torchscript", "exported")

EXAMPLES = """examples:
  nlnet export --checkpoint runs/demo/c2d_tiny_nl1.pt --format onnx --output nl.onnx
  nlnet export --checkpoint final.pt --format exported --output model.pt2 --input-size 3x8x112x112
  nlnet export --checkpoint final.pt --format torchscript --output model.ts --batch 4
"""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``nlnet export``."""
    parser.add_argument("--checkpoint", required=True, help="an nlnet checkpoint (.pt)")
    parser.add_argument("--format", required=True, choices=FORMATS, help="what to write")
    parser.add_argument("--output", required=True, help="file to write")
    parser.add_argument(
        "--input-size",
        default=None,
        help="one sample, CxTxHxW (video) or CxHxW (image); default: the checkpoint's clip "
        "length and the model's registered input size",
    )
    parser.add_argument("--batch", type=int, default=1, help="batch size of the example input")
    parser.add_argument("--opset", type=int, default=18, help="ONNX opset (>= 17)")
    parser.add_argument("--atol", type=float, default=1e-4, help="tolerance of the check run")
    parser.add_argument("--no-check", action="store_true", help="skip the check run")


def load_model(path: str | Path) -> tuple[nn.Module, Any]:
    """The checkpoint's model (eval mode, CPU) and what it says about its input.

    Goes through the engine's one checkpoint-to-model path (``load_model`` + ``checkpoint_info``).
    """
    from nlnet.engine.checkpoint import checkpoint_info
    from nlnet.engine.checkpoint import load_model as load_checkpoint_model

    return load_checkpoint_model(path), checkpoint_info(path)


def _input_shape(args: argparse.Namespace, info: Any) -> tuple[int, ...]:
    from nlnet.models.registry import get_model_entry

    if args.batch < 1:
        raise ValueError(f"--batch: expected a positive int, got {args.batch}")
    if args.input_size:
        try:
            size = tuple(int(v) for v in args.input_size.lower().split("x"))
        except ValueError:
            size = ()
        if len(size) not in (3, 4) or min(size) < 1:
            raise ValueError(f"--input-size: expected CxTxHxW or CxHxW, got {args.input_size!r}")
        return (args.batch, *size)
    size = list(get_model_entry(info.model_name).default_cfg.input_size)
    if not size:
        raise ValueError("--input-size: the model has no registered input size; give one")
    frames = info.preprocessing.get("num_frames")
    if frames and len(size) == 4:
        size[1] = int(frames)
    return (args.batch, *size)


def export_model(
    model: nn.Module, x: torch.Tensor, fmt: str, output: Path, opset: int = 18
) -> None:
    """Write ``model`` traced on the example input ``x`` to ``output`` in format ``fmt``.

    Traced under ``no_grad``: the inference graph (the blocks' ``"auto"`` path chooses by whether
    a backward follows, so a graph traced with autograd on would carry the training choice).
    """
    output.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "onnx" and opset < 17:
        raise ValueError(f"--opset: expected 17 or more, got {opset}")
    if fmt not in FORMATS:
        raise ValueError(f"--format: expected one of {FORMATS}, got {fmt!r}")
    with torch.no_grad():
        if fmt == "onnx":
            program = torch.onnx.export(
                model, (x,), dynamo=True, opset_version=opset, verbose=False
            )
            program.save(str(output))
        elif fmt == "torchscript":
            torch.jit.save(torch.jit.trace(model, (x,)), str(output))
        else:
            torch.export.save(torch.export.export(model, (x,)), str(output))


def run_exported(fmt: str, path: Path, x: torch.Tensor) -> torch.Tensor:
    """Run the exported file on ``x`` with its own runtime."""
    if fmt == "onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (out,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        return torch.from_numpy(out)
    if fmt == "torchscript":
        return torch.jit.load(str(path))(x)
    return torch.export.load(str(path)).module()(x)


def main(args: argparse.Namespace) -> int:
    """Export, then compare the exported file with PyTorch on a random input."""
    try:
        model, info = load_model(args.checkpoint)
        x = torch.randn(_input_shape(args, info))
    except (OSError, ValueError) as err:
        print(f"nlnet export: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    output = Path(args.output)
    try:
        export_model(model, x, args.format, output, args.opset)
    except ValueError as err:
        print(f"nlnet export: {err}", file=sys.stderr)
        return 2
    report: dict[str, Any] = {
        "model": info.model_name,
        "format": args.format,
        "output": str(output),
        "input_shape": list(x.shape),
        "bytes": output.stat().st_size,
    }
    status = 0
    if not args.no_check:
        x = torch.randn_like(x)
        with torch.no_grad():
            diff = (run_exported(args.format, output, x) - model(x)).abs().max().item()
        report["check_max_abs_diff"] = diff
        report["check_ok"] = diff <= args.atol
        status = 0 if report["check_ok"] else 1
    print(json.dumps(report, indent=2))
    return status
