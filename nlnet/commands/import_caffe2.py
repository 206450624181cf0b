"""Convert a released Caffe2 ``.pkl`` model of the paper's video code into an nlnet checkpoint.

The file is read without executing code (:func:`nlnet.models.caffe2.read_caffe2_pickle`), mapped
onto ``--model`` (:func:`nlnet.models.caffe2.import_caffe2`) and written as an nlnet checkpoint
that ``nlnet eval`` / ``nlnet predict`` / ``model.pretrained`` read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EXAMPLES = """examples:
  # a released NL I3D ResNet-50 Kinetics model -> nlnet checkpoint, with the matching recipe
  nlnet import-caffe2 i3d_nonlocal_32x2_IN_pretrain_400k.pkl --model i3d311_r50_nl5 \\
      --config kinetics/i3d311_r50_nl5 --output runs/imported/i3d311_r50_nl5.pt

  # then evaluate it with the paper's 10-clip protocol on your Kinetics copy
  nlnet eval --checkpoint runs/imported/i3d311_r50_nl5.pt data.root=/data/kinetics400

  # a C2D baseline, checkpoint with the model only (pass --config to nlnet eval later)
  nlnet import-caffe2 c2d_baseline_32x2_IN_pretrain_400k.pkl --model c2d_r50 --output c2d.pt
"""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the released .pkl (a dict whose 'blobs' are numpy arrays)")
    parser.add_argument("--model", "-m", required=True, help="nlnet model name (nlnet models)")
    parser.add_argument("--output", "-o", required=True, help="checkpoint (.pt) to write")
    parser.add_argument(
        "--config", "-c", help="config to store in the checkpoint (default: model only)"
    )
    parser.add_argument(
        "--num-classes", type=int, help="classifier width (default: from pred_w, else 400)"
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="builder option of the model (e.g. temporal_strides=[1,2,2]); repeatable",
    )
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="keep the initialisation of model weights the file lacks instead of failing",
    )


def save_imported(path: str, model: Any, model_name: str, num_classes: int, config: dict) -> Path:
    """Write the checkpoint through the engine's public save function (one place to repoint)."""
    from nlnet.engine.checkpoint import save_checkpoint

    return save_checkpoint(
        path, model=model, model_name=model_name, num_classes=num_classes, config=config
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


def _config(args: argparse.Namespace, num_classes: int, overrides: dict) -> dict:
    from nlnet.engine.config import config_from_dict, config_to_dict, load_config

    model = {
        "model.name": args.model,
        "model.num_classes": num_classes,
        "model.pretrained": None,
        "model.pretrained_2d": None,
        "model.overrides": overrides,
    }
    if args.config:
        return config_to_dict(load_config(args.config, model))
    plain = {"model": {k.split(".", 1)[1]: v for k, v in model.items()}}
    return config_to_dict(config_from_dict(plain))


def main(args: argparse.Namespace) -> int:
    from nlnet.models.caffe2 import import_caffe2, read_caffe2_pickle
    from nlnet.models.registry import create_model

    try:
        if not Path(args.file).is_file():
            raise ValueError(f"FILE: no such file {args.file!r}")
        blobs = read_caffe2_pickle(args.file)
        num_classes = args.num_classes
        if num_classes is None:
            num_classes = int(blobs["pred_w"].shape[0]) if "pred_w" in blobs else 400
        overrides = _overrides(args.override)
        config = _config(args, num_classes, overrides)
        model = create_model(args.model, num_classes=num_classes, **overrides)
        report = import_caffe2(model, blobs, strict=not args.allow_missing)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"nlnet import-caffe2: {msg}", file=sys.stderr)
        return 2
    path = save_imported(args.output, model, args.model, num_classes, config)
    print(report)
    print(f"wrote {path} ({args.model}, {num_classes} classes)")
    return 0
