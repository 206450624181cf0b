"""Run the dense (segmentation) demo with a plain optimiser loop, before the engine wires it.

``nlnet.dense_demo.run_dense_demo`` takes the training function from its caller; the CLI passes
the engine's loop. This script passes the simplest loop with the demo's schedule -- AdamW
(weight decay 1e-4), one-cycle learning rate (10% warm-up), shuffled batches -- so the demo's
figures can be measured on their own.

Usage::

    python benchmarks/dense_demo.py --seeds 0 1 2 --out runs/dense-demo
    python benchmarks/dense_demo.py --epochs 2 --num-train 200      # quick look
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from nlnet.data.digits_dense import DenseDigitsConfig
from nlnet.dense_demo import run_dense_demo


def plain_fit(
    model: nn.Module,
    task,
    train_set: Dataset,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
) -> list[float]:
    """AdamW + one-cycle schedule over ``epochs``; returns the mean loss of each epoch."""
    loader = DataLoader(
        train_set,
        batch_size=batch_size,
        shuffle=True,
        collate_fn=task.collate,
        generator=torch.Generator().manual_seed(seed),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, lr, total_steps=epochs * len(loader), pct_start=0.1
    )
    model.train()
    history = []
    for _ in range(epochs):
        total = 0.0
        for batch in loader:
            loss, _ = task.loss(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item()
        history.append(total / len(loader))
    return history


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--num-train", type=int, default=DenseDigitsConfig.num_train)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="runs/dense-demo")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    run_dense_demo(
        "segmentation",
        args.seeds,
        fit=plain_fit,
        out_dir=args.out,
        data=DenseDigitsConfig(num_train=args.num_train),
        epochs=args.epochs,
    )


if __name__ == "__main__":
    main()
