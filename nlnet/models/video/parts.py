"""Pieces of the video ResNet that differ between implementations of "Non-local Neural
Networks" (Wang et al., CVPR 2018, arXiv:1711.07971): stem pooling, the per-stage block plan
and the fully-convolutional test head (Section 4.1 "Inference"; the released test net).

Used by :class:`nlnet.models.video.resnet3d.ResNet3d` (``pooling``, ``nl_location``/``nl_options``/
``nl_stage_options``, ``head``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["POOLINGS", "HEADS", "VIDEO_BLOCK_DEFAULTS", "stem_pools", "block_plan",
           "fully_conv_head"]  # fmt: skip

#: ``pooling`` options of :class:`ResNet3d`.
POOLINGS: tuple[str, ...] = ("padded", "caffe2", "pyslowfast")
#: ``head`` options of :class:`ResNet3d`.
HEADS: tuple[str, ...] = ("global", "fully_conv")
#: The paper's video block (Section 4.1): embedded Gaussian, C/2, (1, 2, 2) pooling, BN gamma 0.
VIDEO_BLOCK_DEFAULTS: dict[str, Any] = {
    "instantiation": "embedded_gaussian",
    "sub_sample": True,
    "norm": "bn",
}


def stem_pools(pooling: str, sp1: int, sp2: int) -> tuple[nn.Module, nn.Module]:
    """``pool1`` and ``pool2`` for temporal strides ``sp1``/``sp2`` (Table 1 or released code)."""
    pool2 = nn.MaxPool3d((sp2, 1, 1), stride=(sp2, 1, 1)) if sp2 > 1 else nn.Identity()
    if pooling == "caffe2":  # window = stride in time, no padding, floor (resnet_video*.py)
        return nn.MaxPool3d((sp1, 3, 3), stride=(sp1, 2, 2)), pool2
    pk1 = 3 if sp1 > 1 else 1
    pool1 = nn.MaxPool3d((pk1, 3, 3), stride=(sp1, 2, 2), padding=(pk1 // 2, 1, 1))
    if pooling == "pyslowfast":  # PySlowFast: padded 1x3x3 stem pool, unpadded pathway0_pool
        return pool1, pool2
    if sp2 > 1:  # pool2: 3x1x1 max, stride (2, 1, 1) between res2 and res3
        return pool1, nn.MaxPool3d((3, 1, 1), stride=(sp2, 1, 1), padding=(1, 0, 0))
    return pool1, nn.Identity()


def block_plan(
    stage_names: Sequence[str],
    layers: Sequence[int],
    location: Sequence[Sequence[int]] | None,
    options: Mapping[str, Any] | None,
    stage_options: Mapping[str, Mapping[str, Any]] | None,
) -> list[dict[int, dict[str, Any]]]:
    """Per stage: residual-block index -> options of the non-local block after it."""
    stage_options = dict(stage_options or {})
    unknown = sorted(set(stage_options) - set(stage_names))
    if unknown:
        raise ValueError(f"nl_stage_options: unknown stage(s) {unknown}; expected res2..res5")
    if location is None:
        if options or stage_options:
            raise ValueError(
                "nl_options/nl_stage_options given to a model without non-local blocks; "
                "pass nl_location (or nl_at) to place blocks"
            )
        return [{} for _ in layers]
    location = [list(stage) for stage in location]
    if len(location) != 4:
        raise ValueError(f"nl_location: expected 4 lists (res2..res5), got {location!r}")
    plan: list[dict[int, dict[str, Any]]] = []
    for stage, n, where in zip(stage_names, layers, location):
        bad = [i for i in where if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n]
        if bad or len(set(where)) != len(where):
            raise ValueError(
                f"nl_location: {stage} has {n} residual blocks; expected distinct indices in "
                f"0..{n - 1}, got {where!r}"
            )
        opts = {
            **VIDEO_BLOCK_DEFAULTS,
            **dict(options or {}),
            **dict(stage_options.get(stage) or {}),
        }
        plan.append({i: opts for i in sorted(where)})
    return plan


def fully_conv_head(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The released fully-convolutional test head on res5 features ``(B, C, T, H, W)``.

    A ``T x 7 x 7`` average pool with stride 1 (``pool5``; the window is clipped to a smaller
    map), the classifier at every remaining position (the test net's ``1x1x1`` ``pred``
    convolution), a softmax per position, and the mean over positions. Returns the log of the
    mean probabilities ``(B, num_classes)``, so ``softmax`` of the result is that mean exactly.
    """
    kernel = (x.shape[2], min(7, x.shape[3]), min(7, x.shape[4]))
    pooled = F.avg_pool3d(x, kernel, stride=1)  # (B, C, 1, H', W')
    logits = F.linear(pooled.flatten(2).transpose(1, 2), weight, bias)  # (B, P, classes)
    return torch.log(torch.softmax(logits, dim=-1).mean(dim=1))
