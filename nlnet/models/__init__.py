"""nlnet.models: C2D/I3D video ResNets, 2D->3D inflation, non-local surgery and the registry.

See ``docs/models.md`` for the model names and where the non-local blocks go.
"""

from nlnet.models import detection as _detection  # noqa: F401  (maskrcnn_*, keypointrcnn_*)
from nlnet.models import segmentation as _segmentation  # noqa: F401  (seg_tiny*)
from nlnet.models.edsr import EDSR  # noqa: F401  (registers edsr_baseline*)
from nlnet.models.image import SegmentationHead, SegmentationNet, resnet_non_local
from nlnet.models.image_tiny import TinyImageResNet  # noqa: F401  (registers resnet_tiny*)
from nlnet.models.inflate import (
    inflate_conv_weight,
    inflate_state_dict,
    load_pretrained_2d,
)
from nlnet.models.loading import LoadReport, load_partial
from nlnet.models.model_cfg import ModelCfg
from nlnet.models.rcan import RCAN  # noqa: F401  (registers rcan*)
from nlnet.models.registry import (
    ModelEntry,
    create_model,
    find_models,
    get_model_entry,
    list_models,
    model_facts,
    register_model,
)
from nlnet.models.resnet_layout import BLOCK_CONFIG, STAGE_NAMES
from nlnet.models.slowfast import SlowFast  # noqa: F401  (registers slowfast_r50*)
from nlnet.models.surgery import PLACEMENTS, insert_non_local, non_local_blocks, non_local_paths
from nlnet.models.swin import SwinTransformer  # noqa: F401  (registers swin_*)
from nlnet.models.unet import UNet  # noqa: F401  (registers unet2d*, unet3d*)
from nlnet.models.video import resnets as _video_resnets  # noqa: F401  (c2d_r*, i3d*)
from nlnet.models.video import tiny as _video_tiny  # noqa: F401  (c2d_tiny*, i3d_tiny*)
from nlnet.models.video.resnet3d import BasicBlock3d, Bottleneck3d, ResNet3d, inflation_pattern
from nlnet.models.video.transformer import VideoTransformer  # noqa: F401  (registers vivit_tiny)
from nlnet.models.vit import VisionTransformer  # noqa: F401  (registers vit_*)

__all__ = [
    "BLOCK_CONFIG",
    "BasicBlock3d",
    "Bottleneck3d",
    "LoadReport",
    "load_partial",
    "ModelCfg",
    "ModelEntry",
    "PLACEMENTS",
    "ResNet3d",
    "SegmentationHead",
    "SegmentationNet",
    "STAGE_NAMES",
    "create_model",
    "get_model_entry",
    "inflate_conv_weight",
    "inflate_state_dict",
    "inflation_pattern",
    "insert_non_local",
    "find_models",
    "list_models",
    "load_pretrained_2d",
    "model_facts",
    "non_local_blocks",
    "non_local_paths",
    "register_model",
    "resnet_non_local",
]
