"""Builders of the detectors with non-local blocks (Wang et al., CVPR 2018, Sec. 6, Tables 5-6).

torchvision's Mask R-CNN, Faster R-CNN and Keypoint R-CNN on a ResNet-FPN backbone, built without
any download, with 2D non-local blocks in the backbone (Table 5: right before the last residual
block of res4), the keypoint head (Table 6: after every second convolution) or the FPN levels
(on the lateral outputs, before the top-down sum, so that the coarser levels' blocks reach every
finer level);
and a CPU-sized Mask R-CNN of the same structure. The registered model names built from these are
in :mod:`nlnet.models.detection`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torchvision.models import resnet
from torchvision.models.detection import FasterRCNN, KeypointRCNN, MaskRCNN
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.backbone_utils import BackboneWithFPN, _resnet_fpn_extractor
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
from torchvision.models.detection.rpn import RPNHead
from torchvision.ops import FrozenBatchNorm2d

from nlnet.layers.block_spec import BlockLike
from nlnet.layers.nonlocal_block import NonLocal2d
from nlnet.models.loading import load_partial
from nlnet.models.placement import Placement, family_block, place_non_local
from nlnet.models.resnet_layout import BLOCK_CONFIG
from nlnet.models.surgery import insert_non_local, non_local_paths

_DEPTHS: dict[int, Callable[..., resnet.ResNet]] = {50: resnet.resnet50, 101: resnet.resnet101}
_DETECTION_DEPTHS = (50, 101)  # the depths of the paper's Mask R-CNN backbones (Sec. 6)

#: Where Table 6's four head blocks go in torchvision's ``KeypointRCNNHeads``: after the ReLU of
#: every second of its 8 convolutions.
KEYPOINT_HEAD_PATHS: tuple[str, ...] = tuple(f"roi_heads.keypoint_head.{i}" for i in (3, 7, 11, 15))


def backbone_non_local_path(depth: int) -> str:
    """Module path of the backbone block: right before the last residual block of res4."""
    if depth not in _DETECTION_DEPTHS:
        raise ValueError(f"depth: expected one of {list(_DETECTION_DEPTHS)}, got {depth!r}")
    return "backbone.body." + non_local_paths("res4", BLOCK_CONFIG[depth])[0]


#: Default FPN levels of the ``*_nlfpn`` models: P3, P4, P5 (indices into the FPN's levels).
FPN_LEVELS: tuple[int, ...] = (1, 2, 3)


def insert_fpn_blocks(
    model: nn.Module, levels: Sequence[int], block_options: BlockLike = None
) -> nn.Module:
    """One 2D block on the lateral output of each FPN level in ``levels`` (0 = P2 .. 3 = P5),
    with ``sub_sample=2`` (the guide's setting) unless ``block_options`` say otherwise.

    A block goes after the level's lateral 1x1 convolution (``backbone.fpn.inner_blocks.<i>``),
    before the top-down sum: torchvision's ``FeaturePyramidNetwork`` adds that lateral map to
    the up-sampled coarser sum and passes the result on to every finer level, so a block at
    level ``i`` changes P_i and every finer level (and P6, pooled from P5, for the top block).
    A block after a level's 3x3 output convolution (``layer_blocks``) would change that level
    only: the top-down pathway sums the lateral maps, not the outputs.
    """
    return place_detector_blocks(model, detector_placement(model, fpn_levels=levels), block_options)


def _fpn_backbone(
    depth: int,
    width_per_group: int,
    norm_layer: Callable[..., nn.Module] | None,
    weights_backbone: Any = None,
    trainable_backbone_layers: int | None = None,
    frozen_bn: bool | None = None,
) -> nn.Module:
    """torchvision's ResNet-FPN body, ImageNet-initialised when ``weights_backbone`` is given.

    With weights: frozen BN (unless ``frozen_bn`` says otherwise) and 3 trainable stages by
    default (torchvision's rule for a pre-trained backbone); without: trainable BN and 5 stages.
    """
    if depth not in _DEPTHS:
        raise ValueError(f"depth: expected one of {sorted(_DEPTHS)}, got {depth!r}")
    trained = weights_backbone is not None
    if frozen_bn is None:
        frozen_bn = trained
    if norm_layer is None:
        norm_layer = FrozenBatchNorm2d if frozen_bn else nn.BatchNorm2d
    layers = (
        (3 if trained else 5) if trainable_backbone_layers is None else trainable_backbone_layers
    )
    if not isinstance(layers, int) or not 0 <= layers <= 5:
        raise ValueError(f"trainable_backbone_layers: expected 0..5, got {layers!r}")
    body = _DEPTHS[depth](weights=None, width_per_group=width_per_group, norm_layer=norm_layer)
    if trained:
        _load_backbone(body, weights_backbone, f"resnet{depth}")
    return _resnet_fpn_extractor(body, layers)


def _load_backbone(body: nn.Module, spec: Any, arch: str) -> None:
    """ImageNet ResNet weights into the detector's ResNet (its classifier ``fc.*`` unused)."""
    from nlnet.models.inflate import read_state_dict

    own = {k: v for k, v in body.state_dict().items() if not k.startswith("fc.")}
    state = {  # FrozenBatchNorm2d has no num_batches_tracked
        k: v
        for k, v in read_state_dict(spec, arch).items()
        if not k.startswith("fc.") and (k in own or not k.endswith("num_batches_tracked"))
    }
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    wrong = [k for k in own if k in state and state[k].shape != own[k].shape]
    if missing or unexpected or wrong:
        raise ValueError(
            f"weights_backbone: not {arch} weights for this backbone (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}, other shapes {wrong[:3]})"
        )
    load_partial(body, state, ("fc",), what="weights_backbone")  # fc.*: unused, kept


def _with_blocks(
    model: nn.Module,
    depth: int,
    backbone_block: bool,
    fpn_levels: Sequence[int] | None,
    block_options: BlockLike,
    head_blocks: bool = False,
) -> nn.Module:
    """``model`` with one block in res4 (``backbone_block``, Table 5), one per FPN level and/or
    the keypoint head's four (:func:`detector_placement`, :func:`place_detector_blocks`)."""
    del depth  # the backbone's own stage lengths place the res4 block
    placement = detector_placement(model, backbone_block=backbone_block,
                                   fpn_levels=fpn_levels, head_blocks=head_blocks)  # fmt: skip
    if placement is None:
        return model  # the plain baseline
    return place_detector_blocks(model, placement, block_options)


#: The FPN blocks' preset: the guide's 2x2 max-pool subsampling of the keys.
FPN_BLOCK: dict[str, Any] = {"sub_sample": 2}


def _body_lengths(model: nn.Module) -> list[int]:
    body = model.backbone.body
    return [len([n for n, _ in body.get_submodule(f"layer{i}").named_children()
                 if n != "non_local"]) for i in range(1, 5)]  # fmt: skip


def detector_placement(
    model: nn.Module, *, backbone_block: bool = False, fpn_levels: Sequence[int] | None = None,
    head_blocks: bool = False,
) -> Placement | None:  # fmt: skip
    """The module paths of a detector's blocks: right before the last residual block of res4
    (Table 5), the lateral output of each FPN level in ``fpn_levels`` (0..3 = P2..P5, see
    :func:`insert_fpn_blocks`), the keypoint head's four (Table 6); ``None`` for none."""
    paths = []
    if backbone_block:
        lengths = _body_lengths(model)
        if lengths[2] < 2:
            raise ValueError(
                f"layers: res4 needs >= 2 blocks for the block before its last, got {lengths}"
            )
        paths.append("backbone.body." + non_local_paths("res4", lengths)[0])
    if fpn_levels is not None:
        n = len(model.backbone.fpn.inner_blocks)
        levels = list(fpn_levels)
        if not levels or any(not isinstance(i, int) or not 0 <= i < n for i in levels):
            raise ValueError(
                f"fpn_levels: expected a non-empty list of levels in 0..{n - 1}, got {levels}"
            )
        paths += [f"backbone.fpn.inner_blocks.{i}" for i in levels]
    if head_blocks:
        paths += list(KEYPOINT_HEAD_PATHS)
    return Placement(paths=tuple(paths)) if paths else None


def place_detector_blocks(
    model: nn.Module, placement: Placement | None, block: BlockLike
) -> nn.Module:
    """Insert 2D blocks where ``placement`` says (in place): a preset names the backbone's
    stages (``"res4"``: ``backbone.body.layer3.<n-2>``), paths are the detector's own. Blocks
    on the FPN start from :data:`FPN_BLOCK`, the others from the block's defaults; ``block``
    changes both. A keypoint-head block passes an empty RoI batch through (torchvision runs
    the head on 0 RoIs when nothing is found)."""
    if placement is None:
        return place_non_local(model, None, block)
    if placement.stage_options:
        raise ValueError("placement: a detector's blocks share one set of options (block=); "
                         "stage_options are not supported")  # fmt: skip
    paths = (["backbone.body." + p for p in placement.resolve(_body_lengths(model))]
             if placement.preset else list(placement.paths))  # fmt: skip
    head = [p for p in paths if p.startswith("roi_heads.keypoint_head.")]
    fpn = [p for p in paths if p.startswith("backbone.fpn.")]
    other = [p for p in paths if p not in head and p not in fpn]
    for path in head:  # first: the order of the earlier builders (same initialisation)
        relu = model.get_submodule(path)
        channels = model.roi_heads.keypoint_head[0].out_channels  # 512
        relu.add_module("non_local", NonLocal2d(channels, **family_block(block).kwargs()))
        relu.register_forward_hook(_non_local_unless_empty)
    for where, preset in ((other, None), (fpn, FPN_BLOCK)):
        if where:
            insert_non_local(model, where, dim=2, **family_block(block, preset).kwargs())
    return model


def _detector(cls: type, backbone: tuple, blocks: tuple, **detector_kwargs: Any) -> nn.Module:
    """A torchvision detector ``cls`` on the ResNet-FPN body of ``backbone`` (the arguments of
    :func:`_fpn_backbone`) with the blocks of ``blocks`` (those of :func:`_with_blocks`)."""
    model = cls(_fpn_backbone(*backbone), **detector_kwargs)
    return _with_blocks(model, backbone[0], *blocks)


def build_mask_rcnn(
    depth: int = 50,
    num_classes: int = 91,
    *,
    backbone_block: bool = True,
    width_per_group: int = 64,
    norm_layer: Callable[..., nn.Module] | None = None,
    weights_backbone: Any = None,
    trainable_backbone_layers: int | None = None,
    frozen_bn: bool | None = None,
    block_options: dict[str, Any] | None = None,
    fpn_levels: Sequence[int] | None = None,
    **detector_kwargs: Any,
) -> MaskRCNN:
    """torchvision Mask R-CNN ResNet-FPN with one non-local block in res4 (Table 5).

    Args:
        depth: 50 or 101.
        num_classes: object classes including the background (91 for COCO's ids).
        backbone_block: insert the block (``False``: the plain torchvision baseline).
        width_per_group: torchvision's bottleneck width (64 = standard; smaller for tests).
        norm_layer: backbone normalisation (default: ``FrozenBatchNorm2d`` with
            ``weights_backbone``, else trainable ``BatchNorm2d``).
        weights_backbone: ImageNet ResNet weights for the backbone (Sec. 6: fine-tuned from
            ImageNet): a path, a torchvision enum or a name such as ``"IMAGENET1K_V1"``.
        trainable_backbone_layers: trained ResNet stages, 0-5 (default 3 with
            ``weights_backbone``, else 5), as in torchvision.
        frozen_bn: ``FrozenBatchNorm2d`` in the backbone (default: with ``weights_backbone``).
            Set it to rebuild a model trained from ImageNet weights without loading them
            again (the COCO configs set it, so that ``load_model`` rebuilds the frozen BN).
        block_options: options of :class:`~nlnet.layers.nonlocal_block.NonLocal2d` (default:
            embedded Gaussian, C/2 channels, 2x2 max-pool subsampling, BN with gamma = 0).
        fpn_levels: also one block on the lateral output of each of these FPN levels
            (0..3 = P2..P5, before the top-down sum, so it reaches every finer level), see
            :func:`insert_fpn_blocks`; ``None``: none.
        **detector_kwargs: passed to torchvision's ``MaskRCNN`` (``min_size``, ``max_size``,
            ``box_detections_per_img``, ...).
    """
    backbone = (depth, width_per_group, norm_layer, weights_backbone, trainable_backbone_layers,
                frozen_bn)  # fmt: skip
    blocks = (backbone_block, fpn_levels, block_options)
    return _detector(MaskRCNN, backbone, blocks, num_classes=num_classes, **detector_kwargs)


def build_faster_rcnn(
    depth: int = 50,
    num_classes: int = 91,
    *,
    backbone_block: bool = False,
    fpn_levels: Sequence[int] | None = None,
    width_per_group: int = 64,
    weights_backbone: Any = None,
    trainable_backbone_layers: int | None = None,
    frozen_bn: bool | None = None,
    block_options: dict[str, Any] | None = None,
    **detector_kwargs: Any,
) -> FasterRCNN:
    """torchvision Faster R-CNN ResNet-FPN (boxes only) with optional blocks: one in res4
    (``backbone_block``, Table 5's placement) and/or one per FPN level in ``fpn_levels``.
    Arguments as :func:`build_mask_rcnn`."""
    backbone = (depth, width_per_group, None, weights_backbone, trainable_backbone_layers,
                frozen_bn)  # fmt: skip
    blocks = (backbone_block, fpn_levels, block_options)
    return _detector(FasterRCNN, backbone, blocks, num_classes=num_classes, **detector_kwargs)


def build_keypoint_rcnn(
    depth: int = 101,
    num_classes: int = 2,
    *,
    head_blocks: bool = True,
    backbone_block: bool = False,
    fpn_levels: Sequence[int] | None = None,
    num_keypoints: int = 17,
    width_per_group: int = 64,
    norm_layer: Callable[..., nn.Module] | None = None,
    weights_backbone: Any = None,
    trainable_backbone_layers: int | None = None,
    frozen_bn: bool | None = None,
    block_options: dict[str, Any] | None = None,
    **detector_kwargs: Any,
) -> KeypointRCNN:
    """torchvision Keypoint R-CNN ResNet-FPN with Table 6's non-local blocks.

    Args:
        depth: 50 or 101 (Table 6 uses 101).
        num_classes: 2 (background, person) for COCO keypoints.
        head_blocks: 4 blocks in the keypoint head, after every 2 convolutions.
        backbone_block: also one block in res4 of the backbone (Table 6, last row).
        fpn_levels: also one block on the lateral output of each of these FPN levels
            (0..3 = P2..P5), see :func:`insert_fpn_blocks`; ``None``: none.
        num_keypoints: 17 for COCO.
        width_per_group, norm_layer, weights_backbone, trainable_backbone_layers,
            frozen_bn, block_options, **detector_kwargs: as in
            :func:`build_mask_rcnn` (``detector_kwargs`` go to torchvision's ``KeypointRCNN``).
    """
    backbone = (depth, width_per_group, norm_layer, weights_backbone, trainable_backbone_layers,
                frozen_bn)  # fmt: skip
    blocks = (backbone_block, fpn_levels, block_options, head_blocks)
    return _detector(KeypointRCNN, backbone, blocks, num_classes=num_classes,
                     num_keypoints=num_keypoints, **detector_kwargs)  # fmt: skip


def _non_local_unless_empty(module: nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor:
    return output if output.shape[0] == 0 else module.non_local(output)


class TinyResNetBody(nn.Module):
    """A narrow ResNet of torchvision ``BasicBlock`` blocks: stem (3x3, stride 2), ``layer1..4``.

    Stage ``i`` has ``planes[i]`` channels; ``layer2..4`` halve the resolution, so the stages
    are at strides 2, 4, 8, 16 (small objects on small images keep several positions).
    """

    def __init__(self, planes: tuple[int, ...] = (16, 32, 64, 64),
                 layers: tuple[int, ...] = (1, 1, 2, 1)) -> None:  # fmt: skip
        super().__init__()
        if len(planes) != 4 or len(layers) != 4 or min(*planes, *layers) < 1:
            raise ValueError(
                f"planes, layers: expected 4 positive ints each, got {planes}, {layers}"
            )
        self.stem = nn.Sequential(
            nn.Conv2d(3, planes[0], 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(planes[0]),
            nn.ReLU(inplace=True),
        )
        inplanes = planes[0]
        for i, (width, n) in enumerate(zip(planes, layers)):
            stride = 1 if i == 0 else 2
            blocks = []
            for j in range(n):
                down = None
                if j == 0 and (stride != 1 or inplanes != width):
                    down = nn.Sequential(
                        nn.Conv2d(inplanes, width, 1, stride=stride, bias=False),
                        nn.BatchNorm2d(width),
                    )
                blocks.append(resnet.BasicBlock(inplanes, width, stride if j == 0 else 1, down))
                inplanes = width
            self.add_module(f"layer{i + 1}", nn.Sequential(*blocks))
        self.out_channels = list(planes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))


def build_tiny_mask_rcnn(
    num_classes: int = 4,
    *,
    backbone_block: bool = True,
    planes: tuple[int, ...] = (16, 32, 64, 64),
    layers: tuple[int, ...] = (1, 1, 2, 1),
    fpn_channels: int = 32,
    representation_size: int = 128,
    image_size: int = 64,
    block_options: dict[str, Any] | None = None,
    fpn_levels: Sequence[int] | None = None,
    **detector_kwargs: Any,
) -> MaskRCNN:
    """A CPU-sized torchvision Mask R-CNN for small images (tests, smoke runs, the demo).

    The structure of :func:`build_mask_rcnn` at a fraction of the width: a
    :class:`TinyResNetBody` + FPN (``fpn_channels``), RPN with anchors of 8..128 pixels (one
    size per level, ratios 0.5/1/2), RoIAlign box head (two FC layers of
    ``representation_size``) and a two-convolution mask head; images are used at
    ``image_size`` (no resizing of 64x64 inputs). With ``backbone_block`` one non-local block
    goes right before the last residual block of res4 (``backbone.body.layer3.<n-2>``), as in
    Table 5.

    Args:
        num_classes: object classes including the background (4: the dense digits task).
        backbone_block: insert the block (``False``: the baseline).
        planes, layers: widths and depths of the body's four stages (``layers[2] >= 2``).
        fpn_channels: FPN width (256 in the full model).
        representation_size: box head width (1024 in the full model).
        image_size: ``min_size`` and ``max_size`` of torchvision's transform.
        block_options: options of the :class:`~nlnet.layers.nonlocal_block.NonLocal2d`.
        fpn_levels: also one block on the lateral output of each of these FPN levels
            (:func:`insert_fpn_blocks`).
        **detector_kwargs: more ``MaskRCNN`` options (they override the small defaults).
    """
    if layers[2] < 2 and backbone_block:
        raise ValueError(
            f"layers: res4 needs >= 2 blocks for the block before its last, got {layers}"
        )
    body = TinyResNetBody(tuple(planes), tuple(layers))
    backbone = BackboneWithFPN(
        body,
        {f"layer{i}": str(i - 1) for i in range(1, 5)},
        body.out_channels,
        fpn_channels,
    )
    c = fpn_channels
    anchors = AnchorGenerator(((8,), (16,), (32,), (64,), (128,)), ((0.5, 1.0, 2.0),) * 5)
    kwargs: dict[str, Any] = {
        "min_size": image_size, "max_size": image_size,
        "rpn_anchor_generator": anchors, "rpn_head": RPNHead(c, 3),
        "rpn_pre_nms_top_n_train": 300, "rpn_post_nms_top_n_train": 100,
        "rpn_pre_nms_top_n_test": 150, "rpn_post_nms_top_n_test": 50,
        "rpn_batch_size_per_image": 64, "box_batch_size_per_image": 64,
        "box_detections_per_img": 20,
        "box_head": TwoMLPHead(c * 7 * 7, representation_size),
        "box_predictor": FastRCNNPredictor(representation_size, num_classes),
        "mask_head": MaskRCNNHeads(c, (c, c), 1),
        "mask_predictor": MaskRCNNPredictor(c, c, num_classes),
        **detector_kwargs,
    }  # fmt: skip
    model = MaskRCNN(backbone, num_classes=None, **kwargs)
    return _with_blocks(model, 0, backbone_block, fpn_levels, block_options)
