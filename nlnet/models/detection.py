"""Mask R-CNN and Keypoint R-CNN with non-local blocks (Wang et al., "Non-local Neural Networks", CVPR 2018, arXiv:1711.07971, Sec. 6).

The detectors are torchvision's (``MaskRCNN``, ``KeypointRCNN`` on a ResNet-FPN backbone); this
module only builds them without any download (``weights=None``) and inserts 2D non-local blocks
with :func:`nlnet.models.surgery.insert_non_local`:

* Table 5 (detection and instance segmentation): "one non-local block (right before the last
  residual block of res4)" of the backbone: after ``backbone.body.layer3.4`` of a ResNet-50
  (``layer3.21`` of a ResNet-101).
* Table 6 (keypoints): "4 non-local blocks into the keypoint head (after every 2 convolutional
  layers)": torchvision's keypoint head is the 8-convolution stack of Mask R-CNN (conv, ReLU,
  ...); the blocks go after the ReLUs of convolutions 2, 4, 6 and 8 (``roi_heads.keypoint_head.3``,
  ``.7``, ``.11``, ``.15``), on 512 channels at the 14x14 RoI resolution. The third row of
  Table 6 adds the backbone block as well.

* The practitioner's "detection in large images" use case: several blocks (``sub_sample=2``) in
  the FPN, one per chosen level (``fpn_levels``, a list of indices 0..3 = P2..P5), on every
  builder (Mask, Faster and Keypoint R-CNN). Each goes on the level's lateral output, after its
  1x1 convolution (``backbone.fpn.inner_blocks.<i>``) and before the top-down sum, so the
  top-down pathway carries it to every finer level: a block at P5 changes P2..P6, one at P3
  changes P2 and P3 (torchvision's ``FeaturePyramidNetwork.forward`` sums the lateral maps; a
  block after a 3x3 output convolution would change its own level only). The ``*_nlfpn``
  models put them at P3, P4 and P5 (P2's 200x336 grid at 800x1333 would make a 67k x 17k
  attention matrix per image).

Every block starts as the identity (BN after ``W_z`` with gamma = 0, Sec. 4.1), so a model with
blocks computes exactly what the plain torchvision detector with the same weights computes, and
a torchvision checkpoint loads with :func:`nlnet.models.loading.load_partial` keeping the
``.non_local.`` keys.

"All models are fine-tuned from ImageNet pre-training" (Sec. 6): ``weights_backbone`` (torchvision's
name for it; ``weights`` / ``pretrained_2d`` of :func:`~nlnet.models.registry.create_model`
and the config key ``model.init`` route ImageNet weights to it) loads ImageNet ResNet weights into ``backbone.body`` through
the one weight resolver (:mod:`nlnet.models.weights`: a path, a torchvision enum or
``"IMAGENET1K_V1"``) and, as torchvision does for a pre-trained backbone, freezes its BN
(``FrozenBatchNorm2d``) and trains only the last 3 stages. Without it the backbone uses trainable
``BatchNorm2d`` and all 5 stages train, as torchvision does without weights.

``maskrcnn_tiny[_nl]`` is a CPU-sized Mask R-CNN of the same structure (ResNet body of
torchvision ``BasicBlock`` blocks, FPN, RPN, RoIAlign box and mask heads; the block right before the
last residual block of res4) for 64x64 images with small objects: tests, smoke configs and
``nlnet demo --task detection``.

This module registers the model names; the builders are in :mod:`nlnet.models.detection_builders`
(all importable from here).
"""

from __future__ import annotations

import warnings
from typing import Any

from torch import nn

from nlnet.models.detection_builders import (
    FPN_LEVELS,
    KEYPOINT_HEAD_PATHS,
    TinyResNetBody,
    backbone_non_local_path,
    build_faster_rcnn,
    build_keypoint_rcnn,
    build_mask_rcnn,
    build_tiny_mask_rcnn,
    detector_placement,
    insert_fpn_blocks,
    place_detector_blocks,
)
from nlnet.models.model_cfg import ModelCfg
from nlnet.models.placement import block_arguments
from nlnet.models.registry import register_model

__all__ = [
    "KEYPOINT_HEAD_PATHS",
    "build_keypoint_rcnn",
    "build_mask_rcnn",
    "build_tiny_mask_rcnn",
    "build_faster_rcnn",
    "FPN_LEVELS",
    "insert_fpn_blocks",
    "backbone_non_local_path",
    "TinyResNetBody",
]


# --------------------------------------------------------------------------- registry
_MASKS, _KEYPOINTS, _BOXES = ("bbox", "segm"), ("bbox", "keypoints"), ("bbox",)
_HEADS = {  # the class-count-dependent layers of each kind of detector, by what it predicts
    _MASKS: ("roi_heads.box_predictor", "roi_heads.mask_predictor.mask_fcn_logits"),
    _KEYPOINTS: ("roi_heads.box_predictor", "roi_heads.keypoint_predictor"),
    _BOXES: ("roi_heads.box_predictor",),
}


def _cfg(outputs: tuple[str, ...], depth: int, blocks: str | None, num_classes: int) -> ModelCfg:
    return ModelCfg(
        task="detection",
        outputs=outputs,
        num_classes=num_classes,
        input_size=(3, 800, 1333),
        first_conv="backbone.body.conv1",
        classifier=_HEADS[outputs],
        family="detection",
        weights_format="backbone",  # torchvision names the backbone's weights
        takes_dropout=False,
        depth=depth,
        # create_model(weights=/pretrained_2d=) / model.init -> the builder's backbone weights
        pretrained_2d_arg="weights_backbone",
        blocks=blocks,
        # narrow copy of the same topology for CPU tests
        test_overrides={"width_per_group": 4, "min_size": 64, "max_size": 64},
    )


def _tiny_cfg(blocks: str | None) -> ModelCfg:
    return ModelCfg(
        task="detection",
        outputs=_MASKS,
        num_classes=4,
        input_size=(3, 64, 64),
        first_conv="backbone.body.stem.0",
        classifier=_HEADS[_MASKS],
        family="detection",
        weights_format="backbone",  # torchvision names the backbone's weights
        takes_dropout=False,
        blocks=blocks,
    )


#: The older keywords of a detector's placement (read by :func:`_detector` with a warning).
_LEGACY_FLAGS = ("backbone_block", "fpn_levels", "head_blocks")


def _detector(
    builder: Any, args: tuple, kwargs: dict[str, Any], *, backbone: bool = False,
    fpn: bool = False, head: bool = False,
) -> nn.Module:  # fmt: skip
    """A registered detector: the plain model from ``builder``, then its blocks where
    ``placement=`` says (default: the entry's, from ``backbone`` / ``fpn`` / ``head``) with
    ``block=`` options (:func:`~nlnet.models.detection_builders.place_detector_blocks`)."""
    flags = {"backbone_block": backbone, "fpn_levels": FPN_LEVELS if fpn else None,
             "head_blocks": head}  # fmt: skip
    old = {k: kwargs.pop(k) for k in _LEGACY_FLAGS if k in kwargs}
    given = any(k in kwargs for k in ("placement", "nl_at", "nl_location", "nonlocal_inds"))
    block, placement = block_arguments(kwargs)
    for key in old:
        warnings.warn(f"{key}= is deprecated; write placement=[module paths] "
                      "(nlnet.models.detection_builders.detector_placement)",
                      DeprecationWarning, stacklevel=3)  # fmt: skip
    if old and given:
        raise ValueError(f"placement: given twice (placement= and {sorted(old)}); give one")
    plain = {"backbone_block": False, "fpn_levels": None}
    if builder is build_keypoint_rcnn:
        plain["head_blocks"] = False
    model = builder(*args, **plain, **kwargs)
    if not given:
        placement = detector_placement(model, **{**flags, **old})
    return place_detector_blocks(model, placement, block)


@register_model(default_cfg=_cfg(_MASKS, 50, None, 91))
def maskrcnn_r50_fpn(**kwargs: Any) -> nn.Module:
    """torchvision Mask R-CNN ResNet-50-FPN (Table 5 baseline)"""
    return _detector(build_mask_rcnn, (50,), kwargs)


@register_model(default_cfg=_cfg(_MASKS, 50, "res4", 91))
def maskrcnn_r50_fpn_nl(**kwargs: Any) -> nn.Module:
    """torchvision Mask R-CNN ResNet-50-FPN, 1 non-local block in res4 (Table 5)"""
    return _detector(build_mask_rcnn, (50,), kwargs, backbone=True)


@register_model(default_cfg=_cfg(_MASKS, 101, None, 91))
def maskrcnn_r101_fpn(**kwargs: Any) -> nn.Module:
    """torchvision Mask R-CNN ResNet-101-FPN (Table 5 baseline)"""
    return _detector(build_mask_rcnn, (101,), kwargs)


@register_model(default_cfg=_cfg(_MASKS, 101, "res4", 91))
def maskrcnn_r101_fpn_nl(**kwargs: Any) -> nn.Module:
    """torchvision Mask R-CNN ResNet-101-FPN, 1 non-local block in res4 (Table 5)"""
    return _detector(build_mask_rcnn, (101,), kwargs, backbone=True)


@register_model(default_cfg=_cfg(_KEYPOINTS, 101, None, 2))
def keypointrcnn_r101_fpn(**kwargs: Any) -> nn.Module:
    """torchvision Keypoint R-CNN ResNet-101-FPN (Table 6 baseline)"""
    return _detector(build_keypoint_rcnn, (101,), kwargs)


@register_model(default_cfg=_cfg(_KEYPOINTS, 101, "nlhead", 2))
def keypointrcnn_r101_fpn_nlhead(**kwargs: Any) -> nn.Module:
    """torchvision Keypoint R-CNN ResNet-101-FPN, 4 non-local blocks in the keypoint head
    (Table 6)"""
    return _detector(build_keypoint_rcnn, (101,), kwargs, head=True)


@register_model(default_cfg=_cfg(_KEYPOINTS, 101, "nlhead_nl1", 2))
def keypointrcnn_r101_fpn_nlhead_nl1(**kwargs: Any) -> nn.Module:
    """torchvision Keypoint R-CNN ResNet-101-FPN, 4 blocks in the keypoint head + 1 in res4
    (Table 6)"""
    return _detector(build_keypoint_rcnn, (101,), kwargs, head=True, backbone=True)


@register_model(default_cfg=_tiny_cfg(None))
def maskrcnn_tiny(**kwargs: Any) -> nn.Module:
    """CPU-sized Mask R-CNN (BasicBlock ResNet + FPN) for 64x64 images, no block"""
    return _detector(build_tiny_mask_rcnn, (), kwargs)


@register_model(default_cfg=_tiny_cfg("res4"))
def maskrcnn_tiny_nl(**kwargs: Any) -> nn.Module:
    """CPU-sized Mask R-CNN (BasicBlock ResNet + FPN) for 64x64 images, 1 non-local block in
    res4 (as Table 5)"""
    return _detector(build_tiny_mask_rcnn, (), kwargs, backbone=True)


# the practitioner's multi-scale use case: blocks at several FPN levels (P3..P5 by default)
@register_model(default_cfg=_cfg(_MASKS, 50, "fpn", 91))
def maskrcnn_r50_fpn_nlfpn(**kwargs: Any) -> nn.Module:
    """torchvision Mask R-CNN ResNet-50-FPN, 1 non-local block at each of P3, P4, P5
    (fpn_levels=)"""
    return _detector(build_mask_rcnn, (50,), kwargs, fpn=True)


@register_model(default_cfg=_cfg(_BOXES, 50, None, 91))
def fasterrcnn_r50_fpn(**kwargs: Any) -> nn.Module:
    """torchvision Faster R-CNN ResNet-50-FPN, no block"""
    return _detector(build_faster_rcnn, (50,), kwargs)


@register_model(default_cfg=_cfg(_BOXES, 50, "fpn", 91))
def fasterrcnn_r50_fpn_nlfpn(**kwargs: Any) -> nn.Module:
    """torchvision Faster R-CNN ResNet-50-FPN, 1 non-local block at each of P3, P4, P5
    (fpn_levels=)"""
    return _detector(build_faster_rcnn, (50,), kwargs, fpn=True)


@register_model(default_cfg=_tiny_cfg("fpn"))
def maskrcnn_tiny_nlfpn(**kwargs: Any) -> nn.Module:
    """CPU-sized Mask R-CNN for 64x64 images, 1 non-local block at each of P3, P4, P5"""
    return _detector(build_tiny_mask_rcnn, (), kwargs, fpn=True)
