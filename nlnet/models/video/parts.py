"""Pieces of the video ResNet that differ between implementations of "Non-local Neural
Networks" (Wang et al., CVPR 2018, arXiv:1711.07971): stem pooling, the per-stage block plan
and the fully-convolutional test head (Section 4.1 "Inference"; the released test net).

Used by :class:`nlnet.models.video.resnet3d.ResNet3d` (``pooling``, ``placement``/``block``,
``head``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from nlnet.layers.block_spec import BlockLike
from nlnet.layers.pooling import MaxPool3d
from nlnet.models.placement import Placement, check_no_block, family_block
from nlnet.models.resnet_layout import STAGE_NAMES

__all__ = ["POOLINGS", "HEADS", "stem_pools", "block_plan",
           "fully_conv_head"]  # fmt: skip

#: ``pooling`` options of :class:`ResNet3d`.
POOLINGS: tuple[str, ...] = ("padded", "caffe2", "pyslowfast", "2x2", "none")
#: ``head`` options of :class:`ResNet3d`.
HEADS: tuple[str, ...] = ("global", "fully_conv")


def stem_pools(pooling: str, sp1: int, sp2: int) -> tuple[nn.Module, nn.Module]:
    """``pool1`` and ``pool2`` for temporal strides ``sp1``/``sp2`` (Table 1 or released code)."""
    if pooling == "none":  # R3D's stem: no pooling
        return nn.Identity(), nn.Identity()
    pool2 = MaxPool3d((sp2, 1, 1), stride=(sp2, 1, 1)) if sp2 > 1 else nn.Identity()
    if pooling == "caffe2":  # window = stride in time, no padding, floor (resnet_video*.py)
        return MaxPool3d((sp1, 3, 3), stride=(sp1, 2, 2)), pool2
    pk1 = 3 if sp1 > 1 else 1
    if pooling == "2x2":  # small frames: a 2x2 window, no spatial padding
        pool1 = MaxPool3d((pk1, 2, 2), stride=(sp1, 2, 2), padding=(pk1 // 2, 0, 0))
    else:
        pool1 = MaxPool3d((pk1, 3, 3), stride=(sp1, 2, 2), padding=(pk1 // 2, 1, 1))
    if pooling == "pyslowfast":  # PySlowFast: padded 1x3x3 stem pool, unpadded pathway0_pool
        return pool1, pool2
    if sp2 > 1:  # pool2: 3x1x1 max, stride (2, 1, 1) between res2 and res3
        return pool1, MaxPool3d((3, 1, 1), stride=(sp2, 1, 1), padding=(1, 0, 0))
    return pool1, nn.Identity()


def block_plan(
    layers: Sequence[int], placement: Placement | None, block: BlockLike
) -> list[dict[int, dict[str, Any]]]:
    """Per stage: residual-block index -> keyword options of the non-local block after it
    (``block`` over the block's defaults, the paper's video block, Sec. 4.1; the placement's
    per-stage changes on top)."""
    if placement is None:
        check_no_block(block)
        return [{} for _ in layers]
    where = placement.stage_indices(layers)
    if where is None:
        raise ValueError(
            f"placement: {placement.resolve(layers)} are not all residual blocks "
            "layer{1-4}.{i}; build_video_resnet places blocks elsewhere after construction"
        )
    options = family_block(block)
    plan: list[dict[int, dict[str, Any]]] = []
    for (stage, tv_name), n, indices in zip(STAGE_NAMES.items(), layers, where):
        bad = [i for i in indices if not 0 <= i < n]
        if bad or len(set(indices)) != len(indices):
            raise ValueError(
                f"placement: {stage} has {n} residual blocks; expected distinct indices in "
                f"0..{n - 1}, got {indices!r}"
            )
        opts = placement.options_for(tv_name, options).kwargs()
        plan.append({i: opts for i in sorted(indices)})
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
