"""Train a video model from a YAML config (the recipe of Section 4.1 of the paper).

Single process: ``nlnet train --config kinetics/c2d_r50_nl5``; several processes (DDP):
``torchrun --nproc_per_node=8 -m nlnet train --config kinetics/c2d_r50_nl5``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

EXAMPLES = """examples:
  # the paper's Kinetics recipe (C2D ResNet-50, 5 non-local blocks), data in data/kinetics400
  nlnet train --config kinetics/c2d_r50_nl5 data.root=/data/kinetics400

  # your own class-per-folder videos (my_videos/train/<class>/*.mp4, my_videos/val/...):
  # the tiny model, AdamW + one-cycle, classes inferred from the folders
  nlnet train --config smoke/folder_tiny data.root=my_videos --output-dir runs/mine

  # fine-tune a ViT from ImageNet weights on class-per-folder images
  nlnet train --config image/vit_b_16_finetune data.root=my_images --output-dir runs/vit

  # show the resolved config (base files + overrides) without training
  nlnet train --config kinetics/i3d311_r50_nl5_128f optim.lr=0.001 --print-config

  # continue a killed or stopped run exactly where it was (to its configured end)
  nlnet train --output-dir runs/mine --resume

  # start over in a directory that holds an earlier run (deletes its records/checkpoints)
  nlnet train --config smoke/folder_tiny data.root=my_videos --output-dir runs/mine --force

  # 2 GPUs (or CPU processes with gloo)
  torchrun --nproc_per_node=2 -m nlnet train --config kinetics/c2d_r50_nl5 --device cuda

overrides are dotted keys with YAML values: optim.lr=0.005 train.amp=bf16 optim.steps=[100,200]
configs: a path or a shipped name (see `nlnet train --list-configs`)
"""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", help="YAML file or shipped config name")
    parser.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=None,
        metavar="CKPT",
        help="continue from CKPT, or from <output_dir>/checkpoints/last.pt when no path is given",
    )
    parser.add_argument(
        "--force", action="store_true", help="start anew in a run directory that holds a run"
    )
    parser.add_argument(
        "--output-dir",
        "-o",
        help="run directory (overrides output_dir; default runs/<config name>, or a new "
        "timestamped one when that holds an earlier run)",
    )
    parser.add_argument("--device", help="auto | cpu | cuda | cuda:N (overrides train.device)")
    parser.add_argument("--list-configs", action="store_true", help="print the shipped configs")
    parser.add_argument(
        "--print-config", action="store_true", help="print the resolved config as YAML and exit"
    )
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides")


def config_for(args: argparse.Namespace) -> Any:
    """The engine config of ``nlnet train``'s arguments: the config file, ``KEY=VALUE``
    overrides and the command-line options (device, output and resume folders) applied."""
    from nlnet.commands.common import data_backend_arg, device_arg, output_dir_arg
    from nlnet.engine.config import ConfigError, load_config, replace

    if isinstance(args.resume, str) and "=" in args.resume and not Path(args.resume).exists():
        args.overrides.insert(0, args.resume)  # `--resume key=value`: a bare --resume
        args.resume = True
    overrides = list(args.overrides)
    if args.output_dir:
        overrides.append(f"output_dir={args.output_dir}")
    if args.device:
        overrides.append(f"train.device={args.device}")
    config = args.config
    if config is None:
        if args.resume and args.output_dir and (Path(args.output_dir) / "config.yaml").is_file():
            config = str(Path(args.output_dir) / "config.yaml")
        elif args.resume and args.output_dir:
            raise ConfigError(
                f"--resume: no run to continue in {args.output_dir!r} (no config.yaml there); "
                "check --output-dir, or start a run with --config"
            )
        else:
            raise ConfigError("--config: required (except with --resume --output-dir RUN_DIR)")
    try:
        cfg = load_config(config, overrides)
        device_arg(cfg.train.device)  # a clear error for --device cuda without CUDA
    except (ValueError, FileNotFoundError) as exc:
        raise ConfigError(str(exc)) from None
    output_dir_arg(cfg.output_dir, "--output-dir" if args.output_dir else "output_dir")
    data_backend_arg(cfg)
    chosen = args.output_dir or any(o.startswith("output_dir=") for o in overrides)
    out = Path(cfg.output_dir)
    used = out.is_dir() and any(p.name != ".lock" for p in out.iterdir())  # a lock alone: empty
    if not (chosen or args.resume or args.force) and used:
        stamped = f"{cfg.output_dir}-{time.strftime('%Y%m%d-%H%M%S')}"
        print(f"nlnet train: {out} holds an earlier run; writing to {stamped}", file=sys.stderr)
        cfg = replace(cfg, output_dir=stamped)
    return cfg


def _check_model_name(name: str) -> None:
    """The command line builds registered models only: a typo in model.name is one line."""
    from nlnet.engine.config import ConfigError
    from nlnet.models.registry import get_model_entry

    try:
        get_model_entry(name)
    except ValueError as exc:
        raise ConfigError(f"model.{exc}") from None


def main(args: argparse.Namespace) -> int:
    from nlnet.engine.config import config_to_dict, list_configs

    if args.list_configs:
        print("\n".join(list_configs()))
        return 0
    cfg = config_for(args)
    _check_model_name(cfg.model.name)
    if args.print_config:
        import yaml

        print(yaml.safe_dump(config_to_dict(cfg), sort_keys=False), end="")
        return 0
    from nlnet.engine.errors import UserError
    from nlnet.engine.loop import train
    from nlnet.models.weights import WeightsUnavailableError

    try:
        summary = train(cfg, resume=args.resume, force=args.force)
    except WeightsUnavailableError as exc:  # offline, the ImageNet file not in the hub cache
        raise UserError(f"model.init: {exc}") from None
    except ValueError as exc:  # weights of another architecture (models.inflate, loading)
        if not str(exc).startswith(("pretrained_2d:", "weights:")):
            raise
        raise UserError(f"model.init: {exc}") from None
    if int(os.environ.get("RANK", "0")) == 0:  # the group is gone by now
        keep = ("run_dir", "iterations", "train_loss", "val", "checkpoint", "time_s",
                "items_per_s", "skipped", "empty_batches", "stopped")  # fmt: skip
        print(json.dumps({k: summary.get(k) for k in keep}, indent=2, default=str))
    return 130 if summary.get("interrupted") else 0
