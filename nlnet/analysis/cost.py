"""Parameters and multiply-adds of a model, per stage and per non-local block.

Costs are counted with :class:`torch.utils.flop_counter.FlopCounterMode` while the model runs on
the ``meta`` device (no memory, no compute). Like "Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971) (Table 2e, Section
5.1, Section 6) we report multiply-adds: ``MACs = FLOPs / 2`` of convolutions, matrix products
(``mm``/``bmm``, ``scaled_dot_product_attention``) and linear layers; BatchNorm, ReLU, pooling and
softmax are not counted, which is the usual convention of the ResNet/non-local papers.

``nlnet cost MODEL --input 32x224x224`` prints the breakdown; ``--compare OTHER`` prints the
ratios to another model and ``--table2e`` reproduces Table 2e of the paper (see ``docs/models.md``
for the figures).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from nlnet.layers.nonlocal_block import NonLocalNd
from nlnet.models.resnet_layout import STAGE_NAMES

__all__ = [
    "CostRow",
    "CostReport",
    "count_params",
    "model_cost",
    "parse_input_size",
    "table2e",
    "TABLE2E_PAPER",
    "mask_rcnn_like_cost",
]


#: Table 2e of the paper: (params, FLOPs) relative to the ResNet-101 C2D baseline.
TABLE2E_PAPER: dict[str, tuple[float, float]] = {
    "c2d_r101": (1.0, 1.0),
    "i3d_r101": (1.5, 1.8),
    "i3d311_r101": (1.2, 1.5),
    "c2d_r101_nl5": (1.2, 1.2),
}

_STAGE_ALIASES = {layer: res for res, layer in STAGE_NAMES.items()}  # layer1 -> res2


@dataclass
class CostRow:
    """Cost of one part of a model."""

    name: str
    params: int
    macs: int


@dataclass
class CostReport:
    """Cost of a model for one input size (batch 1 unless stated)."""

    model: str
    input_size: tuple[int, ...]
    params: int
    macs: int
    stages: list[CostRow] = field(default_factory=list)
    non_local: list[CostRow] = field(default_factory=list)

    def table(self) -> str:
        """A text table: stages, non-local blocks and the total, in millions / GMACs."""
        lines = [
            f"{self.model}  input {'x'.join(map(str, self.input_size))}",
            f"{'part':<28} {'params (M)':>11} {'GMACs':>10}",
        ]
        for r in self.stages:
            lines.append(f"{r.name:<28} {r.params / 1e6:>11.3f} {r.macs / 1e9:>10.3f}")
        for r in self.non_local:
            lines.append(f"  nl {r.name:<24} {r.params / 1e6:>11.3f} {r.macs / 1e9:>10.3f}")
        lines.append(f"{'total':<28} {self.params / 1e6:>11.3f} {self.macs / 1e9:>10.3f}")
        return "\n".join(lines)


def count_params(model: nn.Module, prefix: str = "") -> int:
    """Number of parameters of ``model`` (those whose name starts with ``prefix``)."""
    return sum(p.numel() for n, p in model.named_parameters() if n.startswith(prefix))


def parse_input_size(text: str | Sequence[int]) -> tuple[int, ...]:
    """Parse ``"32x224x224"`` (video, T x H x W) or ``"800x1333"`` (image, H x W)."""
    if isinstance(text, str):
        try:
            size = tuple(int(v) for v in text.lower().replace(",", "x").split("x"))
        except ValueError as err:
            raise ValueError(
                f"input: expected sizes like 32x224x224 or 800x1333, got {text!r}"
            ) from err
    else:
        size = tuple(int(v) for v in text)
    if len(size) not in (2, 3) or min(size) < 1:
        raise ValueError(f"input: expected TxHxW or HxW positive sizes, got {text!r}")
    return size


def model_cost(
    model: nn.Module | str | Callable[[], nn.Module],
    input_size: str | Sequence[int] = (32, 224, 224),
    *,
    in_channels: int = 3,
    batch_size: int = 1,
    **create_kwargs,
) -> CostReport:
    """Count parameters and multiply-adds of a model on the meta device.

    Args:
        model: a registered model name (built on ``meta``), a builder called under
            ``torch.device("meta")``, or a module (a copy is moved to ``meta``).
        input_size: ``(T, H, W)`` for video, ``(H, W)`` for images, or a string ``"32x224x224"``.
        in_channels: input channels.
        batch_size: batch size of the counted forward pass (costs scale linearly).
        **create_kwargs: passed to :func:`nlnet.models.create_model` for a name.

    Returns:
        A :class:`CostReport` with per-stage rows (top-level children; ResNet stages named
        res2..res5) and one row per non-local block (its MACs include the pairwise terms).
    """
    size = parse_input_size(input_size)
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected a positive int, got {batch_size!r}")
    name = model if isinstance(model, str) else type(model).__name__
    with torch.device("meta"):
        if isinstance(model, str):
            from nlnet.models.registry import create_model

            model = create_model(model, **create_kwargs)
        elif not isinstance(model, nn.Module):
            if not callable(model):
                raise TypeError(f"model: expected a name, a builder or an nn.Module, got {model!r}")
            model = model()
    if any(t.device.type != "meta" for t in (*model.parameters(), *model.buffers())):
        model = copy.deepcopy(model).to_empty(device="meta")  # the caller's weights stay intact
    model.eval()
    x = torch.empty(batch_size, in_channels, *size, device="meta")
    root = type(model).__name__
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    counts = counter.get_flop_counts()

    def macs_of(path: str) -> int:
        key = root if not path else f"{root}.{path}"
        if key in counts:
            return sum(counts[key].values()) // 2
        # a container that is never called itself (a ModuleList of stages): its outermost
        # called descendants, each counted once
        inner = [k for k in counts if k.startswith(key + ".")]
        outer = [k for k in inner if not any(k.startswith(o + ".") for o in inner)]
        return sum(sum(counts[k].values()) for k in outer) // 2

    total = sum(counts.get("Global", {}).values()) // 2
    stages = []
    for child, _ in model.named_children():
        row = CostRow(
            _STAGE_ALIASES.get(child, child), count_params(model, child + "."), macs_of(child)
        )
        if row.params or row.macs:
            stages.append(row)
    nl_rows = [
        CostRow(n, count_params(m), macs_of(n))
        for n, m in model.named_modules()
        if isinstance(m, NonLocalNd)
    ]
    return CostReport(name, size, count_params(model), total, stages, nl_rows)


def table2e(input_size: str | Sequence[int] = (32, 224, 224)) -> dict[str, tuple[float, float]]:
    """Table 2e: params and MACs of the R101 models relative to the R101 C2D baseline.

    Also contains ``"c2d_r50_nl5"`` (the text of Section 5.1: "~70% parameters and ~80% FLOPs"
    of the ResNet-101 baseline). Returns ``name -> (params ratio, MACs ratio)``.
    """
    base = model_cost("c2d_r101", input_size)
    out = {}
    for name in (*TABLE2E_PAPER, "c2d_r50_nl5"):
        r = base if name == "c2d_r101" else model_cost(name, input_size)
        out[name] = (r.params / base.params, r.macs / base.macs)
    return out


def mask_rcnn_like_cost(
    depth: int = 50,
    image_size: Sequence[int] = (800, 1333),
    *,
    non_local: bool = True,
    num_proposals: int = 1000,
    num_detections: int = 100,
    num_classes: int = 91,
) -> dict[str, int]:
    """MACs of a Mask R-CNN-like model (ResNet-FPN) at inference, with or without one block.

    Section 6 of the paper adds one non-local block to the backbone "right before the last
    residual block of res4" and reports that it adds < 5% computation to the baseline model. The
    parts are torchvision's: ResNet body, FPN (256 channels, P2-P6), RPN head on every level, the
    box head (two 1024-d FC layers) on ``num_proposals`` RoIs of 7x7 and the mask head (four 3x3
    convs, a deconvolution and a 1x1 predictor) on ``num_detections`` RoIs of 14x14. RoIAlign, NMS
    and anchor decoding are not counted (no multiply-adds of note).

    Returns:
        MACs per part: ``backbone``, ``non_local``, ``fpn``, ``rpn``, ``box_head``,
        ``mask_head`` and ``total`` (``backbone`` includes ``non_local``).
    """
    from collections import OrderedDict

    from torchvision.models import resnet
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
    from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
    from torchvision.models.detection.rpn import RPNHead
    from torchvision.ops import FeaturePyramidNetwork
    from torchvision.ops.feature_pyramid_network import LastLevelMaxPool

    from nlnet.models.surgery import insert_non_local, non_local_paths

    h, w = parse_input_size(image_size)
    builders = {50: resnet.resnet50, 101: resnet.resnet101}
    if depth not in builders:
        raise ValueError(f"depth: expected 50 or 101, got {depth!r}")

    def macs(fn: Callable[[], object]) -> int:
        with FlopCounterMode(display=False) as c, torch.no_grad():
            fn()
        return c.get_total_flops() // 2

    with torch.device("meta"):
        body = builders[depth](weights=None).eval()
        if non_local:
            layers = tuple(len(getattr(body, f"layer{i}")) for i in range(1, 5))
            insert_non_local(body, non_local_paths("nl1", layers)).eval()
        fpn = FeaturePyramidNetwork([256, 512, 1024, 2048], 256, LastLevelMaxPool()).eval()
        rpn = RPNHead(256, 3).eval()
        box = nn.Sequential(TwoMLPHead(256 * 7 * 7, 1024), FastRCNNPredictor(1024, num_classes))
        mask = nn.Sequential(
            MaskRCNNHeads(256, [256, 256, 256, 256], 1), MaskRCNNPredictor(256, 256, num_classes)
        )
        x = torch.empty(1, 3, h, w)
        feats: OrderedDict[str, torch.Tensor] = OrderedDict()

        def run_body() -> None:
            y = body.maxpool(body.relu(body.bn1(body.conv1(x))))
            for i in range(1, 5):
                y = getattr(body, f"layer{i}")(y)
                feats[str(i)] = y

        out = {"backbone": macs(run_body)}
        out["non_local"] = 0
        if non_local:
            blocks = [m for m in body.modules() if isinstance(m, NonLocalNd)]

            def run_nl() -> None:
                blocks[0](torch.empty(1, 1024, *feats["3"].shape[-2:]))

            out["non_local"] = macs(run_nl)
        pyramid: dict[str, torch.Tensor] = {}
        out["fpn"] = macs(lambda: pyramid.update(fpn(feats)))
        out["rpn"] = macs(lambda: rpn(list(pyramid.values())))
        out["box_head"] = macs(lambda: box(torch.empty(num_proposals, 256, 7, 7)))
        out["mask_head"] = macs(lambda: mask(torch.empty(num_detections, 256, 14, 14)))
    out["total"] = sum(v for k, v in out.items() if k != "non_local")
    return out
