"""SlowFast R50 (Feichtenhofer et al., "SlowFast Networks for Video Recognition", ICCV 2019) +/- non-local blocks.

Two ResNet-50 pathways over the same clip (Sec. 3, Table 1):

* the **Slow** pathway sees ``T / alpha`` frames (``alpha = 8``) at full width (64..2048
  channels), with temporal kernels only in res4 and res5 ("non-degenerate" temporal
  convolutions, Sec. 3.1);
* the **Fast** pathway sees all ``T`` frames at ``beta = 1/8`` of the width (8..256 channels),
  with temporal kernels in every stage (5 in conv1, 3 in res2..res5), no temporal down-sampling;
* **lateral connections** after conv1/pool1 and res2..res4 (Sec. 3.4, "time-strided
  convolution"): a 5x1x1 convolution with temporal stride ``alpha`` and ``2 beta C`` output
  channels maps the Fast features onto the Slow frames; the result is concatenated to the Slow
  features;
* the head average-pools each pathway, concatenates them (2048 + 256) and classifies. Here
  :meth:`SlowFast.forward_features` first averages the Fast res5 map over each group of
  ``alpha`` frames (onto the Slow frames) and concatenates it to the Slow map, ``(B, 2304,
  T / alpha, H / 32, W / 32)``; the head's global average of that map is the same as the
  concatenated averages of the two pathways.
* ``head="fully_conv"`` is PySlowFast's test head (``ResNetBasicHead`` in
  ``slowfast/models/head_helper.py``, eval mode): an average pool of ``T x 7 x 7`` with stride
  1 (its ``pool_size`` is the training crop / 32 = 7 for 224), the projection at every
  remaining position, a softmax per position and the mean over positions. On 256 x 256 test
  crops that is 2 x 2 positions. Pooling the time axis of the Fast-averaged map is the same as
  pooling each pathway over its own frames, so this equals PySlowFast's head on the two res5
  maps; it returns the log of the averaged probabilities (``softmax`` of the output gives them
  back exactly, so the evaluator's softmax is unchanged). In training mode, and with the
  default ``head="global"``, the head is the global average (on 224 x 224 training crops both
  heads pool the whole 7 x 7 map).

The model takes one clip ``(B, 3, T, H, W)`` (the Fast pathway's frames) and picks the Slow
frames itself, as PySlowFast's ``PackPathway`` does (``T / alpha`` frames evenly spaced over the
clip, first and last included).

It offers timm's contract like nlnet's other classifiers (:mod:`nlnet.models.features`):
``feature_info`` and ``forward_intermediates`` have one feature per stage (pool1, res2..res5;
modules ``s1`` .. ``s5``), the two pathways' outputs of that stage fused the way
``forward_features`` fuses res5 (Fast averaged over each ``alpha`` frames, concatenated to Slow:
``num_chs`` Slow + Fast channels, ``reduction`` 4, 4, 8, 16, 32), so that the last map is the
features the head pools; ``forward_head(x, pre_logits=True)`` is the pooled concatenation
(2048 + 256); ``get_classifier``/``reset_classifier`` act on ``head.projection``. Each
pathway's own maps are ``forward_pathways`` (``slow_res5``, ``fast_res5``, ...).

Non-local blocks go into the **Slow** pathway. The default ``slowfast_r50_nl5`` follows the
released SlowFast non-local model's layout (PySlowFast's ``SLOWFAST_NLN`` configs): after
residual blocks 1 and 3 of res3 and 1, 3 and 5 of res4, dot-product instantiation, keys
max-pooled 1x2x2; the practitioner's guide's "sub-sampling on the temporal dimension as well" is
``sub_sample=(2, 2, 2)`` (an override, for clips with >= 2 Slow frames in res4).

Module and parameter names follow PySlowFast's ``SlowFast`` (``s1.pathway0_stem.conv``,
``s1_fuse.conv_f2s``, ``s2.pathway0_res0.branch2.a_bn``, ``head.projection``, ...), so its
checkpoints load through :func:`convert_pyslowfast_state_dict`, which renames the non-local
blocks' parameters (``conv_theta`` -> ``theta``, ``conv_out`` -> ``W_z``, ``bn`` -> ``norm``)
and folds ``conv_out``'s bias into the BatchNorm's running mean (nlnet's ``W_z`` before a BN has
no bias: ``BN(W y + b)`` with mean ``mu`` is ``BN(W y)`` with mean ``mu - b``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F
from torch import Tensor, nn

from nlnet.layers.block_spec import BlockLike
from nlnet.layers.nonlocal_block import NonLocal3d
from nlnet.layers.pooling import MaxPool3d
from nlnet.models.checks import check_input
from nlnet.models.features import ClassifierContract, feature_info_of, feature_take_indices
from nlnet.models.placement import (
    Placement,
    PlacementLike,
    block_arguments,
    check_no_block,
    family_block,
)
from nlnet.models.registry import register_model
from nlnet.models.video.parts import HEADS, fully_conv_head

__all__ = [
    "SlowFast",
    "FEATURES",
    "SLOWFAST_NL5",
    "pack_pathway",
    "convert_pyslowfast_state_dict",
]

torch.fx.wrap("check_input")
torch.fx.wrap("fully_conv_head")

#: Non-local placement of PySlowFast's SLOWFAST_NLN configs: ``{stage: block indices}`` (Slow).
SLOWFAST_NL5: dict[int, tuple[int, ...]] = {3: (1, 3), 4: (1, 3, 5)}
#: Block options of those configs (nlnet's other defaults: C/2 channels, BN with gamma = 0).
SLOWFAST_NL_OPTIONS: dict[str, Any] = {"instantiation": "dot_product", "sub_sample": (1, 2, 2)}


def pack_pathway(x: Tensor, alpha: int) -> Tensor:
    """The Slow pathway's frames: ``T // alpha`` frames evenly spaced over ``x``'s ``T``."""
    t = x.shape[2]
    if t < alpha:
        raise ValueError(f"x: expected at least alpha={alpha} frames, got shape {tuple(x.shape)}")
    idx = torch.linspace(0, t - 1, t // alpha, device=x.device).long()
    return x.index_select(2, idx)


torch.fx.wrap("pack_pathway")


class Stem(nn.Module):
    """conv (``t``x7x7, stride 1x2x2) - BN - ReLU - max-pool 1x3x3 stride 1x2x2."""

    def __init__(self, cin: int, cout: int, t: int) -> None:
        super().__init__()
        self.conv = nn.Conv3d(cin, cout, (t, 7, 7), (1, 2, 2), (t // 2, 3, 3), bias=False)
        self.bn = nn.BatchNorm3d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.pool_layer = MaxPool3d((1, 3, 3), (1, 2, 2), (0, 1, 1))

    def forward(self, x: Tensor) -> Tensor:
        return self.pool_layer(self.relu(self.bn(self.conv(x))))


class Bottleneck(nn.Module):
    """``a`` (``t``x1x1) - ``b`` (1x3x3, spatial stride) - ``c`` (1x1x1), each with BN."""

    def __init__(self, cin: int, cout: int, inner: int, t: int, stride: int) -> None:
        super().__init__()
        self.a = nn.Conv3d(cin, inner, (t, 1, 1), padding=(t // 2, 0, 0), bias=False)
        self.a_bn = nn.BatchNorm3d(inner)
        self.a_relu = nn.ReLU(inplace=True)
        self.b = nn.Conv3d(inner, inner, (1, 3, 3), (1, stride, stride), (0, 1, 1), bias=False)
        self.b_bn = nn.BatchNorm3d(inner)
        self.b_relu = nn.ReLU(inplace=True)
        self.c = nn.Conv3d(inner, cout, 1, bias=False)
        self.c_bn = nn.BatchNorm3d(cout)

    def forward(self, x: Tensor) -> Tensor:
        x = self.a_relu(self.a_bn(self.a(x)))
        x = self.b_relu(self.b_bn(self.b(x)))
        return self.c_bn(self.c(x))


class ResBlock(nn.Module):
    """Residual unit: ``relu(branch1(x) + branch2(x))`` (``branch1``: projection if needed)."""

    def __init__(self, cin: int, cout: int, inner: int, t: int, stride: int) -> None:
        super().__init__()
        self.branch1 = self.branch1_bn = None
        if cin != cout or stride != 1:
            self.branch1 = nn.Conv3d(cin, cout, 1, (1, stride, stride), bias=False)
            self.branch1_bn = nn.BatchNorm3d(cout)
        self.branch2 = Bottleneck(cin, cout, inner, t, stride)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        skip = x if self.branch1 is None else self.branch1_bn(self.branch1(x))
        return self.relu(skip + self.branch2(x))


class ResStage(nn.Module):
    """One stage of both pathways: ``pathway{p}_res{i}`` and ``pathway{p}_nonlocal{i}``."""

    def __init__(
        self,
        cins: Sequence[int],
        couts: Sequence[int],
        inners: Sequence[int],
        temporal: Sequence[int],
        depth: int,
        stride: int,
        nonlocal_inds: Sequence[Sequence[int]] = ((), ()),
        block: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.depth = depth
        for p in range(2):
            for i in range(depth):
                cin = cins[p] if i == 0 else couts[p]
                unit = ResBlock(cin, couts[p], inners[p], temporal[p], stride if i == 0 else 1)
                self.add_module(f"pathway{p}_res{i}", unit)
                if i in nonlocal_inds[p]:
                    nl_block = NonLocal3d(couts[p], **dict(block or {}))
                    self.add_module(f"pathway{p}_nonlocal{i}", nl_block)

    def forward(self, xs: list[Tensor]) -> list[Tensor]:
        out = []
        for p, x in enumerate(xs):
            for i in range(self.depth):
                x = getattr(self, f"pathway{p}_res{i}")(x)
                block = getattr(self, f"pathway{p}_nonlocal{i}", None)
                if block is not None:
                    x = block(x)
            out.append(x)
        return out


class FuseFastToSlow(nn.Module):
    """Lateral connection: 5x1x1 conv, temporal stride ``alpha``, ``ratio`` x channels; BN, ReLU;
    concatenated to the Slow features."""

    def __init__(self, c_fast: int, ratio: int, kernel: int, alpha: int) -> None:
        super().__init__()
        self.conv_f2s = nn.Conv3d(
            c_fast, c_fast * ratio, (kernel, 1, 1), (alpha, 1, 1), (kernel // 2, 0, 0), bias=False
        )
        self.bn = nn.BatchNorm3d(c_fast * ratio)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, xs: list[Tensor]) -> list[Tensor]:
        fuse = self.relu(self.bn(self.conv_f2s(xs[1])))
        return [torch.cat([xs[0], fuse], 1), xs[1]]


class Head(nn.Module):
    """Global average pool of both pathways' channels, dropout, linear ``projection``; with
    ``head="fully_conv"`` in eval mode PySlowFast's fully-convolutional test head instead."""

    def __init__(
        self, cins: Sequence[int], num_classes: int, dropout: float, head: str = "global"
    ) -> None:
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"head: expected one of {HEADS}, got {head!r}")
        self.kind = head
        self.avgpool = nn.AdaptiveAvgPool3d(1)
        self.dropout = nn.Dropout(dropout)
        self.projection = nn.Linear(sum(cins), num_classes)

    def forward(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        """Logits ``(B, K)`` of the features ``(B, C, T, H, W)``; ``pre_logits``: the pooled
        features ``(B, C)`` after dropout (also when ``projection`` was reset to none)."""
        fully_conv = self.kind == "fully_conv" and isinstance(self.projection, nn.Linear)
        if fully_conv and not self.training and not pre_logits:
            return fully_conv_head(x, self.projection.weight, self.projection.bias)
        x = self.dropout(self.avgpool(x).flatten(1))
        return x if pre_logits else self.projection(x)


#: The features of :meth:`SlowFast.forward_intermediates`, one per stage of Table 1 (SlowFast).
FEATURES: tuple[str, ...] = ("pool1", "res2", "res3", "res4", "res5")


class SlowFast(ClassifierContract, nn.Module):
    """SlowFast ResNet (Table 1 of the SlowFast paper) with optional non-local blocks.

    Args:
        num_classes: classifier outputs (400: Kinetics).
        layers: residual units of res2..res5 ((3, 4, 6, 3): R50).
        width: Slow width of the stem (64); res2..res5 are 4x, 8x, 16x, 32x this.
        alpha: frame-rate ratio Fast/Slow (8).
        beta_inv: channel ratio Slow/Fast (8, i.e. beta = 1/8).
        fusion_ratio: lateral channels as a multiple of the Fast channels (2).
        fusion_kernel: temporal kernel of the lateral convolutions (5).
        dropout: before the classifier (0.5).
        placement: the Slow-pathway units followed by a block, stage -> unit indices
            (``{"res3": [1, 3], "res4": [1, 3, 5]}``, or a preset;
            :meth:`~nlnet.models.placement.Placement.of`).
        block: options of those :class:`~nlnet.layers.nonlocal_block.NonLocal3d`: a record,
            or a mapping of changes over :data:`SLOWFAST_NL_OPTIONS`.
        head: ``"global"`` (global average pool, the default) or ``"fully_conv"``: in eval
            mode PySlowFast's test head (``T x 7 x 7`` stride-1 pool, softmax per position,
            averaged; returns the log of the averaged probabilities).

    Input ``(B, 3, T, H, W)`` with ``T`` a multiple of ``alpha``; output logits. timm's
    contract (:class:`~nlnet.models.features.ClassifierContract`; classifier
    ``head.projection``): feature ``i`` of :meth:`forward_intermediates` and
    :attr:`feature_info` is stage ``FEATURES[i]`` (pool1, res2..res5, module ``s1`` .. ``s5``),
    both pathways fused as in :meth:`forward_features`; :meth:`forward_pathways` gives each
    pathway's own maps.
    """

    classifier_name = "head.projection"
    classifier_init_std = 0.01  # PySlowFast's head init (and nlnet's other video models)

    def __init__(
        self,
        num_classes: int = 400,
        *,
        layers: Sequence[int] = (3, 4, 6, 3),
        width: int = 64,
        alpha: int = 8,
        beta_inv: int = 8,
        fusion_ratio: int = 2,
        fusion_kernel: int = 5,
        dropout: float = 0.5,
        placement: PlacementLike = None,
        block: BlockLike = None,
        head: str = "global",
    ) -> None:
        super().__init__()
        for key, val in (("num_classes", num_classes), ("width", width), ("alpha", alpha),
                         ("beta_inv", beta_inv), ("fusion_ratio", fusion_ratio)):  # fmt: skip
            if not isinstance(val, int) or val < 1:
                raise ValueError(f"{key}: expected a positive int, got {val!r}")
        if len(layers) != 4 or min(layers) < 1:
            raise ValueError(f"layers: expected 4 positive stage depths, got {layers!r}")
        nl = _slow_units(Placement.of(placement), layers, block)
        options = family_block(block, SLOWFAST_NL_OPTIONS).kwargs()
        self.alpha = alpha
        w, bi = width, beta_inv
        self.s1 = nn.Module()
        self.s1.add_module("pathway0_stem", Stem(3, w, 1))
        self.s1.add_module("pathway1_stem", Stem(3, w // bi, 5))
        self.s1_fuse = FuseFastToSlow(w // bi, fusion_ratio, fusion_kernel, alpha)
        lateral = fusion_ratio * w // bi  # channels added to the Slow input of each stage
        cin = [w + lateral, w // bi]
        temporal = {2: (1, 3), 3: (1, 3), 4: (3, 3), 5: (3, 3)}  # Table 1: Slow res4/res5 only
        for stage, (mult, depth) in enumerate(zip((4, 8, 16, 32), layers), start=2):
            cout = [w * mult, w * mult // bi]
            inner = [w * mult // 4, w * mult // 4 // bi]
            self.add_module(
                f"s{stage}",
                ResStage(cin, cout, inner, temporal[stage], depth, 1 if stage == 2 else 2,
                         (nl[stage - 2], ()), options),
            )  # fmt: skip
            if stage < 5:
                self.add_module(
                    f"s{stage}_fuse", FuseFastToSlow(cout[1], fusion_ratio, fusion_kernel, alpha)
                )
                cin = [cout[0] + fusion_ratio * cout[1], cout[1]]
        self.head = Head((w * 32, w * 32 // bi), num_classes, dropout, head)
        self.layers_cfg = tuple(layers)
        self.num_classes, self.num_features = num_classes, self.head.projection.in_features
        slow = [w, w * 4, w * 8, w * 16, w * 32]  # Slow channels of pool1, res2..res5
        self.feature_info = feature_info_of(
            [f"s{k}" for k in range(1, 6)], [c + c // bi for c in slow], (4, 4, 8, 16, 32)
        )
        for m in self.modules():
            if isinstance(m, nn.Conv3d) and not _in_block(m, self):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        for name, m in self.named_modules():  # zero-init the last BN of each unit (PySlowFast)
            if name.endswith("branch2.c_bn"):
                nn.init.zeros_(m.weight)
        nn.init.normal_(self.head.projection.weight, std=0.01)
        nn.init.zeros_(self.head.projection.bias)

    def _run(self, x: Tensor, record: list[list[Tensor]] | None = None, last: int = 4
             ) -> list[Tensor]:  # fmt: skip
        """Both pathways ``[slow, fast]`` through stage ``FEATURES[last]`` (res5); each stage's
        pair, before that stage's lateral connection, is appended to ``record``."""
        check_input(x, 5, 3)
        xs = [pack_pathway(x, self.alpha), x]
        xs = [self.s1.pathway0_stem(xs[0]), self.s1.pathway1_stem(xs[1])]
        for i in range(last + 1):  # s1 (the stems: pool1), s2..s5 (res2..res5)
            if i > 0:
                xs = getattr(self, f"s{i + 1}")(xs)
            if record is not None:
                record.append(xs)
            if i < last:
                xs = getattr(self, f"s{i + 1}_fuse")(xs)
        return xs

    def fuse_pathways(self, slow: Tensor, fast: Tensor) -> Tensor:
        """One map of both pathways on the Slow frames: the Fast map averaged over each
        ``alpha`` frames, concatenated to the Slow map (``(B, C_slow + C_fast, T / alpha, ..)``)."""
        return torch.cat([slow, F.avg_pool3d(fast, (self.alpha, 1, 1))], 1)

    def _forward_intermediates(
        self, x: Tensor, indices: int | Sequence[int] | None, stop_early: bool
    ) -> tuple[Tensor, list[Tensor]]:
        """timm's intermediates: per stage (pool1, res2..res5; :attr:`feature_info`) the two
        pathways' outputs before that stage's lateral connection, fused by
        :meth:`fuse_pathways`, ``(B, C_slow + C_fast, T / alpha, H', W')``. One channels-first
        map per stage (not a ``[slow, fast]`` pair) so that every feature has one ``num_chs``
        and one ``reduction`` and the last map is :meth:`forward_features`; the pathways' own
        maps (Fast at its ``T`` frames) are :meth:`forward_pathways`."""
        take, last = feature_take_indices(len(self.feature_info), indices)
        record: list[list[Tensor]] = []
        final = self._run(x, record, last if stop_early else len(FEATURES) - 1)
        return self.fuse_pathways(*final), [self.fuse_pathways(*record[i]) for i in take]

    def forward_pathways(self, x: Tensor) -> dict[str, Tensor]:
        """Stage outputs of each pathway (Table 1 of the SlowFast paper): ``slow_pool1``,
        ``fast_pool1``, ``slow_res2``, ``fast_res2`` .. ``fast_res5`` (``(B, C, T', H', W')``,
        before the lateral connection of that stage)."""
        record: list[list[Tensor]] = []
        self._run(x, record)
        return {
            f"{path}_{name}": t
            for name, pair in zip(FEATURES, record, strict=True)
            for path, t in zip(("slow", "fast"), pair, strict=True)
        }

    def forward_features(self, x: Tensor) -> Tensor:
        """res5 of both pathways on the Slow frames ``(B, 2048 + 256, T / alpha, H/32, W/32)``
        (:meth:`fuse_pathways`)."""
        return self.fuse_pathways(*self._run(x))

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        """Global average pool, dropout and ``head.projection``: logits ``(B, K)`` (with
        ``head="fully_conv"`` in eval mode: the log of PySlowFast's averaged probabilities);
        ``pre_logits``: the pooled features ``(B, 2048 + 256)``, before the projection."""
        return self.head(x, pre_logits)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


def _in_block(conv: nn.Module, model: nn.Module) -> bool:
    return any(conv is m for b in model.modules() if isinstance(b, NonLocal3d) for m in b.modules())


_NL_RENAMES = {
    "conv_theta": "theta",
    "conv_phi": "phi",
    "conv_g": "g",
    "conv_out": "W_z",
    "bn": "norm",
}


def convert_pyslowfast_state_dict(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A PySlowFast ``SlowFast`` state dict (``model_state`` of its checkpoints) in nlnet's names.

    Everything but the non-local blocks keeps its name. In ``s{k}.pathway0_nonlocal{i}.*``:
    ``conv_theta/conv_phi/conv_g`` -> ``theta/phi/g``, ``conv_out`` -> ``W_z``, ``bn`` ->
    ``norm``; ``conv_out.bias`` is folded into ``norm.running_mean`` (see the module docstring).
    A leading ``module.`` (DataParallel) is dropped.
    """
    out: dict[str, Tensor] = {}
    biases: dict[str, Tensor] = {}
    for key, value in state.items():
        key = key.removeprefix("module.")
        parts = key.split(".")
        nl = next((i for i, p in enumerate(parts) if "_nonlocal" in p), None)
        if nl is not None and nl + 1 < len(parts) and parts[nl + 1] in _NL_RENAMES:
            prefix = ".".join(parts[: nl + 1])
            if parts[nl + 1] == "conv_out" and parts[-1] == "bias":
                biases[prefix] = value
                continue
            parts[nl + 1] = _NL_RENAMES[parts[nl + 1]]
            key = ".".join(parts)
        out[key] = value
    for prefix, bias in biases.items():
        mean = f"{prefix}.norm.running_mean"
        if mean not in out:
            raise ValueError(f"state: {prefix}.conv_out.bias without {prefix}.bn.running_mean")
        out[mean] = out[mean] - bias
    return out


def _slow_units(
    placement: Placement | None, layers: Sequence[int], block: BlockLike
) -> list[list[int]]:
    """Per stage res2..res5 the Slow pathway's units followed by a block."""
    if placement is None:
        check_no_block(block)
        return [[], [], [], []]
    if placement.stage_options:
        raise ValueError("placement: SlowFast's blocks share one set of options (block=); "
                         "stage_options are not supported")  # fmt: skip
    units = placement.stage_indices(layers)
    if units is None:
        raise ValueError(f"placement: SlowFast places blocks after Slow units, e.g. "
                         f"{{'res4': [1]}}; got {placement.resolve(layers)}")  # fmt: skip
    for stage, n, inds in zip(("res2", "res3", "res4", "res5"), layers, units):
        if any(not 0 <= i < n for i in inds):
            raise ValueError(f"placement: {stage} has {n} units; got {inds}")
    return units


def build_slowfast(default_inds: PlacementLike, **kwargs: Any) -> SlowFast:
    """:class:`SlowFast` with its blocks where ``placement=`` says (default: the name's) and
    ``block=`` changes over :data:`SLOWFAST_NL_OPTIONS`."""
    block, placement = block_arguments(kwargs, default_inds)
    return SlowFast(placement=placement, block=block, **kwargs)


def _cfg(blocks: str | None) -> dict[str, Any]:
    return {
        "num_classes": 400,
        "input_size": (3, 32, 224, 224),
        "task": "video_classification",
        "family": "slowfast",
        "depth": 50,
        "first_conv": "s1.pathway0_stem.conv",  # the Slow stem (the Fast one: pathway1_stem)
        "classifier": ("head.projection",),
        "blocks": blocks,
        "test_overrides": {"width": 8, "layers": (1, 2, 2, 1), "alpha": 4}
        if blocks is None
        else {
            "width": 8,
            "layers": (1, 2, 2, 1),
            "alpha": 4,
            "placement": {"res3": [1], "res4": [1]},
        },
        "test_input_size": (3, 8, 64, 64),
    }


@register_model(
    description="SlowFast R50 4x16 (alpha 8, beta 1/8, lateral connections), no block",
    default_cfg=_cfg(None),
)
def slowfast_r50(**kwargs: Any) -> nn.Module:
    """SlowFast ResNet-50 (PySlowFast names), one clip of ``T`` frames in."""
    return build_slowfast(None, **kwargs)


@register_model(
    description="SlowFast R50 4x16 + 5 non-local blocks in the Slow pathway (2 res3 + 3 res4)",
    default_cfg=_cfg("nl5"),
)
def slowfast_r50_nl5(**kwargs: Any) -> nn.Module:
    """SlowFast ResNet-50 with PySlowFast's SLOWFAST_NLN block layout in the Slow pathway."""
    return build_slowfast(SLOWFAST_NL5, **kwargs)
