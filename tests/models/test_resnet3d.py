"""C2D / I3D ResNet structure against Table 1 and Section 4 of "Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971)."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from nlnet.models.registry import create_model, get_model_entry, list_models
from nlnet.models.video.resnet3d import Bottleneck3d, ResNet3d, inflation_pattern

# The paper's video models (Table 1 layout: ResNet-50/101); the CPU demo family "tiny" is
# narrower by design, r3d_18 (basic blocks, tests/models/test_resnet3d_basic.py) another network.
VIDEO_MODELS = [
    n
    for n in list_models()
    if get_model_entry(n).default_cfg.task.startswith("video")
    and get_model_entry(n).default_cfg.family == "resnet3d"
    and get_model_entry(n).default_cfg.depth in (50, 101)
]

# Table 1, 32x224x224 input: (channels, T, H, W) of every stage output.
TABLE1 = {
    "conv1": (64, 16, 112, 112),
    "pool1": (64, 8, 56, 56),
    "res2": (256, 8, 56, 56),
    "pool2": (256, 4, 56, 56),
    "res3": (512, 4, 28, 28),
    "res4": (1024, 4, 14, 14),
    "res5": (2048, 4, 7, 7),
}


@pytest.mark.parametrize("name", VIDEO_MODELS)
def test_table1_stage_shapes_full_size_on_meta(name):
    with torch.device("meta"):
        model = create_model(name)
        _, feats = model.forward_intermediates(torch.empty(1, 3, 32, 224, 224))
        logits = model.forward_head(model.forward_features(torch.empty(1, 3, 32, 224, 224)))
        conv1, res2 = feats[0], feats[1]
        pools = {"pool1": model.maxpool(conv1), "pool2": model.pool2(res2)}
    names = ["conv1", "res2", "res3", "res4", "res5"]  # feature_info: the stem and the stages
    shapes = {**dict(zip(names, feats)), **pools}
    assert {k: tuple(v.shape[1:]) for k, v in shapes.items()} == TABLE1
    assert [f["num_chs"] for f in model.feature_info] == [TABLE1[n][0] for n in names]
    assert [224 // f["reduction"] for f in model.feature_info] == [TABLE1[n][2] for n in names]
    assert tuple(logits.shape) == (1, 400)


def _temporal_kernels(model: ResNet3d) -> list[list[tuple[int, int]]]:
    return [
        [(b.conv1.kernel_size[0], b.conv2.kernel_size[0]) for b in getattr(model, f"layer{i}")]
        for i in range(1, 5)
    ]


@pytest.mark.parametrize("depth,layers", [(50, (3, 4, 6, 3)), (101, (3, 4, 23, 3))])
def test_c2d_kernels_are_2d_and_blocks_per_stage(depth, layers):
    with torch.device("meta"):
        m = create_model(f"c2d_r{depth}")
    assert m.conv1.kernel_size == (1, 7, 7) and m.conv1.stride == (2, 2, 2)
    assert m.maxpool.kernel_size == (3, 3, 3) and m.maxpool.stride == (2, 2, 2)
    assert m.pool2.kernel_size == (3, 1, 1) and m.pool2.stride == (2, 1, 1)
    assert tuple(len(getattr(m, f"layer{i}")) for i in range(1, 5)) == layers
    for conv in (mod for mod in m.modules() if isinstance(mod, nn.Conv3d)):
        assert conv.kernel_size[0] == 1
    widths = [getattr(m, f"layer{i}")[0].conv3.out_channels for i in range(1, 5)]
    assert widths == [256, 512, 1024, 2048]


@pytest.mark.parametrize("depth,counts", [(50, [3, 2, 3, 1]), (101, [3, 2, 12, 1])])
@pytest.mark.parametrize("arch", ["i3d", "i3d311"])
def test_i3d_inflates_one_kernel_in_two_blocks(arch, depth, counts):
    with torch.device("meta"):
        m = create_model(f"{arch}_r{depth}")
    assert m.conv1.kernel_size == (5, 7, 7)  # "We inflate conv1 to 5x7x7"
    kernels = _temporal_kernels(m)
    inflated = (3, 1) if arch == "i3d311" else (1, 3)
    per_stage = [sum(k == inflated for k in stage) for stage in kernels]
    assert per_stage == counts
    assert all(k in ((1, 1), inflated) for stage in kernels for k in stage)
    # res5: only block 1 is inflated (released code pattern)
    assert kernels[3] == [(1, 1), inflated, (1, 1)]
    # roughly one in two residual blocks overall
    total = sum(len(s) for s in kernels)
    assert abs(sum(counts) / total - 0.5) < 0.15


def test_inflation_pattern_variants_and_errors():
    assert inflation_pattern((3, 4, 6, 3), "even")[1] == [True, False, True, False]
    assert inflation_pattern((3, 4, 6, 3), "original")[0] == [True, True, True]
    explicit = [[True] * 3, [False] * 4, [False] * 6, [False] * 3]
    assert inflation_pattern((3, 4, 6, 3), explicit) == explicit
    with pytest.raises(ValueError, match="inflate_blocks"):
        inflation_pattern((3, 4, 6, 3), "odd")
    with pytest.raises(ValueError, match="inflate_blocks"):
        inflation_pattern((3, 4, 6, 3), [[True]] * 4)
    m = ResNet3d((1, 1, 1, 1), 3, inflate="3x3x3", inflate_blocks="even", width=4)
    assert _temporal_kernels(m) == [[(1, 3)]] * 4


def test_parameter_names_match_torchvision_resnet50():
    with torch.device("meta"):
        ours = create_model("c2d_r50", num_classes=1000).state_dict()
        tv = torchvision.models.resnet50(weights=None).state_dict()
    assert set(ours) == set(tv)
    for k, v in tv.items():
        if v.dim() == 4:  # conv kernels gain a temporal dim of size 1
            assert tuple(ours[k].shape) == (v.shape[0], v.shape[1], 1, *v.shape[2:])
        else:
            assert ours[k].shape == v.shape


def test_forward_equals_head_of_features_and_num_classes():
    torch.manual_seed(0)
    m = ResNet3d((1, 1, 1, 1), num_classes=7, width=4).eval()
    x = torch.randn(2, 3, 8, 32, 32)
    final, feats = m.forward_intermediates(x)
    torch.testing.assert_close(m.forward_features(x), final)
    torch.testing.assert_close(final, feats[-1])  # res5
    torch.testing.assert_close(m(x), m.forward_head(m.forward_features(x)))
    assert m(x).shape == (2, 7)
    assert [f["module"] for f in m.feature_info] == ["relu", "layer1", "layer2", "layer3", "layer4"]
    assert [f.shape[1] for f in feats] == [f["num_chs"] for f in m.feature_info]


def test_temporal_strides_one_keeps_frames():
    m = ResNet3d((1, 1, 1, 1), 3, width=4, temporal_strides=(1, 1, 1))
    feats = m.eval().forward_features(torch.randn(1, 3, 3, 32, 32))
    assert feats.shape[2] == 3
    assert isinstance(m.pool2, nn.Identity)


def test_bottleneck3d_shapes_and_slot():
    b = Bottleneck3d(
        16, 4, stride=2, conv1_t=3, downsample=nn.Sequential(nn.Conv3d(16, 16, 1, stride=(1, 2, 2)))
    )
    assert b.non_local is None and "non_local" not in dict(b.named_children())
    assert b(torch.randn(1, 16, 3, 8, 8)).shape == (1, 16, 3, 4, 4)
    with pytest.raises(ValueError, match="conv2_t"):
        Bottleneck3d(16, 4, conv2_t=2)


def test_bad_arguments_and_inputs():
    m = ResNet3d((1, 1, 1, 1), 3, width=4)
    with pytest.raises(ValueError, match=r"x: expected a video tensor \(B, C, T, H, W\)"):
        m(torch.randn(1, 3, 32, 32))
    with pytest.raises(ValueError, match="3 channels"):
        m(torch.randn(1, 4, 4, 32, 32))
    with pytest.raises(ValueError, match="inflate"):
        ResNet3d(inflate="2x2x2")
    with pytest.raises(ValueError, match="layers"):
        ResNet3d((3, 4, 6))
    with pytest.raises(ValueError, match="num_classes"):
        ResNet3d(num_classes=0)
    with pytest.raises(ValueError, match="temporal_strides"):
        ResNet3d(temporal_strides=(2, 2))
    with pytest.raises(ValueError, match="conv1_t"):
        ResNet3d(conv1_t=4)
    with pytest.raises(ValueError, match="stem_kernel: expected a positive odd int"):
        ResNet3d(stem_kernel=4)
    with pytest.raises(ValueError, match="stem_stride: expected a positive int"):
        ResNet3d(stem_stride=0)


def test_blocks_are_built_per_stage_with_per_stage_options():
    """Issue-21 contract: nlnet's backbone builds its blocks at construction from a per-stage
    location and block options, with per-stage overrides (e.g. groups in res3 only)."""
    from nlnet.layers.nonlocal_block import NonLocal3d
    from nlnet.models.registry import create_model

    m = create_model("i3d311_r50_nl5", width=4, block={"norm": None},
                     placement={"at": "nl5", "stage_options": {"res3": {"temporal_groups": 4}}})  # fmt: skip
    blocks = {n: b for n, b in m.named_modules() if isinstance(b, NonLocal3d)}
    assert sorted(blocks) == [f"layer2.{i}.non_local" for i in (1, 3)] + [
        f"layer3.{i}.non_local" for i in (1, 3, 5)
    ]
    for name, b in blocks.items():
        assert b.temporal_groups == (4 if name.startswith("layer2") else None)
        assert isinstance(b.norm, torch.nn.Identity) and b.W_z.bias is not None
        assert not b.W_z.weight.any()  # no norm: W_z zero-initialised, the block is the identity
    bn = create_model("c2d_r50_nl5", width=4).layer2[1].non_local
    assert not bn.norm.weight.any()  # backbone init does not overwrite the block's gamma = 0
    with pytest.raises(ValueError, match="placement: res3 has 4 residual blocks"):
        create_model("c2d_r50", width=4, placement=[[], [4], [], []])
    with pytest.raises(ValueError, match="unknown stage"):
        create_model(
            "c2d_r50_nl5", width=4, placement={"at": "nl5", "stage_options": {"conv3": {}}}
        )


@pytest.mark.parametrize(
    "pooling, res2", [("padded", 56), ("caffe2", 55), ("pyslowfast", 56), ("2x2", 56)]
)
def test_pooling_options_sizes(pooling, res2):
    from nlnet.models.registry import create_model

    m = create_model("c2d_r50", width=4, pooling=pooling)
    x = torch.zeros(1, 4, 16, 112, 112)  # conv1 output of a 32 x 224 x 224 clip
    assert tuple(m.maxpool(x).shape[2:]) == (8, res2, res2)
    assert m.pool2(torch.zeros(1, 16, 8, 3, 3)).shape[2] == 4


def test_fully_conv_head_is_the_global_head_at_one_position_and_averages_softmax():
    from nlnet.models.registry import create_model
    from nlnet.models.video.resnet3d import fully_conv_head

    m = create_model("c2d_r50", width=4, num_classes=6, head="fully_conv").eval()
    feats = torch.randn(2, m.num_features, 2, 7, 7)
    g = torch.nn.functional.log_softmax(m.fc(feats.mean((2, 3, 4))), dim=1)
    torch.testing.assert_close(m.forward_head(feats), g)  # 224 input: one position
    feats = torch.randn(2, m.num_features, 2, 8, 8)  # 256 input: 2 x 2 positions
    pooled = torch.nn.functional.avg_pool3d(feats, (2, 7, 7), stride=1)  # (2, C, 1, 2, 2)
    probs = torch.softmax(m.fc(pooled.flatten(2).transpose(1, 2)), dim=-1).mean(1)
    torch.testing.assert_close(fully_conv_head(feats, m.fc.weight, m.fc.bias).exp(), probs)
    assert not torch.allclose(m.train().forward_head(feats), m.eval().forward_head(feats))


def test_tiny_family_is_resnet3d_with_a_small_stem():
    """The CPU models (``c2d_tiny*``, ``i3d_tiny*``) are ResNet3d with a 3x3 stride-1 stem and a
    2x2 pool1: every stage's map is the one their layout documents, for 32 x 32 frames."""
    from nlnet.models.registry import create_model

    m = create_model("i3d_tiny_nl1", width=4).eval()
    assert isinstance(m, ResNet3d)
    assert m.conv1.kernel_size == (1, 3, 3) and m.conv1.stride == (1, 1, 1)
    # I3D: the first kernel of blocks 0 of res2/res3/res5 and 0, 2 of res4 is 3 x 3 x 3
    kernels = [b.conv1.kernel_size[0] for k in range(1, 5) for b in getattr(m, f"layer{k}")]
    assert kernels == [3, 3, 1, 3, 1, 3, 3]
    assert all(
        b.conv2.kernel_size == (1, 3, 3) for k in range(1, 5) for b in getattr(m, f"layer{k}")
    )
    maps = m.forward_intermediates(torch.randn(1, 3, 8, 32, 32), intermediates_only=True)
    assert [tuple(f.shape[1:]) for f in maps] == [
        (4, 8, 32, 32), (4, 8, 16, 16), (8, 8, 8, 8), (16, 8, 4, 4), (32, 8, 2, 2)
    ]  # fmt: skip
    assert [i["reduction"] for i in m.feature_info] == [1, 2, 4, 8, 16]
    pooled = create_model("c2d_tiny", width=4, temporal_pool=True)
    x = torch.zeros(1, 4, 8, 32, 32)
    assert tuple(pooled.pool2(pooled.maxpool(x)).shape[2:]) == (2, 16, 16)
