"""Block health of a finished checkpoint: ``nlnet inspect CHECKPOINT [--input FILE ...]``.

The figures of the training hook (:mod:`nlnet.engine.hooks.block_health`) for a trained model:
each non-local block's norm scale from the weights alone; with ``--input`` (videos or images,
read with the checkpoint's preprocessing, the clip ``nlnet predict --clips 1`` scores; volume
files for a 3D segmentation network, z-scored and padded as in testing) also its
output relative to its input and the concentration of its attention, averaged over the inputs.
A block that is (nearly) the identity, or attends uniformly, is named.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

EXAMPLES = """examples:
  nlnet inspect runs/demo-*/c2d_tiny_nl1.pt
  nlnet inspect runs/mine/checkpoints/final.pt --input a.mp4 --input b.mp4
  nlnet inspect final.pt --input clip.mp4 --json health.json
A block is "(nearly) the identity" when its output differs from its input by less than
--identity-below (default 10%), "attends uniformly" when its attention entropy is above
--uniform-above (default 0.99) of a uniform row's.
"""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="a checkpoint written by nlnet")
    parser.add_argument("--input", action="append", default=None, metavar="FILE",
                        help="a video, image or volume (.npy, .nii.gz) to run (repeatable; default: weights only)")  # fmt: skip
    parser.add_argument("--frames", type=int, default=None, help="frames to sample")
    parser.add_argument("--size", type=int, default=None, help="resize frames to this size")
    parser.add_argument("--identity-below", type=float, default=0.1)
    parser.add_argument("--uniform-above", type=float, default=0.99)
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (default: cpu)")


def _inputs(paths: list[str], model, info, args: argparse.Namespace):
    """The model inputs of ``--input`` files (a missing file is one line)."""
    from nlnet.engine.errors import DataError
    from nlnet.model_input import model_input

    out = []
    for text in paths:
        path = Path(text)
        if not path.is_file():
            raise DataError(f"--input: no such file {text!r}")
        out.append(model_input(path, model, info, frames=args.frames, size=args.size)[0])
    return out


def main(args: argparse.Namespace) -> int:
    import dataclasses

    import torch

    from nlnet.analysis.block_health import HealthRecorder, health_table
    from nlnet.commands.common import device_arg
    from nlnet.engine.checkpoint import checkpoint_info, load_checkpoint
    from nlnet.engine.errors import DataError
    from nlnet.inference import load_model

    for flag, value in (("--identity-below", args.identity_below),
                        ("--uniform-above", args.uniform_above)):  # fmt: skip
        if not 0 <= value <= 1:
            raise DataError(f"{flag}: expected a number in [0, 1], got {value}")
    device = device_arg(args.device)
    ckpt = load_checkpoint(args.checkpoint)
    info = checkpoint_info(ckpt)
    model = load_model(ckpt, device).eval()
    inputs = _inputs(args.input or [], model, info, args)
    recorder = HealthRecorder(model, max_calls=max(len(inputs), 1))
    if not recorder.blocks:
        print(f"{info.model_name}: no non-local block")
        return 0
    with recorder, torch.no_grad():
        for inp in inputs:
            model(inp.to(device))
    results = recorder.results()
    limits = {"identity_below": args.identity_below, "uniform_above": args.uniform_above}
    print(f"{info.model_name}: {len(results)} non-local block(s)"
          + (f", measured on {len(inputs)} input(s)" if inputs else
             " (weights only; --input FILE measures the output and the attention)"))  # fmt: skip
    print(health_table(results, **limits))
    if args.json:
        report = {r.name: {**dataclasses.asdict(r), "problems": r.problems(**limits)}
                  for r in results}  # fmt: skip
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0
