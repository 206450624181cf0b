"""The C2D and I3D video ResNets of Table 1 and Section 4, one registered builder per name.

"Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971). Name scheme
(``docs/models.md``): ``{arch}_{depth}[_{blocks}]`` with ``arch`` ``c2d`` (Table 1, 2D kernels
only), ``i3d`` (3x3x3 inflation of one 3x3 kernel in two, conv1 5x7x7) or ``i3d311`` (the first
1x1 kernel inflated to 3x1x1); ``depth`` ``r50`` / ``r101``; ``blocks`` none (baseline),
``nl1`` (1 block in res4, Table 2a), ``nl5`` / ``nl10`` (Table 2c) or ``nl_res2`` .. ``nl_res5``
(1 block right before the last residual block of that stage, Table 2b). Exact block indices:
:mod:`nlnet.models.surgery`.

Every builder takes :class:`~nlnet.models.video.resnet3d.ResNet3d` options, ``placement=`` (a
preset, stage indices or module paths, replacing the name's placement) and ``block=`` (the
block's options), e.g. ``create_model("c2d_r50_nl5", block={"mode": "space"})`` for Table 2d
(:mod:`nlnet.models.placement`).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from nlnet.models.model_cfg import ModelCfg
from nlnet.models.placement import block_arguments, family_block, place_non_local
from nlnet.models.registry import register_model
from nlnet.models.resnet_layout import BLOCK_CONFIG
from nlnet.models.video.resnet3d import ResNet3d

__all__ = ["build_video_resnet", "VIDEO_ARCHS", "VIDEO_DEPTHS"]  # models: create_model

#: ``arch`` of :func:`build_video_resnet` -> ``ResNet3d(inflate=...)`` (Section 4).
VIDEO_ARCHS: dict[str, str | None] = {"c2d": None, "i3d": "3x3x3", "i3d311": "3x1x1"}
#: Depths of the video ResNets (Table 2e: ResNet-50 and ResNet-101).
VIDEO_DEPTHS: tuple[int, ...] = (50, 101)


def build_video_resnet(
    depth: int = 50,
    arch: str = "c2d",
    blocks: str | None = None,
    **kwargs: Any,
) -> nn.Module:
    """Build a C2D/I3D ResNet (Table 1, Section 4) with non-local blocks at a preset.

    Args:
        depth: 50 or 101.
        arch: ``"c2d"``, ``"i3d"`` (3x3x3) or ``"i3d311"`` (3x1x1).
        blocks: ``None`` or a placement preset (``"nl1"``, ``"nl5"``, ``"nl10"``,
            ``"res2"``..``"res5"``): the name's placement.
        **kwargs: :class:`~nlnet.models.video.resnet3d.ResNet3d` options, ``placement``
            (replacing ``blocks``) and ``block`` (:mod:`nlnet.models.placement`).
    """
    if depth not in VIDEO_DEPTHS:
        raise ValueError(f"depth: expected one of {list(VIDEO_DEPTHS)}, got {depth!r}")
    if arch not in VIDEO_ARCHS:
        raise ValueError(f"arch: expected one of {sorted(VIDEO_ARCHS)}, got {arch!r}")
    block, placement = block_arguments(kwargs, blocks)
    layers = kwargs.pop("layers", BLOCK_CONFIG[depth])
    inflate = VIDEO_ARCHS[arch]
    if placement is not None and placement.stage_indices(layers) is None:
        # not residual blocks (e.g. a whole stage): inserted after construction
        model = ResNet3d(layers, inflate=inflate, **kwargs)
        return place_non_local(model, placement, family_block(block))
    # nlnet's own backbone builds its blocks with the network, per stage (Sec. 4, Table 2)
    return ResNet3d(layers, inflate=inflate, placement=placement, block=block, **kwargs)


def _cfg(arch: str, depth: int, blocks: str | None) -> ModelCfg:
    return ModelCfg(
        task="video_classification",
        num_classes=400,  # Kinetics-400
        input_size=(3, 32, 224, 224),
        first_conv="conv1",
        classifier=("fc",),
        family="resnet3d",
        weights_format="inflate",  # 2D ResNet weights inflated to 3D (Section 4.1)
        arch=arch,
        depth=depth,
        blocks=blocks,
        test_overrides={"width": 4},
    )


@register_model(default_cfg=_cfg("c2d", 50, None))
def c2d_r50(**kwargs: Any) -> nn.Module:
    """C2D ResNet-50."""
    return build_video_resnet(50, "c2d", None, **kwargs)


@register_model(default_cfg=_cfg("c2d", 50, "nl1"))
def c2d_r50_nl1(**kwargs: Any) -> nn.Module:
    """C2D ResNet-50, 1 non-local block (res4)."""
    return build_video_resnet(50, "c2d", "nl1", **kwargs)


@register_model(default_cfg=_cfg("c2d", 50, "nl5"))
def c2d_r50_nl5(**kwargs: Any) -> nn.Module:
    """C2D ResNet-50, 5 non-local blocks (2 res3 + 3 res4)."""
    return build_video_resnet(50, "c2d", "nl5", **kwargs)


@register_model(default_cfg=_cfg("c2d", 50, "nl10"))
def c2d_r50_nl10(**kwargs: Any) -> nn.Module:
    """C2D ResNet-50, 10 non-local blocks (4 res3 + 6 res4)."""
    return build_video_resnet(50, "c2d", "nl10", **kwargs)


@register_model(default_cfg=_cfg("c2d", 50, "res2"))
def c2d_r50_nl_res2(**kwargs: Any) -> nn.Module:
    """C2D ResNet-50, 1 non-local block in res2."""
    return build_video_resnet(50, "c2d", "res2", **kwargs)


@register_model(default_cfg=_cfg("c2d", 50, "res3"))
def c2d_r50_nl_res3(**kwargs: Any) -> nn.Module:
    """C2D ResNet-50, 1 non-local block in res3."""
    return build_video_resnet(50, "c2d", "res3", **kwargs)


@register_model(default_cfg=_cfg("c2d", 50, "res4"))
def c2d_r50_nl_res4(**kwargs: Any) -> nn.Module:
    """C2D ResNet-50, 1 non-local block in res4."""
    return build_video_resnet(50, "c2d", "res4", **kwargs)


@register_model(default_cfg=_cfg("c2d", 50, "res5"))
def c2d_r50_nl_res5(**kwargs: Any) -> nn.Module:
    """C2D ResNet-50, 1 non-local block in res5."""
    return build_video_resnet(50, "c2d", "res5", **kwargs)


@register_model(default_cfg=_cfg("c2d", 101, None))
def c2d_r101(**kwargs: Any) -> nn.Module:
    """C2D ResNet-101."""
    return build_video_resnet(101, "c2d", None, **kwargs)


@register_model(default_cfg=_cfg("c2d", 101, "nl1"))
def c2d_r101_nl1(**kwargs: Any) -> nn.Module:
    """C2D ResNet-101, 1 non-local block (res4)."""
    return build_video_resnet(101, "c2d", "nl1", **kwargs)


@register_model(default_cfg=_cfg("c2d", 101, "nl5"))
def c2d_r101_nl5(**kwargs: Any) -> nn.Module:
    """C2D ResNet-101, 5 non-local blocks (2 res3 + 3 res4)."""
    return build_video_resnet(101, "c2d", "nl5", **kwargs)


@register_model(default_cfg=_cfg("c2d", 101, "nl10"))
def c2d_r101_nl10(**kwargs: Any) -> nn.Module:
    """C2D ResNet-101, 10 non-local blocks (4 res3 + 6 res4)."""
    return build_video_resnet(101, "c2d", "nl10", **kwargs)


@register_model(default_cfg=_cfg("i3d", 50, None))
def i3d_r50(**kwargs: Any) -> nn.Module:
    """I3D 3x3x3 ResNet-50."""
    return build_video_resnet(50, "i3d", None, **kwargs)


@register_model(default_cfg=_cfg("i3d", 50, "nl5"))
def i3d_r50_nl5(**kwargs: Any) -> nn.Module:
    """I3D 3x3x3 ResNet-50, 5 non-local blocks (2 res3 + 3 res4)."""
    return build_video_resnet(50, "i3d", "nl5", **kwargs)


@register_model(default_cfg=_cfg("i3d", 50, "nl10"))
def i3d_r50_nl10(**kwargs: Any) -> nn.Module:
    """I3D 3x3x3 ResNet-50, 10 non-local blocks (4 res3 + 6 res4)."""
    return build_video_resnet(50, "i3d", "nl10", **kwargs)


@register_model(default_cfg=_cfg("i3d", 101, None))
def i3d_r101(**kwargs: Any) -> nn.Module:
    """I3D 3x3x3 ResNet-101."""
    return build_video_resnet(101, "i3d", None, **kwargs)


@register_model(default_cfg=_cfg("i3d", 101, "nl5"))
def i3d_r101_nl5(**kwargs: Any) -> nn.Module:
    """I3D 3x3x3 ResNet-101, 5 non-local blocks (2 res3 + 3 res4)."""
    return build_video_resnet(101, "i3d", "nl5", **kwargs)


@register_model(default_cfg=_cfg("i3d", 101, "nl10"))
def i3d_r101_nl10(**kwargs: Any) -> nn.Module:
    """I3D 3x3x3 ResNet-101, 10 non-local blocks (4 res3 + 6 res4)."""
    return build_video_resnet(101, "i3d", "nl10", **kwargs)


@register_model(default_cfg=_cfg("i3d311", 50, None))
def i3d311_r50(**kwargs: Any) -> nn.Module:
    """I3D 3x1x1 ResNet-50."""
    return build_video_resnet(50, "i3d311", None, **kwargs)


@register_model(default_cfg=_cfg("i3d311", 50, "nl5"))
def i3d311_r50_nl5(**kwargs: Any) -> nn.Module:
    """I3D 3x1x1 ResNet-50, 5 non-local blocks (2 res3 + 3 res4)."""
    return build_video_resnet(50, "i3d311", "nl5", **kwargs)


@register_model(default_cfg=_cfg("i3d311", 50, "nl10"))
def i3d311_r50_nl10(**kwargs: Any) -> nn.Module:
    """I3D 3x1x1 ResNet-50, 10 non-local blocks (4 res3 + 6 res4)."""
    return build_video_resnet(50, "i3d311", "nl10", **kwargs)


@register_model(default_cfg=_cfg("i3d311", 101, None))
def i3d311_r101(**kwargs: Any) -> nn.Module:
    """I3D 3x1x1 ResNet-101."""
    return build_video_resnet(101, "i3d311", None, **kwargs)


@register_model(default_cfg=_cfg("i3d311", 101, "nl5"))
def i3d311_r101_nl5(**kwargs: Any) -> nn.Module:
    """I3D 3x1x1 ResNet-101, 5 non-local blocks (2 res3 + 3 res4)."""
    return build_video_resnet(101, "i3d311", "nl5", **kwargs)


@register_model(default_cfg=_cfg("i3d311", 101, "nl10"))
def i3d311_r101_nl10(**kwargs: Any) -> nn.Module:
    """I3D 3x1x1 ResNet-101, 10 non-local blocks (4 res3 + 6 res4)."""
    return build_video_resnet(101, "i3d311", "nl10", **kwargs)


@register_model(
    description="R3D-18 (torchvision's r3d_18 rebuilt: basic blocks, 3x3x3 kernels); blocks by "
    "placement=",
    default_cfg=ModelCfg(
        task="video_classification",
        num_classes=400,
        input_size=(3, 16, 112, 112),
        mean=(0.43216, 0.394666, 0.37645),  # torchvision's R3D_18_Weights transforms
        std=(0.22803, 0.22145, 0.216989),
        first_conv="conv1",
        classifier=("fc",),
        family="resnet3d",
        arch="r3d",
        depth=18,
        weights_format="r3d",  # torchvision's VideoResNet keys, renamed
        torchvision_arch="r3d_18",
        test_overrides={"width": 4},
    ),
)
def r3d_18(**kwargs: Any) -> nn.Module:
    """R3D-18 (Tran et al., CVPR 2018) as :class:`ResNet3d`: torchvision's ``r3d_18`` with the same
    function and weights (``model.init: KINETICS400_V1`` loads torchvision's); non-local blocks
    after residual blocks with ``placement=`` (e.g. ``{"res3": [1], "res4": [1]}``)."""
    from nlnet.models.video.torchvision_r3d import R3D_18_LAYERS, R3D_18_OPTIONS

    block, placement = block_arguments(kwargs, None)
    options = {**R3D_18_OPTIONS, **kwargs}
    return ResNet3d(R3D_18_LAYERS, placement=placement, block=block, **options)
