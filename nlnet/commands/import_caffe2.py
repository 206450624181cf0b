"""Convert a released Caffe2 ``.pkl`` model of the paper's video code into an nlnet checkpoint.

The file is read without executing code (:func:`nlnet.models.caffe2.read_caffe2_pickle`). A
released file name (or ``--released NAME`` for a renamed file) selects its row of the built-in
model zoo (:mod:`nlnet.models.caffe2_zoo`): the nlnet model, its per-stage block options, the
released pooling and test head, the preprocessing (mean 0.45 / std 0.225 on 0-1 RGB) and the
test protocol (10 clips x 3 crops of 256), all stored in the checkpoint so that ``nlnet eval``,
``predict`` and ``visualize`` feed it as it was trained. Any other file needs ``--model`` (and
``--override`` for options the blobs cannot tell). The import is refused when a model weight
finds no blob or a weight blob goes unused, unless ``--allow-partial``.
A 400-way classifier (every released file) gets the Kinetics-400 class names in the released
order (alphabetical; :mod:`nlnet.models.kinetics_classes`, shipped with the package), so
``nlnet predict`` prints ``abseiling`` rather than ``class_0``.

A PySlowFast checkpoint (``.pyth``, ``model_state`` of its C2D/I3D ResNet, read with
``weights_only=True``) imports the same way with ``--model`` (:mod:`nlnet.models.pyslowfast`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EXAMPLES = """examples:
  # a released file: model, options, preprocessing and test protocol from the built-in zoo
  nlnet import-caffe2 i3d_nonlocal_128x1_I3D_pretrain_400k.pkl -o runs/imported/nl_i3d_128x1.pt
  nlnet eval --checkpoint runs/imported/nl_i3d_128x1.pt data.root=/data/kinetics400

  # a renamed released file: say which one it is
  nlnet import-caffe2 model.pkl --released i3d_nonlocal_8x8_IN_pretrain_400k -o nl_i3d_8x8.pt

  # a PySlowFast checkpoint of its I3D NLN 8x8 R50
  nlnet import-caffe2 checkpoint_epoch_00196.pyth --model i3d311_r50_nl5 -o i3d_nln.pt

  # a file of your own: name the model and the options the blobs cannot tell
  nlnet import-caffe2 mine.pkl --model c2d_r50_nl5 --override pooling=caffe2 -o mine.pt
"""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file", help="a Caffe2 .pkl ({'blobs': numpy arrays}) or a PySlowFast .pyth"
    )
    parser.add_argument("--output", "-o", required=True, help="checkpoint (.pt) to write")
    parser.add_argument(
        "--released", help="released file name this file is (default: from the file name)"
    )
    parser.add_argument("--model", "-m", help="nlnet model name (default: the released row's)")
    parser.add_argument(
        "--config", "-c", help="recipe config stored in the checkpoint (default: model only)"
    )
    parser.add_argument(
        "--num-classes", type=int, help="classifier width (default: from pred_w, else 400)"
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="builder option of the model (e.g. temporal_strides=[1,1,2]); repeatable",
    )
    parser.add_argument(
        "--allow-partial",
        "--allow-missing",
        dest="allow_partial",
        action="store_true",
        help="write the checkpoint even when weights lack a blob or blobs go unused",
    )


def _overrides(items: list[str]) -> dict[str, Any]:
    import yaml

    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--override {item!r}: expected KEY=VALUE, e.g. width=4")
        out[key.strip()] = yaml.safe_load(raw)
    return out


def _config(args, model: str, num_classes: int, options: dict, prep: dict | None) -> dict:
    from nlnet.engine.config import config_from_dict, config_to_dict, load_config

    items = {
        "model.name": model,
        "model.num_classes": num_classes,
        "model.init": None,
        "model.overrides": options,
    }
    if prep is not None:  # the released data and test protocol (what `nlnet eval` reads)
        from nlnet.models.caffe2_zoo import RELEASED_TEST

        items.update({f"data.{k}": prep[k] for k in ("mean", "std", "num_frames", "stride")})
        items.update({"data.test_scale": prep["size"], "data.test_crop": prep["crop"]})
        items.update({"eval.clips": RELEASED_TEST["clips"], "eval.crops": RELEASED_TEST["crops"]})
    if args.config:
        return config_to_dict(load_config(args.config, items))
    plain: dict[str, dict] = {}
    for key, value in items.items():
        section, _, name = key.partition(".")
        plain.setdefault(section, {})[name] = value
    return config_to_dict(config_from_dict(plain))


def _resolve(args, blobs) -> tuple[str, dict, dict | None]:
    """(model name, create_model options, preprocessing or None) for the file."""
    from nlnet.models.caffe2_zoo import match_released, released_model
    from nlnet.models.placement import merged_builder_options

    if args.released:
        row = released_model(args.released)
    else:
        rows = match_released(args.file, blobs)
        row = rows[0] if len(rows) == 1 else None
        if row is None and args.model is None:
            names = ", ".join(r.file for r in rows) or "none"
            raise ValueError(
                f"FILE: {Path(args.file).name!r} is not a released file name and its blobs "
                f"match the released {names}; pass --released NAME (clip length and strides "
                "are not in the blobs) or --model with --override"
            )
    if row is None or (args.model and args.model != row.model):
        return args.model, merged_builder_options({}, _overrides(args.override)), None
    return (
        row.model,
        merged_builder_options(row.model_options, _overrides(args.override)),
        row.preprocessing,
    )


def _pyslowfast(args) -> tuple[str, int, dict, dict, Any, Any]:
    """A PySlowFast ``.pyth`` (C2D/I3D +NLN): its 8x8 protocol; the model is named by --model."""
    from nlnet.models.caffe2_zoo import RELEASED_PREPROCESSING, RELEASED_TEST
    from nlnet.models.placement import merged_builder_options
    from nlnet.models.pyslowfast import PYSLOWFAST_OPTIONS, import_pyslowfast, read_pyslowfast
    from nlnet.models.registry import create_model

    if not args.model:
        raise ValueError("--model: a PySlowFast .pyth needs the nlnet model, e.g. i3d311_r50_nl5")
    state = read_pyslowfast(args.file)
    head = state.get("head.projection.weight")
    num_classes = args.num_classes or (int(head.shape[0]) if head is not None else 400)
    base = {**PYSLOWFAST_OPTIONS, "head": RELEASED_TEST["head"]}
    options = merged_builder_options(base, _overrides(args.override))
    prep = {**RELEASED_PREPROCESSING, "num_frames": 8, "stride": 8}
    model = create_model(args.model, num_classes=num_classes, **options)
    report = import_pyslowfast(model, state, strict=not args.allow_partial)
    return args.model, num_classes, options, prep, model, report


def main(args: argparse.Namespace) -> int:
    from nlnet.models.caffe2 import import_caffe2, read_caffe2_pickle
    from nlnet.models.registry import create_model

    try:
        if not Path(args.file).is_file():
            raise ValueError(f"FILE: no such file {args.file!r}")
        if args.file.endswith(".pyth"):
            name, num_classes, options, prep, model, report = _pyslowfast(args)
            config = _config(args, name, num_classes, options, prep)
            return _write(args, model, name, num_classes, config, options, prep, report)
        blobs = read_caffe2_pickle(args.file)
        num_classes = args.num_classes
        if num_classes is None:
            num_classes = int(blobs["pred_w"].shape[0]) if "pred_w" in blobs else 400
        name, options, prep = _resolve(args, blobs)
        config = _config(args, name, num_classes, options, prep)
        model = create_model(name, num_classes=num_classes, **options)
        report = import_caffe2(model, blobs, strict=not args.allow_partial)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"nlnet import-caffe2: {msg}", file=sys.stderr)
        return 2
    return _write(args, model, name, num_classes, config, options, prep, report)


def _write(args, model, name, num_classes, config, options, prep, report) -> int:
    from nlnet.engine.checkpoint import save_checkpoint
    from nlnet.models.kinetics_classes import kinetics400_classes

    # every released file (and PySlowFast's Kinetics models) numbers the 400 Kinetics classes
    # alphabetically: store the names so that predict prints "abseiling", not "class_0"; a file
    # of one's own (no released protocol) keeps its class ids
    names = list(kinetics400_classes()) if num_classes == 400 and prep else None
    path = save_checkpoint(
        args.output, model=model, model_name=name, num_classes=num_classes, config=config,
        model_options=options, preprocessing=prep or {}, class_names=names,
    )  # fmt: skip
    print(report)
    if report.kept or report.unused:
        print("warning: partial import (--allow-partial): see kept/unused above")
    what = "protocol of " + Path(args.file).name if prep else "explicit options"
    what += ", Kinetics-400 class names" if names else ""
    print(f"wrote {path} ({name}, {num_classes} classes, {what})")
    return 0
