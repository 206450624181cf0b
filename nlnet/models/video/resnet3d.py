"""C2D and I3D ResNet video backbones ("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971), Section 4 and Table 1).

The C2D baseline of Table 1 processes a clip frame by frame: every convolution is a
``1 x k x k`` kernel, and the temporal dimension is reduced only by the strided ``conv1``,
``pool1`` and ``pool2``. For a ``32 x 224 x 224`` input the stage outputs are::

    conv1  1x7x7, 64, stride (2,2,2)        -> 64   x 16 x 112 x 112
    pool1  3x3x3 max, stride (2,2,2)         -> 64   x  8 x  56 x  56
    res2   [1x1,64 | 3x3,64 | 1x1,256] x3    -> 256  x  8 x  56 x  56
    pool2  3x1x1 max, stride (2,1,1)         -> 256  x  4 x  56 x  56
    res3   [1x1,128 | 3x3,128 | 1x1,512] x4  -> 512  x  4 x  28 x  28
    res4   [1x1,256 | 3x3,256 | 1x1,1024] x6 -> 1024 x  4 x  14 x  14   (x23 for ResNet-101)
    res5   [1x1,512 | 3x3,512 | 1x1,2048] x3 -> 2048 x  4 x   7 x   7
    global average pool, dropout 0.5, fc

I3D (Section 4, "Inflated 3D ConvNet") inflates one kernel in every two residual blocks, either
the ``3x3`` kernel to ``3x3x3`` (``inflate="3x3x3"``) or the first ``1x1`` kernel to ``3x1x1``
(``inflate="3x1x1"``), and ``conv1`` to ``5x7x7``.

Deviations from the printed Table 1, all documented in ``docs/models.md``:

* Padding is not given in Table 1. By default (``pooling="padded"``) we pad ``pool1`` by
  ``(1, 1, 1)`` and ``pool2`` by ``(1, 0, 0)``, the paddings that give exactly the output sizes
  of Table 1 with the printed kernels (res2 is ``56 x 56`` for a ``224`` input).
  ``pooling="caffe2"`` builds the released code's pooling instead: windows equal to the
  temporal stride (``2x3x3`` / ``2x1x1``, or ``1x3x3`` when the stride is 1) without padding and
  with floor rounding, so res2 is ``55 x 55`` for a ``224`` input (and ``63 x 63`` for ``256``);
  res3..res5 are ``28``, ``14``, ``7`` in both cases. The two are *not* interchangeable for
  trained weights: the released models need ``pooling="caffe2"``.
* Which blocks are inflated: "one kernel for every 2 residual blocks" is implemented with the
  pattern of the released code (``obtain_arc`` in ``resnet_video_org.py``): all 3 blocks of
  res2, blocks 0 and 2 of res3, the even blocks of res4 (0, 2, 4 for ResNet-50; 0, 2, ..., 22
  for ResNet-101) and block 1 of res5. ``inflate_blocks="even"`` selects the plain
  "every even block of every stage" alternative.
* The spatial stride of a stage sits on the ``3x3`` convolution (``conv2``), as in torchvision's
  ResNet v1.5 and in the released code; this keeps torchvision's ImageNet weights loadable.

``residual="basic"`` builds ResNet-18/34's two-convolution block instead (R3D, Tran et al.,
"A Closer Look at Spatiotemporal Convolutions for Action Recognition", CVPR 2018): with
``inflate="3x3x3"``, ``inflate_blocks="all"``, ``conv1_t=3``, ``pooling="none"``,
``temporal_strides=(1, 1, 1)`` and ``stage_temporal_strides=(1, 2, 2, 2)`` it is torchvision's
``r3d_18`` (equal outputs with its weights copied; tests/models/test_resnet3d_basic.py).

Parameter names follow torchvision's ``ResNet``/``Bottleneck`` (``conv1``, ``bn1``, ``layer1`` ..
``layer4``, ``layerX.Y.conv1/bn1/conv2/bn2/conv3/bn3/downsample.0/downsample.1``, ``fc``), so a
torchvision ImageNet state dict loads after inflation (:mod:`nlnet.models.inflate`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx
from torch import nn

from nlnet.layers.block_spec import BlockLike
from nlnet.layers.nonlocal_block import NonLocal3d
from nlnet.models.checks import check_input
from nlnet.models.features import ClassifierContract, resnet_feature_info, resnet_intermediates
from nlnet.models.placement import Placement, PlacementLike
from nlnet.models.resnet_layout import BLOCK_CONFIG, STAGE_NAMES
from nlnet.models.video.parts import (
    HEADS,
    POOLINGS,
    block_plan,
    fully_conv_head,
    stem_pools,
)

__all__ = [
    "BasicBlock3d",
    "Bottleneck3d",
    "ResNet3d",
    "BLOCK_CONFIG",
    "STAGE_NAMES",
    "inflation_pattern",
    "fully_conv_head",
    "POOLINGS",
    "HEADS",
]


# FX records the check as one call (it still runs in the traced module); see models/checks.py
torch.fx.wrap("check_input")
torch.fx.wrap("fully_conv_head")

_INFLATE_KINDS = (None, "3x3x3", "3x1x1")
#: ``residual`` options of :class:`ResNet3d`.
RESIDUALS: tuple[str, ...] = ("bottleneck", "basic")


def inflation_pattern(
    layers: Sequence[int], which: str | Sequence[Sequence[bool]] = "original"
) -> list[list[bool]]:
    """Which residual blocks of each stage get an inflated (temporal) kernel in I3D.

    Section 4 of "Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971) inflates "one kernel for every 2 residual blocks".

    Args:
        layers: number of residual blocks of res2..res5, e.g. ``(3, 4, 6, 3)``.
        which: ``"original"`` (the pattern of the released code: all of res2, even blocks of
            res3 and res4, block 1 of res5), ``"even"`` (blocks 0, 2, 4, ... of every stage),
            ``"all"``, ``"none"``, or an explicit nested list of booleans, one per block.

    Returns:
        One list of booleans per stage.
    """
    layers = [int(n) for n in layers]
    if not isinstance(which, str):
        pattern = [[bool(v) for v in stage] for stage in which]
        if [len(p) for p in pattern] != layers:
            raise ValueError(
                f"inflate_blocks: expected one boolean per residual block {layers}, got lengths "
                f"{[len(p) for p in pattern]}"
            )
        return pattern
    if which == "original":
        out = [[True] * layers[0]]
        out += [[i % 2 == 0 for i in range(n)] for n in layers[1:3]]
        out += [[i % 2 == 1 for i in range(n)] for n in layers[3:]]
        return out
    if which == "even":
        return [[i % 2 == 0 for i in range(n)] for n in layers]
    if which == "all":
        return [[True] * n for n in layers]
    if which == "none":
        return [[False] * n for n in layers]
    raise ValueError(
        f"inflate_blocks: expected 'original', 'even', 'all', 'none' or a nested list of bools, "
        f"got {which!r}"
    )


class Bottleneck3d(nn.Module):
    """A ResNet bottleneck with configurable temporal kernels (Table 1 / Section 4).

    ``conv1`` is ``conv1_t x 1 x 1`` and ``conv2`` is ``conv2_t x 3 x 3``: C2D uses ``(1, 1)``,
    an I3D ``3x3x3`` block ``(1, 3)`` and an I3D ``3x1x1`` block ``(3, 1)``. The spatial stride
    sits on ``conv2`` (torchvision's ResNet v1.5 layout). The optional ``non_local`` slot (``None``
    by default) holds a non-local block applied to the block output ("after a residual block"):
    :class:`ResNet3d` fills it at construction (``placement``), and
    :func:`nlnet.models.surgery.insert_non_local` can fill it later.

    Args:
        inplanes: input channels.
        planes: bottleneck width; the output has ``planes * 4`` channels.
        stride: spatial stride of ``conv2`` and of the shortcut.
        downsample: projection shortcut (``conv 1x1x1`` + BN) or ``None`` for identity.
        conv1_t: temporal kernel size of the first ``1x1`` convolution (odd).
        conv2_t: temporal kernel size of the ``3x3`` convolution (odd).
        norm_layer: normalisation factory, ``nn.BatchNorm3d`` by default.
        temporal_stride: temporal stride of ``conv2`` (and of the shortcut, which the caller
            builds): 1 in the paper's networks.
    """

    expansion: int = 4

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
        *,
        conv1_t: int = 1,
        conv2_t: int = 1,
        norm_layer: type[nn.Module] | None = None,
        temporal_stride: int = 1,
    ) -> None:
        super().__init__()
        _check_kernels(conv1_t, conv2_t)
        norm_layer = norm_layer or nn.BatchNorm3d
        width = planes
        self.conv1 = nn.Conv3d(
            inplanes, width, (conv1_t, 1, 1), padding=(conv1_t // 2, 0, 0), bias=False
        )
        self.bn1 = norm_layer(width)
        self.conv2 = nn.Conv3d(
            width,
            width,
            (conv2_t, 3, 3),
            stride=(temporal_stride, stride, stride),
            padding=(conv2_t // 2, 1, 1),
            bias=False,
        )
        self.bn2 = norm_layer(width)
        self.conv3 = nn.Conv3d(width, planes * self.expansion, 1, bias=False)
        self.bn3 = norm_layer(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride
        # Slot for a non-local block after the residual block (see surgery.insert_non_local).
        self.register_module("non_local", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x  # (B, inplanes, T, H, W)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))  # (B, planes, T, H/s, W/s)
        out = self.bn3(self.conv3(out))  # (B, 4*planes, T, H/s, W/s)
        if self.downsample is not None:
            identity = self.downsample(x)
        out = self.relu(out + identity)
        if self.non_local is not None:
            out = self.non_local(out)
        return out


class BasicBlock3d(nn.Module):
    """ResNet-18/34's basic block in 3D: ``conv1_t x 3 x 3`` and ``conv2_t x 3 x 3``
    convolutions, each followed by BN, the first by ReLU; the stride on ``conv1`` (torchvision's
    ``BasicBlock`` and ``VideoResNet``). The same ``non_local`` slot as :class:`Bottleneck3d`.

    Args:
        inplanes, planes: input and output channels (``expansion`` 1).
        stride, temporal_stride: spatial and temporal stride of ``conv1`` (and the shortcut).
        downsample: projection shortcut or ``None``.
        conv1_t, conv2_t: temporal kernel sizes (odd).
        norm_layer: normalisation factory, ``nn.BatchNorm3d`` by default.
    """

    expansion: int = 1

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None,
        *, conv1_t: int = 1, conv2_t: int = 1, norm_layer: type[nn.Module] | None = None,
        temporal_stride: int = 1,
    ) -> None:  # fmt: skip
        super().__init__()
        _check_kernels(conv1_t, conv2_t)
        norm_layer = norm_layer or nn.BatchNorm3d
        self.conv1 = nn.Conv3d(inplanes, planes, (conv1_t, 3, 3),
                               stride=(temporal_stride, stride, stride),
                               padding=(conv1_t // 2, 1, 1), bias=False)  # fmt: skip
        self.bn1 = norm_layer(planes)
        self.conv2 = nn.Conv3d(
            planes, planes, (conv2_t, 3, 3), padding=(conv2_t // 2, 1, 1), bias=False
        )
        self.bn2 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride
        self.register_module("non_local", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))  # (B, planes, T/ts, H/s, W/s)
        out = self.relu(self.bn2(self.conv2(out)) + identity)
        return out if self.non_local is None else self.non_local(out)


def _check_kernels(conv1_t: object, conv2_t: object) -> None:
    for name, t in (("conv1_t", conv1_t), ("conv2_t", conv2_t)):
        if not isinstance(t, int) or t < 1 or t % 2 == 0:
            raise ValueError(f"{name}: expected a positive odd int, got {t!r}")


def _check_positive(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")


def _checked(
    layers, num_classes, width, in_channels, inflate, temporal_kernel, conv1_t,
    temporal_strides, pooling, head, dropout, residual="bottleneck", stage_strides=(1, 1, 1, 1),
    stem_kernel=7, stem_stride=2,
) -> tuple[tuple[int, ...], int, tuple[int, ...]]:  # fmt: skip
    """Validate :class:`ResNet3d`'s options; ``(layers, conv1_t, temporal_strides)`` resolved."""
    layers = tuple(layers)
    _check_positive("stem_stride", stem_stride)
    if not isinstance(stem_kernel, int) or stem_kernel < 1 or stem_kernel % 2 == 0:
        raise ValueError(f"stem_kernel: expected a positive odd int, got {stem_kernel!r}")
    if residual not in RESIDUALS:
        raise ValueError(f"residual: expected one of {RESIDUALS}, got {residual!r}")
    if len(tuple(stage_strides)) != 4 or any(
        isinstance(t, bool) or not isinstance(t, int) or t < 1 for t in stage_strides
    ):  # fmt: skip
        raise ValueError(
            f"stage_temporal_strides: expected 4 positive ints (res2..res5), got {stage_strides!r}"
        )
    if pooling not in POOLINGS:
        raise ValueError(f"pooling: expected one of {POOLINGS}, got {pooling!r}")
    if head not in HEADS:
        raise ValueError(f"head: expected one of {HEADS}, got {head!r}")
    if len(layers) != 4:
        raise ValueError(f"layers: expected 4 stage lengths (res2..res5), got {layers!r}")
    for n in layers:
        _check_positive("layers", n)
    _check_positive("num_classes", num_classes)
    _check_positive("width", width)
    _check_positive("in_channels", in_channels)
    if inflate not in _INFLATE_KINDS:
        raise ValueError(f"inflate: expected one of {_INFLATE_KINDS}, got {inflate!r}")
    if not isinstance(temporal_kernel, int) or temporal_kernel < 1 or temporal_kernel % 2 == 0:
        raise ValueError(f"temporal_kernel: expected a positive odd int, got {temporal_kernel!r}")
    if conv1_t is None:
        conv1_t = 1 if inflate is None else 5
    if not isinstance(conv1_t, int) or conv1_t < 1 or conv1_t % 2 == 0:
        raise ValueError(f"conv1_t: expected a positive odd int, got {conv1_t!r}")
    temporal_strides = tuple(temporal_strides)
    if len(temporal_strides) != 3 or any(not isinstance(s, int) or s < 1 for s in temporal_strides):
        raise ValueError(
            "temporal_strides: expected 3 positive ints for (conv1, pool1, pool2), "
            f"got {temporal_strides!r}"
        )
    if pooling == "none" and temporal_strides[1:] != (1, 1):
        raise ValueError(
            f"pooling: 'none' has no pool1/pool2 to stride in time; temporal_strides must end "
            f"(1, 1), got {temporal_strides!r}"
        )
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout: expected a ratio in [0, 1), got {dropout!r}")
    return layers, conv1_t, temporal_strides


class ResNet3d(ClassifierContract, nn.Module):
    """C2D / I3D ResNet for video classification (Table 1 and Section 4).

    Args:
        layers: residual blocks of res2..res5, ``(3, 4, 6, 3)`` for ResNet-50 and
            ``(3, 4, 23, 3)`` for ResNet-101 (see :data:`BLOCK_CONFIG`).
        num_classes: number of logits (400 for Kinetics).
        inflate: ``None`` (C2D), ``"3x3x3"`` (I3D, inflate the ``3x3`` kernel) or ``"3x1x1"``
            (I3D, inflate the first ``1x1`` kernel).
        inflate_blocks: which blocks are inflated, see :func:`inflation_pattern`.
        conv1_t: temporal size of ``conv1``; default 1 for C2D and 5 for I3D (Section 4).
        temporal_kernel: temporal size of an inflated kernel (3 in the paper).
        temporal_strides: temporal strides of ``(conv1, pool1, pool2)``; ``(2, 2, 2)`` gives
            Table 1. A stride of 1 for ``pool1``/``pool2`` makes that pooling temporally 1-wide
            (``pool2`` becomes the identity), useful for short clips.
        dropout: dropout ratio before ``fc``.
        width: channels of the stem and bottleneck width of res2 (64 in Table 1); stage ``k``
            uses ``width * 2**k``. Smaller widths give narrow test models.
        in_channels: input channels (3 for RGB).
        zero_init_residual: initialise the last BN of each residual branch to zero.
        pooling: ``"padded"`` (Table 1 sizes), ``"caffe2"`` (the released code's unpadded
            floor pooling, needed by the released weights; see the module docstring),
            ``"pyslowfast"`` (PySlowFast's C2D/I3D: padded ``pool1``, unpadded ``pool2``),
            ``"2x2"`` (``pool1`` a ``2x2`` spatial window without padding, for small frames;
            in time as ``"padded"``) or ``"none"`` (no stem pooling: R3D's stem).
        stem_kernel, stem_stride: spatial kernel and stride of ``conv1`` (7 and 2 in Table 1;
            3 and 1 in the tiny models of :mod:`nlnet.models.video.tiny`, for 32 x 32 frames).
        residual: ``"bottleneck"`` (ResNet-50/101, the paper's) or ``"basic"``
            (:class:`BasicBlock3d`, ResNet-18/34).
        stage_temporal_strides: temporal stride of the first block of res2..res5 (R3D halves
            time in res3..res5: ``(1, 2, 2, 2)``; the paper's networks ``(1, 1, 1, 1)``).
        placement: non-local blocks built with the network after residual blocks
            (:class:`~nlnet.models.placement.Placement` or what ``Placement.of`` reads: a
            preset ``"nl5"``, stage -> indices ``{"res3": [1, 3], "res4": [1, 3, 5]}``, paths
            ``"layer3.4"``, PySlowFast's per-stage lists ``[[], [1, 3], [1, 3, 5], []]``), with
            per-stage option changes (the released affine models attend within groups of 4
            frames in res3 only: ``{"at": "nl5", "stage_options": {"res3":
            {"temporal_groups": 4}}}``).
        block: options of every block (:class:`~nlnet.layers.block_spec.BlockOptions` or a
            mapping of changes; the paper's video block otherwise).
        head: ``"global"`` (global average pool, ``fc``: Section 4.1, and every training step)
            or ``"fully_conv"``: in eval mode, the released test network (a ``T x 7 x 7``
            stride-1 average pool, ``fc`` at every remaining position, a softmax per position,
            averaged); it returns the log of the averaged probabilities so that a softmax of
            the output gives them back exactly.

    Input ``(B, in_channels, T, H, W)``; output logits ``(B, num_classes)``. timm's contract
    (:class:`~nlnet.models.features.ClassifierContract`): ``feature_info``,
    ``forward_intermediates``, ``get_classifier``/``reset_classifier`` (``fc``).
    """

    classifier_name = "fc"
    classifier_init_std = 0.01  # as in _init_weights (the released code's MODEL.FC_INIT_STD)

    def __init__(
        self,
        layers: Sequence[int] = BLOCK_CONFIG[50],
        num_classes: int = 400,
        *,
        inflate: str | None = None,
        inflate_blocks: str | Sequence[Sequence[bool]] = "original",
        conv1_t: int | None = None,
        temporal_kernel: int = 3,
        temporal_strides: Sequence[int] = (2, 2, 2),
        dropout: float = 0.5,
        width: int = 64,
        in_channels: int = 3,
        zero_init_residual: bool = False,
        pooling: str = "padded",
        placement: PlacementLike = None,
        block: BlockLike = None,
        head: str = "global",
        residual: str = "bottleneck",
        stage_temporal_strides: Sequence[int] = (1, 1, 1, 1),
        stem_kernel: int = 7,
        stem_stride: int = 2,
    ) -> None:
        super().__init__()
        layers, conv1_t, temporal_strides = _checked(
            layers, num_classes, width, in_channels, inflate, temporal_kernel, conv1_t,
            temporal_strides, pooling, head, dropout, residual, stage_temporal_strides,
            stem_kernel, stem_stride,
        )  # fmt: skip
        self.pooling, self.head = pooling, head
        self.residual = BasicBlock3d if residual == "basic" else Bottleneck3d
        self.stage_temporal_strides = tuple(stage_temporal_strides)
        self.layers_cfg = layers
        self.inflate = inflate
        self.num_classes = num_classes
        pattern = inflation_pattern(layers, "none" if inflate is None else inflate_blocks)
        self.inflated_blocks = pattern

        s1, sp1, sp2 = temporal_strides
        blocks = block_plan(layers, Placement.of(placement), block)
        self.inplanes = width
        # Stem: conv1 (1 or 5) x 7 x 7, stride (s1, 2, 2) -> pool1 3x3 max, stride (sp1, 2, 2).
        k, s = stem_kernel, stem_stride
        self.conv1 = nn.Conv3d(in_channels, width, (conv1_t, k, k), stride=(s1, s, s),
                               padding=(conv1_t // 2, k // 2, k // 2), bias=False)  # fmt: skip
        self.bn1 = nn.BatchNorm3d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool, self.pool2 = stem_pools(pooling, sp1, sp2)
        for k in range(4):  # layer1..layer4 = res2..res5
            stage = self._make_layer(width * 2**k, layers[k], 1 if k == 0 else 2, pattern[k],
                                     temporal_kernel, blocks[k], self.stage_temporal_strides[k])  # fmt: skip
            self.add_module(f"layer{k + 1}", stage)
        expansion = self.residual.expansion
        self.num_features = width * 8 * expansion
        self.avgpool = nn.AdaptiveAvgPool3d(1)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(self.num_features, num_classes)
        stages = [width * 2**k * expansion for k in range(4)]
        r = s if pooling == "none" else 2 * s  # res2's reduction: the stem conv, then pool1
        self.feature_info = resnet_feature_info(width, stages, (s, r, 2 * r, 4 * r, 8 * r))
        self._init_weights(zero_init_residual)

    def _make_layer(
        self,
        planes: int,
        blocks: int,
        stride: int,
        inflated: list[bool],
        t: int,
        non_local: Mapping[int, Mapping[str, Any]],
        temporal_stride: int = 1,
    ) -> nn.Sequential:
        block, out = self.residual, planes * self.residual.expansion
        downsample = None
        if stride != 1 or temporal_stride != 1 or self.inplanes != out:
            downsample = nn.Sequential(
                nn.Conv3d(self.inplanes, out, 1, stride=(temporal_stride, stride, stride),
                          bias=False),
                nn.BatchNorm3d(out),
            )  # fmt: skip
        basic = block is BasicBlock3d
        mods = []
        for i in range(blocks):
            # I3D: a bottleneck inflates one kernel (3x3 or the first 1x1); a basic block's
            # "3x3x3" inflates both of its 3x3 kernels (R3D)
            conv1_t = t if inflated[i] and (self.inflate == "3x1x1" or basic) else 1
            conv2_t = t if (inflated[i] and self.inflate == "3x3x3") else 1
            first = i == 0
            mods.append(block(
                self.inplanes, planes, stride if first else 1, downsample if first else None,
                conv1_t=conv1_t, conv2_t=conv2_t, temporal_stride=temporal_stride if first else 1,
            ))  # fmt: skip
            self.inplanes = out
            if i in non_local:  # built with the network: "after a residual block" (Sec. 4)
                mods[-1].non_local = NonLocal3d(self.inplanes, **non_local[i])
        return nn.Sequential(*mods)

    def _init_weights(self, zero_init_residual: bool) -> None:
        if self.conv1.weight.is_meta:
            return  # shapes only (cost counting, shape checks): nothing to initialise
        in_blocks = {
            id(m) for b in self.modules() if isinstance(b, NonLocal3d) for m in b.modules()
        }
        for m in self.modules():
            if id(m) in in_blocks:
                continue  # a non-local block keeps its own initialisation (identity start)
            if isinstance(m, nn.Conv3d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm3d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        # fc initialised with std 0.01 as in the released code (MODEL.FC_INIT_STD).
        nn.init.normal_(self.fc.weight, std=0.01)
        nn.init.zeros_(self.fc.bias)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, (Bottleneck3d, BasicBlock3d)):
                    nn.init.zeros_(m.bn3.weight if isinstance(m, Bottleneck3d) else m.bn2.weight)

    def _forward_intermediates(
        self, x: torch.Tensor, indices: int | Sequence[int] | None, stop_early: bool
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The stem and the res2..res5 outputs ``(B, C, T, H, W)`` of Table 1
        (:attr:`feature_info`) and the res5 map (or, ``stop_early``, the last map asked for)."""
        check_input(x, 5, self.conv1.in_channels)
        return resnet_intermediates(self, x, indices, stop_early)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The res5 feature map ``(B, 2048, T/8, H/32, W/32)`` (Table 1), no intermediate kept."""
        check_input(x, 5, self.conv1.in_channels)
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.pool2(self.layer1(x))
        return self.layer4(self.layer3(self.layer2(x)))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Global average pool, dropout and ``fc`` on the res5 features ``(B, C, T, H, W)``;
        with ``head="fully_conv"`` in eval mode the released test head instead. ``pre_logits``:
        the pooled features ``(B, C)``, before ``fc`` (also what a removed classifier,
        ``reset_classifier(0)``, gives)."""
        fc_is_linear = isinstance(self.fc, nn.Linear)
        if self.head == "fully_conv" and not self.training and not pre_logits and fc_is_linear:
            return fully_conv_head(x, self.fc.weight, self.fc.bias)
        x = self.dropout(self.avgpool(x).flatten(1))  # (B, C)
        return x if pre_logits else self.fc(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))
