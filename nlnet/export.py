"""Exporting a trained model to ONNX, TorchScript, a ``torch.export`` program or safetensors, checked.

The library of ``nlnet export`` (:func:`export_model`, also ``nlnet.export_model``).

The checkpoint's model is rebuilt and loaded (:func:`nlnet.load_model`) and exported at the size
its own stored preprocessing makes (:class:`~nlnet.data.preprocessing.Preprocessing`: the clip length and
the crop, or the test scale when it tests on the whole frame), not at the model's registered
size: a model trained on 32-pixel clips takes 32-pixel clips.  The batch axis is dynamic, and so
are the clip length (the convolutional video models) and, for a model tested on whole frames,
the height and width, where the exported graph allows it; the input is named ``input`` and the
output ``logits``.  The model name, class names, preprocessing (mean,
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

import importlib.util
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nlnet.data.preprocessing import Preprocessing

__all__ = [
    "FORMATS",
    "export_model",
    "export_metadata",
    "input_shape",
    "load_exported",
    "missing_packages",
    "test_views",
    "write_export",
]

INPUT_NAME, OUTPUT_NAME = "input", "logits"

FORMATS = ("onnx", "torchscript", "exported", "safetensors")


def input_shape(info: Any, input_size: str | Sequence[int] | None = None, batch: int = 1
                ) -> tuple[int, ...]:  # fmt: skip
    """``(batch, C, T, H, W)`` or ``(batch, C, H, W)``: ``input_size`` (``"3x8x32x32"`` or
    numbers), else what the
    checkpoint's stored preprocessing makes (clip length, crop or test scale), else the model's
    registered input size (a checkpoint that stores no preprocessing)."""
    from nlnet.models.registry import get_model_entry

    if batch < 1:
        raise ValueError(f"batch: expected a positive int, got {batch}")
    channels = (getattr(info, "model_options", None) or {}).get("in_channels")
    if input_size:
        text = input_size if isinstance(input_size, str) else "x".join(map(str, input_size))
        try:
            size = tuple(int(v) for v in text.lower().split("x"))
        except ValueError:
            size = ()
        if len(size) not in (3, 4) or min(size) < 1:
            raise ValueError(
                f"input_size: expected CxTxHxW (clip), CxDxHxW (volume) or CxHxW, got {text!r}"
            )
        want = tuple(get_model_entry(info.model_name).default_cfg.input_size or ())
        if want and len(size) != len(want):
            example = "x".join(map(str, want))
            raise ValueError(
                f"input_size: {info.model_name} takes {len(want)} numbers "
                f"({'CxTxHxW' if len(want) == 4 else 'CxHxW'}, e.g. {example}), got "
                f"{text!r}"
            )
        if channels is not None and size[0] != int(channels):
            raise ValueError(
                f"input_size: the model takes {int(channels)} channel(s) (its first number), "
                f"got {text!r}"
            )
        return (batch, *size)
    size = list(get_model_entry(info.model_name).default_cfg.input_size)
    if not size:
        raise ValueError("input_size: the model has no registered input size; give one")
    if channels is not None:  # trained on data of other channels than the registered input
        size[0] = int(channels)
    prep = info.preprocessing
    if prep is None or prep.kind == "volume":
        return (batch, *size)
    hw = prep.crop_hw() or ((prep.size, prep.size) if prep.size else None)
    if prep.is_video and len(size) == 4:
        size[1] = prep.num_frames
    if hw and len(size) in (3, 4):
        size[-2:] = hw
    return (batch, *size)


def whole_frame(info: Any, input_size: Any = None) -> bool:
    """Whether the model is tested on whole resized frames (no crop): their height and width
    vary with the video's aspect ratio, so the export tries to keep them dynamic."""
    prep = info.preprocessing
    return not input_size and prep is not None and prep.is_video and prep.crop is None


#: The optional dynamic axes of a clip ``(B, C, T, H, W)`` (the batch axis 0 is always dynamic).
AXES = {"time": 2, "height": 3, "width": 4}


def dynamic_spec(x: torch.Tensor, dynamic: tuple[str, ...] = (), *, named: bool = False
                 ) -> dict[int, Any]:  # fmt: skip
    """``torch.export`` dynamic shapes of the input: the batch always, and the ``dynamic`` axes
    of a clip (``"time"``, ``"height"``, ``"width"``).  ``named``: named dimensions (what the
    ONNX exporter takes; the clip length from 2, the height/width from the example's, the test
    scale being the shorter side) instead of ``Dim.AUTO`` (the range the model's
    shape-dependent paths allow)."""
    from torch.export import Dim

    spec: dict[int, Any] = {0: Dim("batch", min=1, max=4096)}
    if x.dim() != 5:
        return spec
    for name in dynamic:
        axis = AXES[name]
        low = 2 if name == "time" else int(x.shape[axis])
        spec[axis] = Dim(name, min=low, max=4096) if named else Dim.AUTO
    return spec


def write_export(
    model: nn.Module, x: torch.Tensor, fmt: str, output: Path, opset: int = 18,
    *, dynamic: tuple[str, ...] = (), metadata: dict[str, Any] | None = None,
) -> dict[str, int]:  # fmt: skip
    """Write ``model`` traced on the example input ``x`` to ``output`` in format ``fmt``.

    Traced under ``no_grad``: the inference graph (the blocks' ``"auto"`` path chooses by whether
    a backward follows, so a graph traced with autograd on would carry the training choice).
    The batch axis (``x`` should have a batch of 2 or more) and the ``dynamic`` axes of a clip
    (``"time"``, ``"height"``, ``"width"``) are dynamic (TorchScript's trace keeps no shapes);
    ``metadata`` (strings to JSON values) goes into the file where the format has a place for
    it (ONNX ``metadata_props``, TorchScript extra file ``nlnet.json``).

    Returns:
        The dynamic axes of the input, e.g. ``{"batch": 0, "time": 2}``.

    Raises:
        ValueError: a bad format or opset.
        Exception: whatever the exporter raises when the graph does not allow ``dynamic``.
    """
    output.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "onnx" and opset < 17:
        raise ValueError(f"opset: expected 17 or more, got {opset}")
    if fmt not in FORMATS:
        raise ValueError(f"format: expected one of {FORMATS}, got {fmt!r}")
    dynamic = tuple(dynamic) if x.dim() == 5 else ()
    axes = {"batch": 0, **{name: AXES[name] for name in dynamic}}
    meta = {k: json.dumps(v) for k, v in (metadata or {}).items()}
    with torch.no_grad():
        if fmt == "onnx":
            spec = dynamic_spec(x, dynamic, named=True)
            _onnx_program(model, x, spec, opset).save(str(output))
            _onnx_metadata(output, {**meta, "dynamic_axes": json.dumps(axes)})
        elif fmt == "torchscript":
            extra = {"nlnet.json": json.dumps({**(metadata or {}), "dynamic_axes": axes})}
            torch.jit.save(torch.jit.trace(model, (x,)), str(output), _extra_files=extra)
        else:
            spec = dynamic_spec(x, dynamic)
            program = torch.export.export(model, (x,), dynamic_shapes=(spec,))
            torch.export.save(program, str(output))
    return axes


def export_with_free_axes(
    model: nn.Module, x: torch.Tensor, fmt: str, output: Path, opset: int,
    wanted: tuple[str, ...], metadata: dict[str, Any],
) -> tuple[dict[str, int], Callable[[torch.Tensor], torch.Tensor] | None]:  # fmt: skip
    """Export with the most of the ``wanted`` dynamic axes that the graph allows: each attempt
    (all of them, then the clip length alone, then the batch alone) must export and its file
    must run an input changed along those axes (a guard of the exported graph, e.g. a path
    chosen by size, may bound an axis: then a fixed size, honestly).

    Returns:
        The dynamic axes, and the written file as its runtime loaded it for the check of the
        free axes (:func:`load_exported`; ``None`` when only the batch is free: not loaded).
    """
    import logging

    tries = [wanted, tuple(a for a in wanted if a == "time"), ()]
    for dynamic in dict.fromkeys(tries):  # in order, without repeats
        before = logging.root.manager.disable
        if dynamic:  # torch logs a refused axis at ERROR level: the next try follows anyway
            logging.disable(logging.ERROR)
        try:
            axes = write_export(model, x, fmt, output, opset, dynamic=dynamic, metadata=metadata)
        except ValueError:
            raise
        except Exception:  # noqa: BLE001 - the exporter refuses these axes: fewer
            if not dynamic:
                raise
            continue
        finally:
            logging.disable(before)
        if not dynamic:
            return axes, None
        run = _runs_changed(fmt, output, x, dynamic)
        if run is not None:
            return axes, run
    raise AssertionError("unreachable: the batch-only export returns")


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


def test_views(
    prep: Preprocessing, evaluation: dict[str, Any], multi_label: bool = False
) -> dict[str, Any] | None:
    """How ``nlnet eval``/``predict`` turn a video into the model's inputs, so that a deployment
    can do the same: the clips, their placement, the crops, the resize rule (None for images).

    Args:
        prep: the checkpoint's test-time record.
        evaluation: the checkpoint's ``eval`` config (``clips``, ``crops``).
        multi_label: per-category sigmoid scores (Charades, Section 5.2) instead of softmax.
    """
    if not prep.is_video:
        return None
    clips, crops = int(evaluation.get("clips", 10)), int(evaluation.get("crops", 1))
    if prep.sampling == "segments":
        placement = ("segments: the video cut into num_frames equal segments; clip k takes, in "
                     "each, the frame at the fraction (k + 0.5) / clips of it")  # fmt: skip
    else:
        placement = ("window: num_frames frames stride apart; clip k starts at frame "
                     "round(k * (frames - window) / (clips - 1)) (one clip: the centre window); "
                     "a video shorter than the window repeats its last frame")  # fmt: skip
    return {
        "clips": clips,
        "crops": crops,
        "placement": placement,
        "crop": "full frame" if prep.crop is None and crops == 1 else (
            "centre" if crops == 1 else "3 along the longer side (start, centre, end)"),
        "resize": "shorter side to size; the other floor(other * size / shorter), at least 1; "
                  "bilinear, align_corners=False, no antialiasing, uint8 rounded to nearest",
        "scores": f"{'sigmoid' if multi_label else 'softmax'} of each view, averaged over the views",
    }  # fmt: skip


test_views.__test__ = False  # type: ignore[attr-defined]  # not a test where pytest imports it


def _model_preprocessing(facts: Any) -> Preprocessing:
    """The record of a checkpoint that stores none: the model's registered input (its clip
    length for a video model) and statistics."""
    if facts.input_kind == "volume":
        return Preprocessing("volume")
    if facts.input_kind == "clip":
        return Preprocessing("clip", facts.mean, facts.std, num_frames=facts.input_size[1])
    return Preprocessing("image", facts.mean, facts.std)


def export_metadata(info: Any, evaluation: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a deployed model needs besides its graph: name, classes, preprocessing, layout,
    and for video models the test views (:func:`test_views`; ``evaluation``: the checkpoint's
    ``eval`` config)."""
    from nlnet.models.registry import model_facts

    facts = model_facts(info.model_name)
    prep = info.preprocessing or _model_preprocessing(facts)
    views = test_views(prep, evaluation or {}, bool(info.multi_label))
    return {
        **({"test_views": views} if views else {}),
        "model_name": info.model_name,
        "num_classes": info.num_classes,
        "class_names": list(info.class_names),
        "preprocessing": prep.to_dict(),
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


def load_exported(fmt: str, path: Path) -> Callable[[torch.Tensor], torch.Tensor]:
    """The exported file, loaded once by its own runtime, as a function of the input clip."""
    if fmt == "onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

        def run_onnx(x: torch.Tensor) -> torch.Tensor:
            (out,) = session.run([OUTPUT_NAME], {INPUT_NAME: x.detach().cpu().numpy()})
            return torch.from_numpy(out)

        return run_onnx
    if fmt == "torchscript":
        return torch.jit.load(str(path))
    return torch.export.load(str(path)).module()


def export_model(
    checkpoint: Any,
    output: str | os.PathLike,
    format: str = "onnx",  # noqa: A002 - the command's option name
    *,
    input_size: str | Sequence[int] | None = None,
    batch: int = 1,
    opset: int = 18,
    device: str | torch.device = "cpu",
    check: bool = True,
    atol: float = 1e-4,
) -> dict[str, Any]:
    """Export a checkpoint's model and check the written file against PyTorch.

    The Python form of ``nlnet export`` (module docstring): the model is rebuilt from the
    checkpoint (:func:`nlnet.load_model`), traced at the size its stored preprocessing makes
    (or ``input_size``), written with the most dynamic axes the graph allows and its metadata
    (also beside it as ``<output>.json``), then read back by its own runtime and run next to
    the PyTorch model on inputs of other batch sizes (and clip lengths, frame sizes).

    Args:
        checkpoint: a checkpoint file, a loaded checkpoint or a ``save_pretrained`` folder.
        output: the file to write (a folder for ``safetensors``).
        format: ``onnx``, ``torchscript``, ``exported`` (``torch.export``, ``.pt2``) or
            ``safetensors`` (``config.json`` + ``model.safetensors``, the timm/Hugging Face
            layout, read back by :func:`nlnet.load_model`).
        input_size: one sample, ``"CxTxHxW"`` / ``"CxHxW"`` or numbers (default: the
            checkpoint's clip length and crop).
        batch: batch size of the example input (the batch axis stays dynamic).
        opset: ONNX opset (17 or more).
        device: where the model is traced.
        check: run the written file next to PyTorch.
        atol: largest absolute difference the check accepts.

    Returns:
        ``model``, ``format``, ``output``, ``metadata`` (the sidecar), ``input_shape``,
        ``dynamic_axes``, ``bytes`` and, with ``check``, ``check_shapes``,
        ``check_max_abs_diff``, ``check_ok``.

    Raises:
        MissingPackageError: ONNX without onnx/onnxscript (or onnxruntime for the check).
        ValueError: a bad option, a detector's checkpoint, or what the exporter refuses.
        CheckpointError: an unreadable checkpoint.
    """
    from nlnet.engine.distributed import resolve_device
    from nlnet.engine.errors import MissingPackageError
    from nlnet.inference import load_model
    from nlnet.models.registry import model_facts

    if format == "safetensors":
        return _safetensors(checkpoint, output)
    missing = missing_packages(format, check)
    if missing:
        hint = (
            " (or check=False / --no-check to skip the check)" if missing == ["onnxruntime"] else ""
        )
        raise MissingPackageError(
            f"format onnx needs the package(s) {', '.join(missing)}: pip install "
            f"'nlnet[export]'{hint}", name=missing[0],
        )  # fmt: skip
    device = resolve_device(device)
    model = load_model(checkpoint, device)
    info = model.nlnet_info
    _check_exportable(info.model_name)
    shape = input_shape(info, input_size, batch)
    facts = model_facts(info.model_name)
    x = torch.randn(max(shape[0], 2), *shape[1:], device=device)  # a batch of 1 is specialised
    output = Path(output)
    views = getattr(model, "nlnet_transform", None)  # the checkpoint's test clips and crops
    metadata = export_metadata(info, {"clips": getattr(views, "clips", 10),
                                      "crops": getattr(views, "crops", 1)})  # fmt: skip
    wanted = (("time",) if facts.dynamic_time else ()) + (
        ("height", "width") if whole_frame(info, input_size) else ()
    )
    axes, run = export_with_free_axes(model, x, format, output, opset, wanted, metadata)
    sidecar = output.with_name(output.name + ".json")
    sidecar.write_text(json.dumps({**metadata, "format": format, "dynamic_axes": axes},
                                  indent=2) + "\n")  # fmt: skip
    report: dict[str, Any] = {
        "model": info.model_name, "format": format, "output": str(output),
        "metadata": str(sidecar), "input_shape": list(shape), "dynamic_axes": axes,
        "bytes": output.stat().st_size,
    }  # fmt: skip
    if check:
        report.update(_check(model, format, output, shape, axes, run, device, atol))
    return report


def _check(model: nn.Module, fmt: str, output: Path, shape: tuple[int, ...],
           axes: dict[str, int], run: Any, device: torch.device, atol: float) -> dict[str, Any]:  # fmt: skip
    """The written file next to PyTorch on the example's shape, a larger batch and, with free
    axes, a changed clip: the largest absolute difference."""
    free = tuple(a for a in axes if a != "batch")
    shapes = [shape, (shape[0] + 2, *shape[1:])]
    if free:
        shapes.append((shape[0] + 1, *_changed(torch.empty(shape), free).shape[1:]))
    diff, run = 0.0, run or load_exported(fmt, output)
    for s in shapes:
        x = torch.randn(s, device=device)
        with torch.no_grad():
            diff = max(diff, (run(x).cpu() - model(x).cpu()).abs().max().item())
    return {"check_shapes": [list(s) for s in shapes], "check_max_abs_diff": diff,
            "check_ok": diff <= atol}  # fmt: skip


def _safetensors(checkpoint: Any, output: str | os.PathLike) -> dict[str, Any]:
    """``format="safetensors"``: the weights and the JSON config in a folder, read back by
    :func:`nlnet.load_model` and checked to hold the same weights."""
    from nlnet.inference import load_model, save_pretrained

    folder = save_pretrained(checkpoint, output)
    a, b = (load_model(src).state_dict() for src in (checkpoint, folder))
    if a.keys() != b.keys() or not all(torch.equal(a[k], b[k]) for k in a):
        raise RuntimeError(f"{folder}: the weights read back differ from the checkpoint's")
    return {"format": "safetensors", "output": str(folder), "tensors": len(a), "check_ok": True}


def _changed(x: torch.Tensor, dynamic: tuple[str, ...]) -> torch.Tensor:
    """A random input like ``x`` with each ``dynamic`` axis longer (the clip twice as long,
    the frame 16 pixels taller/wider)."""
    shape = list(x.shape)
    for name in dynamic:
        axis = AXES[name]
        shape[axis] = shape[axis] * 2 if name == "time" else shape[axis] + 16
    return torch.randn(shape, device=x.device)


def _runs_changed(
    fmt: str, output: Path, x: torch.Tensor, dynamic: tuple[str, ...]
) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The exported file, loaded, if it takes an input changed along its ``dynamic`` axes."""
    try:
        run = load_exported(fmt, output)
        with torch.no_grad():
            run(_changed(x, dynamic))
    except Exception:  # noqa: BLE001 - any runtime's refusal means: not dynamic
        return None
    return run


def _check_exportable(model_name: str) -> None:
    from nlnet.models.registry import model_facts

    task = model_facts(model_name).task
    if task == "detection":
        raise ValueError(
            f"checkpoint: nlnet export takes classification and segmentation checkpoints; "
            f"{model_name!r} is a torchvision detector, which takes lists of images and branches "
            "on their sizes (export its backbone from Python: load_model(ckpt).backbone)"
        )
