"""The released Kinetics models of "Non-local Neural Networks" (Wang et al., CVPR 2018,
arXiv:1711.07971) as nlnet models: architecture, per-stage block options, preprocessing, test.

The paper's authors released 15 ResNet-50 Kinetics-400 models with their Caffe2 code
(facebookresearch/video-nonlocal-net, README "Main Results", "Modifications for improving
speed", "Training with fewer GPUs"). Each row of :data:`RELEASED_MODELS` says how nlnet rebuilds
one of them exactly, as read from the released builders:

* **Clip and stem.** ``*_32x2_*`` / ``*_128x1_*`` were built by ``resnet_video_org.py``:
  ``conv1`` temporal stride 2, ``pool1`` ``2x3x3`` stride 2, ``pool2`` ``2x1x1`` stride 2
  (``temporal_strides=(2, 2, 2)``, Table 1). ``*_8x8_*`` / ``*_32x4_*`` by ``resnet_video.py``:
  ``conv1`` stride 1, ``pool1`` ``1x3x3`` stride ``(1, 2, 2)``, ``pool2`` ``2x1x1`` stride 2
  (``temporal_strides=(1, 1, 2)``). Both pool without padding (``pooling="caffe2"``).
* **Backbone.** ``c2d_*``: ``c2d_r50``; ``i3d_*``: the 3x1x1 I3D (``i3d311_r50``, the released
  ``VIDEO_ARC_CHOICE 2`` inflates ``branch2a``, conv1 ``5x7x7``); ``*nonlocal*``: 5 blocks after
  res3 blocks 1, 3 and res4 blocks 1, 3, 5 (``NONLOCAL.LAYER_MOD 2``, Table 2c).
* **Blocks.** The ImageNet-initialised files (``*_IN_pretrain_*``) were trained with BN after
  ``W_z`` (``USE_BN``, Section 4.1). The Kinetics-initialised long-clip files
  (``*_I3D_pretrain_*``, ``USE_AFFINE``: frozen BN as a per-channel affine layer) have blocks
  without a norm whose ``W_z`` has a bias (``USE_BN: False``, ``USE_ZERO_INIT_CONV: True``:
  ``block={"norm": None}``), and res3's blocks attend within groups of 4 consecutive frames
  (``res_stage_nonlocal_group``, ``group_size=4``) while res4's do not
  (``placement={"at": "nl5", "stage_options": {"res3": {"temporal_groups": 4}}}``).
* **Preprocessing.** ``(x - 114.75) / 57.375`` on 0-255 pixels for every channel
  (``MODEL.MEAN``/``MODEL.STD``), i.e. mean 0.45 and std 0.225 on 0-1 pixels, RGB order (the
  released decoder writes ``RGB24`` and ``MODEL.USE_BGR`` is false).
* **Test.** Shorter side 256, 10 clips x 3 crops of 256 x 256, fully convolutional: the test
  net's ``T x 7 x 7`` stride-1 average pool, ``pred`` as a ``1x1x1`` convolution, a softmax per
  position, averaged (``head="fully_conv"``), then averaged over the 30 views.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ReleasedModel",
    "RELEASED_MODELS",
    "RELEASED_PREPROCESSING",
    "RELEASED_TEST",
    "released_model",
    "match_released",
    "blob_structure",
]

#: Input normalisation of every released model (on 0-1 pixels; = 114.75 / 57.375 on 0-255).
RELEASED_PREPROCESSING: dict[str, Any] = {
    "mean": [114.75 / 255.0] * 3,
    "std": [57.375 / 255.0] * 3,
    "channel_order": "RGB",
    "size": 256,
    "crop": 256,
}
#: The released test protocol (README "Testing"): 10 clips x 3 crops, fully convolutional.
RELEASED_TEST: dict[str, Any] = {"clips": 10, "crops": 3, "head": "fully_conv"}

_ORG = {"pooling": "caffe2", "temporal_strides": [2, 2, 2]}  # resnet_video_org.py (32x2, 128x1)
_FAST = {"pooling": "caffe2", "temporal_strides": [1, 1, 2]}  # resnet_video.py (8x8, 32x4)
_AFFINE_NL = {
    "block": {"norm": None},
    "placement": {"at": "nl5", "stage_options": {"res3": {"temporal_groups": 4}}},
}


@dataclass(frozen=True)
class ReleasedModel:
    """One released file and the nlnet model that computes it."""

    file: str  # file name in the released README
    model: str  # nlnet registry name
    overrides: Mapping[str, Any]  # create_model options (per-stage block options included)
    num_frames: int
    stride: int
    top1: float  # the released README's top-1 (fully convolutional test)
    paper_top1: float | None  # the paper's figure for the same setting, if it has one
    script: str  # the released training script
    affine: bool = False  # backbone BN stored as scale/shift only (USE_AFFINE)

    @property
    def model_options(self) -> dict[str, Any]:
        """``create_model`` options: the architecture plus the released test head."""
        return {**dict(self.overrides), "head": RELEASED_TEST["head"]}

    @property
    def preprocessing(self) -> dict[str, Any]:
        """What an nlnet checkpoint stores as its preprocessing."""
        return {**RELEASED_PREPROCESSING, "num_frames": self.num_frames, "stride": self.stride}


def _rm(file, model, arch, frames, stride, top1, paper, script, affine=False) -> ReleasedModel:
    over = dict(arch)
    if affine and "nl5" in model:
        over.update(_AFFINE_NL)
    return ReleasedModel(file, model, over, frames, stride, top1, paper, script, affine)


#: Every model file of the released README, by file name.
RELEASED_MODELS: dict[str, ReleasedModel] = {
    r.file: r
    for r in (
        # "Main Results": the paper's settings (32x2 from ImageNet, 128x1 from the 32x2 I3D)
        _rm("c2d_baseline_32x2_IN_pretrain_400k.pkl", "c2d_r50", _ORG, 32, 2, 72.0, 71.8,
            "run_c2d_baseline_400k_32f.sh"),
        _rm("c2d_nonlocal_32x2_IN_pretrain_400k.pkl", "c2d_r50_nl5", _ORG, 32, 2, 73.9, 73.8,
            "run_c2d_nlnet_400k_32f.sh"),
        _rm("i3d_baseline_32x2_IN_pretrain_400k.pkl", "i3d311_r50", _ORG, 32, 2, 73.6, 73.3,
            "run_i3d_baseline_400k_32f.sh"),
        _rm("i3d_nonlocal_32x2_IN_pretrain_400k.pkl", "i3d311_r50_nl5", _ORG, 32, 2, 74.9, 74.9,
            "run_i3d_nlnet_400k_32f.sh"),
        _rm("i3d_baseline_128x1_I3D_pretrain_400k.pkl", "i3d311_r50", _ORG, 128, 1, 75.2, 74.9,
            "run_i3d_baseline_affine_400k_128f.sh", affine=True),
        _rm("i3d_nonlocal_128x1_I3D_pretrain_400k.pkl", "i3d311_r50_nl5", _ORG, 128, 1, 76.5,
            76.5, "run_i3d_nlnet_affine_400k_128f.sh", affine=True),
        # "Modifications for improving speed": 8 frames x stride 8, 32 frames x stride 4
        _rm("c2d_baseline_8x8_IN_pretrain_400k.pkl", "c2d_r50", _FAST, 8, 8, 71.9, None,
            "run_c2d_baseline_400k.sh"),
        _rm("c2d_nonlocal_8x8_IN_pretrain_400k.pkl", "c2d_r50_nl5", _FAST, 8, 8, 74.4, None,
            "run_c2d_nlnet_400k.sh"),
        _rm("i3d_baseline_8x8_IN_pretrain_400k.pkl", "i3d311_r50", _FAST, 8, 8, 73.4, None,
            "run_i3d_baseline_400k.sh"),
        _rm("i3d_nonlocal_8x8_IN_pretrain_400k.pkl", "i3d311_r50_nl5", _FAST, 8, 8, 74.7, None,
            "run_i3d_nlnet_400k.sh"),
        _rm("i3d_baseline_32x4_I3D_pretrain_400k.pkl", "i3d311_r50", _FAST, 32, 4, 75.5, None,
            "run_i3d_baseline_affine_400k.sh", affine=True),
        _rm("i3d_nonlocal_32x4_I3D_pretrain_400k.pkl", "i3d311_r50_nl5", _FAST, 32, 4, 76.5,
            None, "run_i3d_nlnet_affine_400k.sh", affine=True),
        # "Fewer training iterations" and "Training with fewer GPUs"
        _rm("i3d_baseline_8x8_IN_pretrain_300k.pkl", "i3d311_r50", _FAST, 8, 8, 73.2, None,
            "run_i3d_baseline_300k.sh"),
        _rm("i3d_baseline_8x8_IN_pretrain_600k_4gpu.pkl", "i3d311_r50", _FAST, 8, 8, 73.0, None,
            "run_i3d_baseline_600k_4gpu.sh"),
        _rm("i3d_baseline_8x8_IN_pretrain_300k_4gpu.pkl", "i3d311_r50", _FAST, 8, 8, 72.0, None,
            "run_i3d_baseline_300k_4gpu.sh"),
    )
}  # fmt: skip


def released_model(name: str) -> ReleasedModel:
    """The entry of a released file name (a path, with or without ``.pkl``)."""
    key = Path(str(name)).name
    key = key if key.endswith(".pkl") else key + ".pkl"
    if key not in RELEASED_MODELS:
        raise ValueError(
            f"released: {name!r} is not a released file name; expected one of "
            f"{', '.join(sorted(RELEASED_MODELS))}"
        )
    return RELEASED_MODELS[key]


def blob_structure(blobs: Mapping[str, np.ndarray]) -> tuple[str, bool]:
    """``(nlnet model name, affine backbone)`` that a released blob set describes.

    Read from the blobs alone: I3D when ``conv1_w`` has a temporal kernel, the depth from the
    res4 block count, non-local blocks from ``nonlocal_conv*`` names, an affine backbone when
    the stem BN has no running statistics.
    """
    if "conv1_w" not in blobs:
        raise ValueError("FILE: no conv1_w blob; not a released video ResNet")
    conv1 = np.shape(blobs["conv1_w"])
    arch = "i3d311" if len(conv1) == 5 and conv1[2] > 1 else "c2d"
    res4 = {n.split("_")[1] for n in blobs if n.startswith("res4_") and n.endswith("branch2a_w")}
    depth = {6: 50, 23: 101}.get(len(res4))
    if depth is None:
        raise ValueError(f"FILE: {len(res4)} res4 blocks; expected 6 (R50) or 23 (R101)")
    nl = sorted({"_".join(n.split("_")[:3]) for n in blobs if n.startswith("nonlocal_conv")})
    blocks = {0: "", 5: "_nl5", 10: "_nl10", 1: "_nl1"}.get(len(nl))
    if blocks is None:
        raise ValueError(f"FILE: {len(nl)} non-local blocks; expected 0, 1, 5 or 10")
    return f"{arch}_r{depth}{blocks}", "res_conv1_bn_rm" not in blobs


def match_released(path: str, blobs: Mapping[str, np.ndarray]) -> list[ReleasedModel]:
    """Released entries for a file: by its name, else every entry its blobs could be.

    Returns one entry for a released file name, the candidates of the same structure
    (:func:`blob_structure`) otherwise; several candidates differ only in clip length and
    stem strides, which no blob records.
    """
    name = Path(str(path)).name
    if name in RELEASED_MODELS:
        return [RELEASED_MODELS[name]]
    model, affine = blob_structure(blobs)
    return [r for r in RELEASED_MODELS.values() if (r.model, r.affine) == (model, affine)]
