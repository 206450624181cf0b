"""Export a trained model to ONNX, TorchScript or a ``torch.export`` program, and check it.

The checkpoint's registered model is rebuilt and loaded and exported with a dynamic batch axis
(and a dynamic clip length where the model allows it: the convolutional video models), the input
named ``input`` and the output ``logits``.  The model name, class names, preprocessing (mean,
std, clip length, size) and the dynamic axes go into the ONNX file's metadata
(``metadata_props``, JSON values), into TorchScript's extra file ``nlnet.json``, and beside every
exported file as ``<output>.json``.  The exported file is then read back and run on random
inputs of two batch sizes next to the PyTorch model: the command prints the largest absolute
difference and fails (exit 1) if it exceeds ``--atol``.

* ``onnx``: ``torch.onnx.export(..., dynamo=True)`` (opset ``--opset``, default 18), checked with
  onnxruntime (``pip install 'nlnet[export]'``: onnx, onnxscript, onnxruntime);
* ``torchscript``: ``torch.jit.trace``, checked with ``torch.jit.load``;
* ``exported``: ``torch.export.export`` saved with ``torch.export.save`` (a ``.pt2`` file),
  checked with ``torch.export.load``.

Detectors (torchvision's Mask/Keypoint R-CNN take lists of images and branch on their sizes) are
not exported whole: the command says so in one line.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = [
    "FORMATS",
    "configure_parser",
    "export_model",
    "export_metadata",
    "load_model",
    "main",
    "missing_packages",
    "EXAMPLES",
]

INPUT_NAME, OUTPUT_NAME = "input", "logits"

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
    parser.add_argument(
        "--batch",
        type=int,
        default=1,
        help="batch size of the check input (the batch axis is dynamic in the exported file)",
    )
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
            raise ValueError(
                f"--input-size: expected CxTxHxW (clip), CxDxHxW (volume) or CxHxW, got "
                f"{args.input_size!r}"
            )
        return (args.batch, *size)
    size = list(get_model_entry(info.model_name).default_cfg.input_size)
    if not size:
        raise ValueError("--input-size: the model has no registered input size; give one")
    frames = info.preprocessing.get("num_frames")
    if frames and len(size) == 4:
        size[1] = int(frames)
    return (args.batch, *size)


def dynamic_spec(x: torch.Tensor, dynamic_time: bool) -> dict[int, Any]:
    """``torch.export`` dynamic shapes of the input: batch always, clip length if allowed."""
    from torch.export import Dim

    spec: dict[int, Any] = {0: Dim("batch", min=1, max=4096)}
    if dynamic_time and x.dim() == 5:
        spec[2] = Dim.AUTO  # the range the model's shape-dependent paths allow
    return spec


def export_model(
    model: nn.Module, x: torch.Tensor, fmt: str, output: Path, opset: int = 18,
    *, dynamic_time: bool = False, metadata: dict[str, Any] | None = None,
) -> dict[str, int]:  # fmt: skip
    """Write ``model`` traced on the example input ``x`` to ``output`` in format ``fmt``.

    Traced under ``no_grad``: the inference graph (the blocks' ``"auto"`` path chooses by whether
    a backward follows, so a graph traced with autograd on would carry the training choice).
    The batch axis (``x`` should have a batch of 2 or more) and, with ``dynamic_time``, the clip
    length are dynamic; ``metadata`` (strings to JSON values) goes into the file where the format
    has a place for it (ONNX ``metadata_props``, TorchScript extra file ``nlnet.json``).

    Returns:
        The dynamic axes of the input, ``{"batch": 0[, "time": 2]}``.
    """
    output.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "onnx" and opset < 17:
        raise ValueError(f"--opset: expected 17 or more, got {opset}")
    if fmt not in FORMATS:
        raise ValueError(f"--format: expected one of {FORMATS}, got {fmt!r}")
    spec = dynamic_spec(x, dynamic_time)
    axes = {"batch": 0, **({"time": 2} if 2 in spec else {})}
    meta = {k: json.dumps(v) for k, v in (metadata or {}).items()}
    with torch.no_grad():
        if fmt == "onnx":
            if 2 in spec:  # the ONNX exporter takes named dimensions only
                from torch.export import Dim

                spec[2] = Dim("time", min=2, max=4096)
            try:
                program = _onnx_program(model, x, spec, opset)
            except Exception:  # noqa: BLE001 - the clip length is not free: batch only
                spec.pop(2, None)
                axes.pop("time", None)
                program = _onnx_program(model, x, spec, opset)
            program.save(str(output))
            _onnx_metadata(output, {**meta, "dynamic_axes": json.dumps(axes)})
        elif fmt == "torchscript":
            extra = {"nlnet.json": json.dumps({**(metadata or {}), "dynamic_axes": axes})}
            torch.jit.save(torch.jit.trace(model, (x,)), str(output), _extra_files=extra)
        else:
            try:
                program = torch.export.export(model, (x,), dynamic_shapes=(spec,))
            except Exception:  # noqa: BLE001 - the clip length is not free: batch only
                spec.pop(2, None)
                axes.pop("time", None)
                program = torch.export.export(model, (x,), dynamic_shapes=(spec,))
            torch.export.save(program, str(output))
    return axes


def _onnx_program(model: nn.Module, x: torch.Tensor, spec: dict[int, Any], opset: int) -> Any:
    """``torch.onnx.export`` (dynamo) with named input/output, its progress output silenced."""
    import contextlib
    import io
    import warnings

    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.onnx.export(
            model, (x,), dynamo=True, opset_version=opset, verbose=False,
            input_names=[INPUT_NAME], output_names=[OUTPUT_NAME], dynamic_shapes=(spec,),
        )  # fmt: skip


def _onnx_metadata(path: Path, meta: dict[str, str]) -> None:
    import onnx

    proto = onnx.load(str(path))
    onnx.helper.set_model_props(proto, meta)
    onnx.save(proto, str(path))


def export_metadata(info: Any) -> dict[str, Any]:
    """What a deployed model needs besides its graph: name, classes, preprocessing, layout."""
    from nlnet.models.registry import model_facts

    facts = model_facts(info.model_name)
    prep = dict(info.preprocessing) or {"mean": list(facts.mean), "std": list(facts.std)}
    return {
        "model_name": info.model_name,
        "num_classes": info.num_classes,
        "class_names": list(info.class_names),
        "preprocessing": prep,
        "input_name": INPUT_NAME,
        "output_name": OUTPUT_NAME,
        "input_layout": {"clip": "NCTHW", "volume": "NCDHW"}.get(facts.input_kind, "NCHW"),
        "task": facts.task,
        "multi_label": info.multi_label,
    }


def missing_packages(fmt: str, check: bool) -> list[str]:
    """The Python packages a format needs that are not installed (ONNX: onnx, onnxscript, and
    onnxruntime for the check)."""
    if fmt != "onnx":
        return []
    needed = ["onnx", "onnxscript"] + (["onnxruntime"] if check else [])
    return [name for name in needed if importlib.util.find_spec(name) is None]


def run_exported(fmt: str, path: Path, x: torch.Tensor) -> torch.Tensor:
    """Run the exported file on ``x`` with its own runtime."""
    if fmt == "onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (out,) = session.run([OUTPUT_NAME], {INPUT_NAME: x.numpy()})
        return torch.from_numpy(out)
    if fmt == "torchscript":
        return torch.jit.load(str(path))(x)
    return torch.export.load(str(path)).module()(x)


def main(args: argparse.Namespace) -> int:
    """Export, then compare the exported file with PyTorch on random inputs."""
    missing = missing_packages(args.format, not args.no_check)
    if missing:
        hint = (
            " (or --no-check to skip the onnxruntime check)" if missing == ["onnxruntime"] else ""
        )
        print(f"nlnet export: --format onnx needs the package(s) {', '.join(missing)}: "
              f"pip install 'nlnet[export]'{hint}", file=sys.stderr)  # fmt: skip
        return 2
    try:
        model, info = load_model(args.checkpoint)
        _check_exportable(info.model_name)
        shape = _input_shape(args, info)
    except (OSError, ValueError) as err:
        print(f"nlnet export: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    from nlnet.models.registry import model_facts

    facts = model_facts(info.model_name)
    x = torch.randn(max(shape[0], 2), *shape[1:])  # a batch of 1 would be specialised
    output = Path(args.output)
    metadata = export_metadata(info)
    try:
        axes = export_model(model, x, args.format, output, args.opset,
                            dynamic_time=facts.dynamic_time, metadata=metadata)  # fmt: skip
        if "time" in axes and not _runs_longer_clips(args.format, output, x):
            # the model's shape-dependent paths bound the clip length: a fixed one, honestly
            axes = export_model(model, x, args.format, output, args.opset, metadata=metadata)
    except ValueError as err:
        print(f"nlnet export: {err}", file=sys.stderr)
        return 2
    sidecar = output.with_name(output.name + ".json")
    sidecar.write_text(json.dumps({**metadata, "format": args.format, "dynamic_axes": axes},
                                  indent=2) + "\n")  # fmt: skip
    report: dict[str, Any] = {
        "model": info.model_name,
        "format": args.format,
        "output": str(output),
        "metadata": str(sidecar),
        "input_shape": list(shape),
        "dynamic_axes": axes,
        "bytes": output.stat().st_size,
    }
    status = 0
    if not args.no_check:
        shapes = [shape, (shape[0] + 2, *shape[1:])]
        if "time" in axes:
            shapes.append((shape[0] + 1, shape[1], shape[2] * 2, *shape[3:]))
        diff = 0.0
        for s in shapes:
            x = torch.randn(s)
            with torch.no_grad():
                diff = max(
                    diff, (run_exported(args.format, output, x) - model(x)).abs().max().item()
                )
        report["check_shapes"] = [list(s) for s in shapes]
        report["check_max_abs_diff"] = diff
        report["check_ok"] = diff <= args.atol
        status = 0 if report["check_ok"] else 1
    print(json.dumps(report, indent=2))
    return status


def _runs_longer_clips(fmt: str, output: Path, x: torch.Tensor) -> bool:
    """Whether the exported file takes clips twice as long as the example (a guard of the
    exported graph, e.g. a path chosen by size, may bound the dynamic clip length)."""
    longer = torch.randn(x.shape[0], x.shape[1], x.shape[2] * 2, *x.shape[3:])
    try:
        with torch.no_grad():
            run_exported(fmt, output, longer)
    except Exception:  # noqa: BLE001 - any runtime's refusal means: not dynamic
        return False
    return True


def _check_exportable(model_name: str) -> None:
    from nlnet.models.registry import model_facts

    task = model_facts(model_name).task
    if task in ("instance_segmentation", "keypoints"):
        raise ValueError(
            f"--checkpoint: nlnet export takes classification and segmentation checkpoints; "
            f"{model_name!r} is a torchvision detector, which takes lists of images and branches "
            "on their sizes (export its backbone from Python: load_model(ckpt).backbone)"
        )
