"""The digits video task of ``nlnet demo``: C2D, C2D + 1 non-local block and a tiny video
transformer with joint (``vivit_tiny``) or divided (``vivit_tiny_divided``) space-time attention,
trained with the demo's own recipe.

Uses the demo's data and training functions unchanged. C2D and C2D+NL start from the demo's 2D
pre-trained backbone (as in ``nlnet demo``); the transformer has no 2D counterpart and starts
from scratch (its parameter count is printed next to the others).

    python benchmarks/video_transformer_demo.py --seed 0 [--epochs N] [--models a,b,c]
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def main() -> None:
    from nlnet.analysis.cost import count_params
    from nlnet.data.digits.cache import default_cache_dir, prepare_digits
    from nlnet.data.digits.decoded import load_split
    from nlnet.demo.pretrain import pretrain_2d
    from nlnet.demo.video import DemoSettings, train_model
    from nlnet.engine.hooks.curves import top1
    from nlnet.models import create_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--models", default="c2d_tiny,c2d_tiny_nl1,vivit_tiny,vivit_tiny_divided")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    settings = DemoSettings.default(args.seed)
    if args.epochs:
        settings.epochs = args.epochs
    task = settings.task
    root = prepare_digits(
        task, default_cache_dir() / f"digits-{task.fingerprint()}", progress=False
    )
    data = {s: load_split(root, s, task, False) for s in ("train", "val", "test")}
    device = torch.device("cpu")
    names = args.models.split(",")
    needs_2d = any(n.startswith("c2d") for n in names)
    init = pretrain_2d(settings, device, args.seed, progress=False)[0] if needs_2d else None
    rows = []
    for name in names:
        conv = name.startswith("c2d")
        t0 = time.perf_counter()
        model, log = train_model(
            name, settings, data, device, args.seed, progress=False, init=init if conv else None
        )
        acc = top1(model, *data["test"], device)
        probe = create_model(name, num_classes=task.num_classes, width=settings.width)
        rows.append(
            {
                "model": name,
                "params": count_params(probe),
                "pretrained_2d": conv,
                "test_top1": round(100 * acc, 1),
                "val_top1": round(100 * log["val_top1"][-1], 1),
                "train_time_s": round(time.perf_counter() - t0, 1),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"seed": args.seed, "epochs": settings.epochs, "results": rows}, indent=2))


if __name__ == "__main__":
    main()
