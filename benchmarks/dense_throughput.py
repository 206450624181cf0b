"""Images per second of dense models with and without the non-local block (training, inference).

For each pair (baseline, non-local) the same batch runs through ``--iters`` timed iterations
after ``--warmup`` untimed ones: a training step (forward, per-pixel cross-entropy or the
detector's losses, backward, SGD step) and an inference forward pass under ``torch.no_grad``.
The ratio column is the non-local model's images/s over the baseline's, measured in the same run.

Usage::

    python benchmarks/dense_throughput.py                              # tiny segmentation, 64x64
    python benchmarks/dense_throughput.py --pair seg_r50 seg_r50_nl --size 256 --batch 2
    python benchmarks/dense_throughput.py --pair maskrcnn_r50_fpn maskrcnn_r50_fpn_nl \
        --size 320 --batch 1 --iters 3
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from nlnet.models import create_model, get_model_entry


def _batch(name: str, batch: int, size: int, classes: int):
    g = torch.Generator().manual_seed(0)
    images = torch.rand(batch, 3, size, size, generator=g)
    if get_model_entry(name).default_cfg.task == "segmentation":
        return images, torch.randint(0, classes, (batch, size, size), generator=g)
    targets = []
    for _ in range(batch):
        box = torch.tensor([[size * 0.2, size * 0.25, size * 0.7, size * 0.8]])
        mask = torch.zeros(1, size, size, dtype=torch.uint8)
        mask[0, int(size * 0.25) : int(size * 0.8), int(size * 0.2) : int(size * 0.7)] = 1
        targets.append({"boxes": box, "labels": torch.tensor([1]), "masks": mask})
    return list(images), targets


def _step(model, images, targets, opt, train: bool) -> None:
    if isinstance(images, torch.Tensor):
        if train:
            F.cross_entropy(model(images), targets).backward()
        else:
            model(images)
    elif train:
        sum(model(images, targets).values()).backward()
    else:
        model(images)
    if train:
        opt.step()
        opt.zero_grad(set_to_none=True)


def measure(name: str, args: argparse.Namespace) -> dict[str, float]:
    torch.manual_seed(0)
    kw = {"num_classes": args.classes}
    if get_model_entry(name).default_cfg.task != "segmentation":
        kw.update(min_size=args.size, max_size=args.size)
    model = create_model(name, **kw)
    images, targets = _batch(name, args.batch, args.size, args.classes)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    out = {}
    for mode in ("train", "infer"):
        model.train(mode == "train")
        with torch.set_grad_enabled(mode == "train"):
            for _ in range(args.warmup):
                _step(model, images, targets, opt, mode == "train")
            start = time.perf_counter()
            for _ in range(args.iters):
                _step(model, images, targets, opt, mode == "train")
            out[mode] = args.iters * args.batch / (time.perf_counter() - start)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pair", nargs=2, default=["seg_tiny", "seg_tiny_nl"])
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rows = {name: measure(name, args) for name in args.pair}
    base = rows[args.pair[0]]
    print(f"{args.size}x{args.size}, batch {args.batch}, {args.threads} threads (images/s)")
    print(f"{'model':<22} {'train':>8} {'ratio':>6} {'infer':>8} {'ratio':>6}")
    for name, r in rows.items():
        print(
            f"{name:<22} {r['train']:>8.1f} {r['train'] / base['train']:>6.2f} "
            f"{r['infer']:>8.1f} {r['infer'] / base['infer']:>6.2f}"
        )


if __name__ == "__main__":
    main()
