"""Multiply-adds of the registered detectors (Section 6: "< 5% computation" for one block).

A whole torchvision detector cannot run on the ``meta`` device (proposal selection and NMS have
data-dependent sizes), so each part of the *real* registered model runs on ``meta`` with the
sizes it sees at inference: the backbone with FPN on the padded image, the RPN head on every
pyramid level, the box head on ``num_proposals`` RoIs of 7x7 and the mask / keypoint head on
``num_detections`` RoIs of 14x14 (torchvision's defaults: 1000 proposals after NMS at test time,
100 detections). RoIAlign, NMS, anchor decoding and the resize are not counted. MACs = FLOPs / 2
(:class:`torch.utils.flop_counter.FlopCounterMode`), as in :mod:`nlnet.analysis.cost`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["PAPER_TABLE5", "PAPER_TABLE6", "detector_cost"]

#: Table 5 of the paper (AP box, AP mask) for the baselines and "+1 NL".
PAPER_TABLE5: dict[str, tuple[float, float]] = {
    "maskrcnn_r50_fpn": (38.0, 34.6),
    "maskrcnn_r50_fpn_nl": (39.0, 35.5),
    "maskrcnn_r101_fpn": (39.5, 36.0),
    "maskrcnn_r101_fpn_nl": (40.8, 37.1),
}
#: Table 6 of the paper (AP keypoints).
PAPER_TABLE6: dict[str, float] = {
    "keypointrcnn_r101_fpn": 65.1,
    "keypointrcnn_r101_fpn_nlhead": 66.0,
    "keypointrcnn_r101_fpn_nlhead_nl1": 66.5,
}


def _macs(fn: Callable[[], object], per_block: dict[str, int]) -> int:
    """MACs of ``fn()``; adds the MACs of each non-local block (modules named ``*.non_local``,
    where :func:`~nlnet.models.surgery.insert_non_local` puts them) to ``per_block``."""
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        fn()
    for key, ops in counter.get_flop_counts().items():
        if key.endswith(".non_local"):
            per_block[key] = per_block.get(key, 0) + sum(ops.values()) // 2
    return counter.get_total_flops() // 2


def detector_cost(
    model: str | Callable[[], nn.Module],
    image_size: Sequence[int] = (800, 1333),
    *,
    num_proposals: int = 1000,
    num_detections: int = 100,
) -> dict[str, int]:
    """MACs per part of a torchvision R-CNN detector at inference.

    Args:
        model: a registered detector name (built on ``meta``) or a builder.
        image_size: ``(H, W)`` after resizing; padded up to a multiple of 32 as torchvision does.
        num_proposals: RoIs through the box head.
        num_detections: RoIs through the mask / keypoint head.

    Returns:
        ``backbone`` (ResNet + FPN), ``rpn``, ``box_head``, ``mask_head`` (if any),
        ``keypoint_head`` (if any), ``non_local`` (all blocks, included in their parts) and
        ``total``.
    """
    h, w = (int(math.ceil(s / 32) * 32) for s in image_size)
    with torch.device("meta"):
        if isinstance(model, str):
            from nlnet.models.registry import create_model

            model = create_model(model)
        else:
            model = model()
        model.eval()
        per_block: dict[str, int] = {}
        roi = model.roi_heads
        feats: dict[str, torch.Tensor] = {}
        out = {
            "backbone": _macs(
                lambda: feats.update(model.backbone(torch.empty(1, 3, h, w))), per_block
            )
        }
        out["rpn"] = _macs(lambda: model.rpn.head(list(feats.values())), per_block)
        c = int(getattr(model.backbone, "out_channels", 256))

        def pooled(pool: nn.Module, default: int) -> tuple[int, int]:
            size = getattr(pool, "output_size", default)
            return (size, size) if isinstance(size, int) else tuple(size)

        box = pooled(roi.box_roi_pool, 7)
        out["box_head"] = _macs(
            lambda: roi.box_predictor(roi.box_head(torch.empty(num_proposals, c, *box))),
            per_block,
        )
        for part in ("mask", "keypoint"):
            head = getattr(roi, f"{part}_head", None)
            if head is not None:
                pred = getattr(roi, f"{part}_predictor")
                size = pooled(getattr(roi, f"{part}_roi_pool"), 14)
                out[f"{part}_head"] = _macs(
                    lambda head=head, pred=pred, size=size: pred(
                        head(torch.empty(num_detections, c, *size))
                    ),
                    per_block,
                )
    out["total"] = sum(out.values())
    out["non_local"] = sum(per_block.values())
    return out


def detector_cost_table(name: str, image_size: Sequence[int] = (800, 1333)) -> str:
    """``nlnet cost`` text for a registered detector: parts, the blocks' share, the paper's AP."""
    from nlnet.models.registry import get_model_entry

    cfg = get_model_entry(name).default_cfg
    plain = "keypointrcnn_r101_fpn" if "keypoints" in cfg.outputs else f"maskrcnn_r{cfg.depth}_fpn"
    if cfg.get("depth") is None:  # the tiny detectors: the baseline is the name without _nl
        plain = name.removesuffix("_nl")
    cost, base = detector_cost(name, image_size), detector_cost(plain, image_size)
    h, w = image_size
    lines = [f"{name}  input {h}x{w} (padded to /32), inference, GMACs"]
    lines += [f"  {k:<14} {v / 1e9:9.2f}" for k, v in cost.items()]
    if cost["non_local"]:
        extra = (cost["total"] - base["total"]) / base["total"]
        lines.append(f"  non-local blocks add {extra:+.1%} to {plain} (paper, Sec. 6: < 5%)")
    if name in PAPER_TABLE5:
        box, mask = PAPER_TABLE5[name]
        lines.append(f"  paper Table 5: AP box {box}, AP mask {mask}")
    if name in PAPER_TABLE6:
        lines.append(f"  paper Table 6: AP keypoints {PAPER_TABLE6[name]}")
    return "\n".join(lines)
