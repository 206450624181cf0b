"""Precise BatchNorm statistics: before each evaluation, replace the running BN statistics by
the exact mean and variance of the BN inputs over ``N`` training batches.

The running statistics of BN are an exponential average of per-batch statistics taken while the
weights were still changing; PySlowFast (``BN.USE_PRECISE_STATS``) and detectron2 (``PreciseBN``)
recompute them with the final weights, and the released non-local code did so before testing.
``torch.optim.swa_utils.update_bn`` and detectron2 average per-batch variances, which is not the
variance of the whole pass (it misses the spread of the batch means); here each BN layer sums
``x`` and ``x**2`` per channel in float64 over all batches (and all processes), so the result is
the full-pass statistics exactly: mean ``E[x]``, variance ``N/(N-1) (E[x**2] - E[x]**2)``.
The network runs in its training mode (each BN normalises with its batch statistics, as in
training; frozen BN layers are left alone), without gradients, with the random generators forked (the training run is unchanged).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from nlnet.data.loader import usable_workers
from nlnet.data.seeding import ItemKey, SeededDataset, seed_worker
from nlnet.engine import distributed as du
from nlnet.engine.checkpoint.file_io import unwrap_model
from nlnet.engine.hooks.base import HookBase, RunView
from nlnet.engine.runlog import say

__all__ = ["PreciseBNHook", "precise_bn_stats"]

_BN = nn.modules.batchnorm._BatchNorm


@torch.no_grad()
def precise_bn_stats(
    model: nn.Module, batches: Iterable[Any], forward: Callable[[nn.Module, Any], Any]
) -> int:
    """Set the running mean/var of every BN layer in train mode to the full-pass statistics.

    Args:
        model: the network; BN layers in eval mode (frozen BN) are left alone.
        batches: the batches to pass (e.g. ``precise_bn.batches`` training batches).
        forward: ``(model, batch) -> Any``, runs the network on a batch.

    Returns:
        The number of BN layers updated (0 when there is none in train mode).
    """
    layers = [m for m in unwrap_model(model).modules() if isinstance(m, _BN) and m.training]
    if not layers:
        return 0
    sums: dict[nn.Module, list[torch.Tensor]] = {}

    def record(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        x = inputs[0].detach().double().transpose(0, 1).reshape(inputs[0].shape[1], -1)
        n = torch.tensor(float(x.shape[1]), dtype=torch.float64, device=x.device)
        acc = torch.stack([x.sum(1), (x * x).sum(1), n.expand(x.shape[0])])
        if module in sums:
            sums[module][0] += acc
        else:
            sums[module] = [acc]

    handles = [m.register_forward_pre_hook(record) for m in layers]
    try:
        for batch in batches:
            forward(model, batch)
    finally:
        for h in handles:
            h.remove()
    for m in layers:
        acc = sums.get(m, [None])[0]
        if acc is None:
            continue
        total, total_sq, n = du.all_reduce_sum(acc).unbind(0)
        mean = total / n
        var = (total_sq / n - mean * mean).clamp_min(0) * n / (n - 1).clamp_min(1)
        m.running_mean.copy_(mean.to(m.running_mean.dtype))
        m.running_var.copy_(var.to(m.running_var.dtype))
    return len(layers)


class PreciseBNHook(HookBase):
    """Before each validation, exact BN statistics over ``precise_bn.batches`` training batches.

    The batches are a fixed function of ``(train.seed, iteration)`` (items seeded like the
    training ones), fetched with the random generators forked, so a resumed run is unchanged.
    """

    name = "precise_bn"
    events = ("before_eval",)

    def __init__(self, batches: int) -> None:
        self.batches = int(batches)

    def before_eval(self, run: RunView) -> None:
        tc = run.cfg.train
        n_items = min(self.batches * tc.batch_size, len(run.train_dataset))
        gen = torch.Generator().manual_seed(tc.seed * 7_919 + run.state.iteration + run.info.rank)
        order = torch.randperm(len(run.train_dataset), generator=gen)[:n_items].tolist()
        seeds = torch.randint(0, 2**62, (n_items,), generator=gen).tolist()
        workers = usable_workers(0 if tc.workers == "auto" else tc.workers)  # auto: in-process
        loader = DataLoader(
            SeededDataset(run.train_dataset), batch_size=tc.batch_size,
            sampler=[ItemKey(i, s) for i, s in zip(order, seeds)], num_workers=workers,
            collate_fn=run.task.collate, worker_init_fn=seed_worker,
            generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
        devices = [run.device] if run.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):  # the model is in its training mode here
            updated = precise_bn_stats(
                run.state.model, loader, lambda m, b: run.task.loss(m, b, run.device)
            )
        if not updated:
            say("precise_bn: no BatchNorm layer in train mode; nothing to update", run.main)
