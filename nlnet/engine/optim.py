"""Optimizer and learning-rate schedule built from ``cfg.optim`` (PyTorch's own classes).

The paper's recipe (Section 4.1): SGD, momentum 0.9, weight decay 1e-4, the rate multiplied by
0.1 at fixed iterations (150k and 300k of 400k); a linear warm-up is optional.  The schedule is
``SequentialLR(LinearLR, MultiStepLR)`` stepped once per iteration, so the rate at iteration
``it`` is ``lr * gamma ** #{s in steps : s <= it}``, times ``warmup_factor + (1 -
warmup_factor) * it / warmup_iters`` during the warm-up.  ``optim.optimizer=adamw`` with
``optim.schedule=onecycle`` is the compact recipe of ``nlnet demo``; ``cosine``
(``CosineAnnealingLR`` to ``min_lr``) and ``poly`` (``PolynomialLR``, ``(1 - t/T) ** power``)
follow the same linear warm-up.  ``optim.layer_decay < 1`` gives the parameters of transformer
block ``i`` of ``L`` the rate ``lr * layer_decay ** (L - i)`` (layer-wise lr decay, as in BEiT
and timm), the embeddings ``layer_decay ** (L + 1)``, the final norm and head ``lr``.

``optim.implementation`` picks PyTorch's kernel for the update: ``default`` (PyTorch's own
choice: the for-loop on the CPU, ``foreach`` on a GPU), ``fused`` (one kernel over all
parameters), ``foreach`` or ``for-loop``. Measured on the CPU (docs/benchmarks/training_step.md):
fused SGD takes half the for-loop's time and gives its weights except for an occasional last-bit
difference in the last few elements of a tensor whose size is not a multiple of the vector
width; fused AdamW a third of the time, equal to float rounding.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import (
    CosineAnnealingLR,
    LinearLR,
    LRScheduler,
    MultiStepLR,
    OneCycleLR,
    PolynomialLR,
    SequentialLR,
)

__all__ = ["IMPLEMENTATIONS", "KERNELS", "NORM_TYPES", "build_optimizer", "build_scheduler",
           "layer_ids", "load_optimizer_state"]  # fmt: skip

#: ``optim.implementation``: the keyword arguments that pick PyTorch's update kernel.
KERNELS: dict[str, dict[str, bool]] = {
    "default": {}, "fused": {"fused": True}, "foreach": {"foreach": True},
    "for-loop": {"foreach": False},
}  # fmt: skip
IMPLEMENTATIONS = tuple(KERNELS)
#: the optimizer-group flags those keyword arguments set
_KERNEL_FLAGS = tuple(sorted({flag for kind in KERNELS.values() for flag in kind}))

NORM_TYPES = (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm)
_EMBED = ("cls_token", "pos_embed", "patch_embed", "patch_norm", "dist_token")


def layer_ids(model: nn.Module) -> tuple[dict[str, int], int]:
    """The layer of every parameter of a transformer for layer-wise lr decay, and ``L``.

    Embeddings are layer 0, the ``i``-th block (``blocks.i``, or Swin's ``stages.s.b`` counted
    over the stages; a patch merging goes with the last block of its stage) layer ``i + 1``,
    everything else (final norm, head) layer ``L + 1``.

    Raises:
        ValueError: the model has no ``blocks.<i>`` or ``stages.<s>.<b>`` parameters.
    """
    names = [n for n, _ in model.named_parameters()]
    flat = {int(m.group(1)) for n in names if (m := re.search(r"(?:^|\.)blocks\.(\d+)\.", n))}
    staged: dict[int, set[int]] = {}
    for n in names:
        if m := re.search(r"(?:^|\.)stages\.(\d+)\.(\d+)\.", n):
            staged.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    offsets, total = {}, 0
    for s in sorted(staged):
        offsets[s], total = total, total + len(staged[s])
    num = len(flat) if flat else total
    if num == 0:
        raise ValueError(
            "optim.layer_decay: the model has no transformer blocks (blocks.<i> or "
            "stages.<s>.<b>); use optim.layer_decay=1.0"
        )
    ids = {}
    for n in names:
        if flat and (m := re.search(r"(?:^|\.)blocks\.(\d+)\.", n)):
            ids[n] = int(m.group(1)) + 1
        elif not flat and (m := re.search(r"(?:^|\.)stages\.(\d+)\.(\d+)\.", n)):
            ids[n] = offsets[int(m.group(1))] + int(m.group(2)) + 1
        elif not flat and (m := re.search(r"(?:^|\.)merges\.(\d+)\.", n)):
            s = int(m.group(1))
            ids[n] = offsets.get(s, 0) + len(staged.get(s, ())) if s in staged else num
        elif n.startswith(_EMBED):
            ids[n] = 0
        else:
            ids[n] = num + 1
    return ids, num


def _param_groups(model: nn.Module, optim: Any) -> list:
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise ValueError("model: no trainable parameter (all frozen?)")
    wd, wd_bn = optim.weight_decay, optim.weight_decay_bn
    norm_ids = set()
    if wd_bn is not None and wd_bn != wd:
        norm_ids = {
            id(p)
            for m in model.modules()
            if isinstance(m, NORM_TYPES)
            for p in m.parameters(recurse=False)
        }
    decay = float(getattr(optim, "layer_decay", 1.0))
    ids, num = layer_ids(model) if decay < 1.0 else ({}, 0)
    mult = float(getattr(optim, "non_local_lr_mult", 1.0))
    block_ids = _non_local_param_ids(model) if mult != 1.0 else set()
    groups: dict[tuple[int, bool, bool], dict[str, Any]] = {}
    for name, p in named:
        layer, is_norm, in_block = ids.get(name, num + 1), id(p) in norm_ids, id(p) in block_ids
        scale = decay ** (num + 1 - layer) if decay < 1.0 else 1.0
        group = groups.setdefault(
            (layer, is_norm, in_block),
            {"params": [], "weight_decay": wd_bn if is_norm else wd,
             "lr_scale": scale * (mult if in_block else 1.0)},
        )  # fmt: skip
        group["params"].append(p)
    return [groups[k] for k in sorted(groups)]


def _non_local_param_ids(model: nn.Module) -> set[int]:
    """``id`` of every parameter inside a non-local block (``optim.non_local_lr_mult``)."""
    from nlnet.layers.nonlocal_block import NonLocalNd

    blocks = [m for m in model.modules() if isinstance(m, NonLocalNd)]
    if not blocks:
        raise ValueError("optim.non_local_lr_mult: the model has no non-local block; use 1.0")
    return {id(p) for m in blocks for p in m.parameters()}


def build_optimizer(model: nn.Module, optim: Any) -> torch.optim.Optimizer:
    """SGD with momentum (Section 4.1) or AdamW over the trainable parameters.

    Args:
        model: the network (only parameters with ``requires_grad`` are optimised).
        optim: ``cfg.optim``; with ``weight_decay_bn`` set, normalisation scales/shifts get that
            decay instead of ``weight_decay``; ``layer_decay < 1`` scales each transformer
            layer's rate (its group's ``lr_scale``); ``implementation`` picks PyTorch's
            update kernel.
    """
    groups = _param_groups(model, optim)
    for g in groups:
        g["lr"] = optim.lr * g["lr_scale"]
    kind = KERNELS[getattr(optim, "implementation", "default")]
    if optim.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=optim.lr, **kind)
    return torch.optim.SGD(
        groups, lr=optim.lr, momentum=optim.momentum, nesterov=optim.nesterov, **kind
    )


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """``optimizer.load_state_dict(state)`` with this run's update kernel: loading takes each
    group's ``fused``/``foreach`` flags from the writer, whose ``optim.implementation`` (or
    device) may have been another, and places the state (AdamW's ``step``) by those flags; so
    the saved groups get this run's flags before they are loaded."""
    kernels = [{k: g[k] for k in _KERNEL_FLAGS if k in g} for g in optimizer.param_groups]
    groups = [{**saved, **kept} for saved, kept in zip(state["param_groups"], kernels)]
    optimizer.load_state_dict({**state, "param_groups": groups})


def build_scheduler(optimizer: torch.optim.Optimizer, optim: Any, max_iters: int) -> LRScheduler:
    """The per-iteration schedule: warm-up + multi-step decay, cosine or poly; or one-cycle."""
    if optim.schedule == "onecycle":
        max_lr = [g["lr"] for g in optimizer.param_groups]
        return OneCycleLR(
            optimizer, max_lr=max_lr, total_steps=max(max_iters, 1), pct_start=optim.pct_start
        )
    warmup = int(optim.warmup_iters)
    rest = max(max_iters - warmup, 1)
    if optim.schedule == "cosine":
        decay: LRScheduler = CosineAnnealingLR(optimizer, T_max=rest, eta_min=optim.min_lr)
    elif optim.schedule == "poly":
        decay = PolynomialLR(optimizer, total_iters=rest, power=optim.power)
    else:
        decay = MultiStepLR(optimizer, [s - warmup for s in optim.steps], gamma=optim.gamma)
    if warmup == 0:
        return decay
    ramp = LinearLR(optimizer, optim.warmup_factor, 1.0, total_iters=warmup)
    return SequentialLR(optimizer, [ramp, decay], milestones=[warmup])
