"""Evaluate a checkpoint with multi-clip testing (Section 4.1: 10 clips, averaged softmax).

The config defaults to the one stored in the checkpoint; ``--config`` and ``KEY=VALUE``
overrides change it (e.g. the data root, ``eval.clips=30``, ``eval.crops=3``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

EXAMPLES = """examples:
  nlnet eval --checkpoint runs/mine/checkpoints/final.pt
  nlnet eval --checkpoint runs/mine/checkpoints/final.pt --split test eval.clips=10 eval.crops=3
  nlnet eval --checkpoint final.pt --output eval.json   (+ per-class top-1, eval.confusion.png)
  nlnet eval --config kinetics/c2d_r50_nl5 --checkpoint k400.pt data.root=/data/kinetics400
  torchrun --nproc_per_node=4 -m nlnet eval --checkpoint runs/mine/checkpoints/final.pt
"""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", "-k", required=True, help="a .pt written by nlnet train")
    parser.add_argument("--config", "-c", help="YAML file or shipped name (default: the ckpt's)")
    parser.add_argument("--split", help="dataset split (default: eval.split, 'val')")
    parser.add_argument("--device", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--output", help="also write the metrics to this JSON file")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides")


def main(args: argparse.Namespace) -> int:
    from nlnet.commands.common import data_backend_arg, device_arg
    from nlnet.engine.checkpoint import check_rebuildable, load_checkpoint
    from nlnet.engine.config import ConfigError, apply_overrides, config_from_dict, load_config
    from nlnet.engine.evaluation import evaluate

    overrides = list(args.overrides)
    if args.device:
        overrides.append(f"train.device={args.device}")
    ckpt = load_checkpoint(args.checkpoint)
    check_rebuildable(ckpt, args.checkpoint)  # a network of the user's own: one line
    try:
        if args.config:
            cfg = load_config(args.config, overrides)
        else:
            stored = ckpt.get("config") or {}
            if not stored:
                raise ConfigError(f"checkpoint {args.checkpoint!r} holds no config; pass --config")
            cfg = config_from_dict(apply_overrides(stored, overrides))
        device_arg(cfg.train.device)  # a clear error for --device cuda without CUDA
        data_backend_arg(cfg)
        from nlnet.models.registry import get_model_entry

        get_model_entry(cfg.model.name)  # a typo in model.name: one line, not ignored
        if cfg.model.name != ckpt.get("model_name", cfg.model.name):
            raise ConfigError(
                f"model.name={cfg.model.name!r} but the checkpoint holds "
                f"{ckpt.get('model_name')!r}; drop the override or pass that checkpoint's config"
            )
    except ConfigError:
        raise
    except (ValueError, FileNotFoundError) as exc:
        text = str(exc)
        raise ConfigError(f"model.{text}" if text.startswith("name: unknown") else text) from None
    metrics = evaluate(cfg, ckpt, split=args.split, details=True)
    metrics["checkpoint"] = str(args.checkpoint)
    if int(os.environ.get("RANK", "0")) == 0:  # the group is gone by now
        names = list(ckpt.get("class_names") or cfg.class_names or [])
        shown = {k: v for k, v in metrics.items() if k not in ("per_class_top1", "confusion")}
        worst = worst_classes(metrics, names)
        if worst:  # before the JSON, which stays the last thing printed
            what = "video top-1" if "video_top1" in metrics else "top-1"
            print(f"worst classes ({what}): " + ", ".join(f"{n} {a:.1f}%" for n, a in worst))
        print(json.dumps(shown, indent=2, default=str))
        if args.output:
            out = Path(args.output)
            out.parent.mkdir(parents=True, exist_ok=True)
            if "per_class_top1" in metrics:
                metrics["class_names"] = names
                confusion_figure(metrics["confusion"], names, out.with_suffix(".confusion.png"))
            out.write_text(json.dumps(metrics, indent=2, default=str) + "\n")
    return 0


def worst_classes(metrics: dict, names: list[str], k: int = 3) -> list[tuple[str, float]]:
    """The ``k`` classes with the lowest (video) top-1 (classes without samples left out)."""
    acc = metrics.get("per_class_top1") or []
    pairs = [(names[i] if i < len(names) else f"class_{i}", a) for i, a in enumerate(acc)]
    return sorted((p for p in pairs if p[1] is not None), key=lambda p: p[1])[:k]


def confusion_figure(matrix: list[list[int]], names: list[str], path: Path) -> None:
    """The confusion matrix (rows: true, columns: predicted) as a PNG, counts written in the
    cells when there are few classes."""
    from nlnet.analysis.plotting import pyplot

    plt = pyplot()
    n = len(matrix)
    fig, ax = plt.subplots(figsize=(2 + 0.4 * min(n, 40), 1.5 + 0.4 * min(n, 40)))
    image = ax.imshow(matrix, cmap="Blues")
    fig.colorbar(image, ax=ax, label="videos")
    if n <= 20:
        labels = [names[i] if i < len(names) else str(i) for i in range(n)]
        ax.set_xticks(range(n), labels, rotation=90)
        ax.set_yticks(range(n), labels)
        for i in range(n):
            for j in range(n):
                ax.text(j, i, str(matrix[i][j]), ha="center", va="center", fontsize=7)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
