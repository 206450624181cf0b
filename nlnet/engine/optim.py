"""Optimizer and learning-rate schedule built from ``cfg.optim`` (PyTorch's own classes).

The paper's recipe (Section 4.1): SGD, momentum 0.9, weight decay 1e-4, the rate multiplied by
0.1 at fixed iterations (150k and 300k of 400k); a linear warm-up is optional.  The schedule is
``SequentialLR(LinearLR, MultiStepLR)`` stepped once per iteration, so the rate at iteration
``it`` is ``lr * gamma ** #{s in steps : s <= it}``, times ``warmup_factor + (1 -
warmup_factor) * it / warmup_iters`` during the warm-up.  ``optim.optimizer=adamw`` with
``optim.schedule=onecycle`` is the compact recipe of ``nlnet demo``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LinearLR, LRScheduler, MultiStepLR, OneCycleLR, SequentialLR

__all__ = ["NORM_TYPES", "build_optimizer", "build_scheduler"]

NORM_TYPES = (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm)


def _param_groups(model: nn.Module, weight_decay: float, weight_decay_bn: float | None) -> list:
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model: no trainable parameter (all frozen?)")
    if weight_decay_bn is None or weight_decay_bn == weight_decay:
        return [{"params": params, "weight_decay": weight_decay}]
    norm_ids = {
        id(p)
        for m in model.modules()
        if isinstance(m, NORM_TYPES)
        for p in m.parameters(recurse=False)
    }
    groups = [
        {"params": [p for p in params if id(p) not in norm_ids], "weight_decay": weight_decay},
        {"params": [p for p in params if id(p) in norm_ids], "weight_decay": weight_decay_bn},
    ]
    return [g for g in groups if g["params"]]


def build_optimizer(model: nn.Module, optim: Any) -> torch.optim.Optimizer:
    """SGD with momentum (Section 4.1) or AdamW over the trainable parameters.

    Args:
        model: the network (only parameters with ``requires_grad`` are optimised).
        optim: ``cfg.optim``; with ``weight_decay_bn`` set, normalisation scales/shifts get that
            decay instead of ``weight_decay``.
    """
    groups = _param_groups(model, optim.weight_decay, optim.weight_decay_bn)
    if optim.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=optim.lr)
    return torch.optim.SGD(groups, lr=optim.lr, momentum=optim.momentum, nesterov=optim.nesterov)


def build_scheduler(optimizer: torch.optim.Optimizer, optim: Any, max_iters: int) -> LRScheduler:
    """The per-iteration schedule: warm-up + multi-step decay, or one-cycle over ``max_iters``."""
    if optim.schedule == "onecycle":
        return OneCycleLR(
            optimizer, max_lr=optim.lr, total_steps=max(max_iters, 1), pct_start=optim.pct_start
        )
    warmup = int(optim.warmup_iters)
    decay = MultiStepLR(optimizer, [s - warmup for s in optim.steps], gamma=optim.gamma)
    if warmup == 0:
        return decay
    ramp = LinearLR(optimizer, optim.warmup_factor, 1.0, total_iters=warmup)
    return SequentialLR(optimizer, [ramp, decay], milestones=[warmup])
