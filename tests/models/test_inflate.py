"""2D -> 3D inflation ("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971), Section 4, "Inflated 3D ConvNet")."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from nlnet.models.inflate import (
    inflate_conv_weight,
    inflate_state_dict,
    load_pretrained_2d,
    read_state_dict,
)
from nlnet.models.registry import create_model
from nlnet.models.video.resnet3d import ResNet3d


def _randomise_bn(model: nn.Module, gen: torch.Generator) -> None:
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            with torch.no_grad():
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)


def _to_2d(state_dict: dict) -> dict:
    """A C2D (t = 1) state dict in torchvision's 2D layout."""
    return {k: v.squeeze(2) if v.dim() == 5 else v for k, v in state_dict.items()}


def test_inflate_conv_weight_planes_sum_to_2d_kernel():
    w = torch.randn(4, 3, 3, 3, dtype=torch.float64)
    w3 = inflate_conv_weight(w, 5)
    assert w3.shape == (4, 3, 5, 3, 3)
    torch.testing.assert_close(w3.sum(dim=2), w, rtol=0, atol=1e-15)
    torch.testing.assert_close(w3[:, :, 2], w / 5)
    with pytest.raises(ValueError, match="weight_2d"):
        inflate_conv_weight(torch.randn(4, 3, 3), 3)
    with pytest.raises(ValueError, match="time_dim"):
        inflate_conv_weight(w, 0)


def test_c2d_on_repeated_frame_equals_torchvision_resnet50_exactly():
    """C2D initialised from a 2D ResNet reproduces it on a static video (float64, BN eval)."""
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    net2d = torchvision.models.resnet50(weights=None).double().eval()
    _randomise_bn(net2d, gen)
    video_net = create_model("c2d_r50", num_classes=1000).double().eval()
    report = load_pretrained_2d(video_net, net2d.state_dict())
    assert (
        len(report.converted_as("inflated")) == 53 and "fc.weight" in report.loaded
    )  # every conv kernel
    frame = torch.randn(1, 3, 32, 32, dtype=torch.float64, generator=gen)
    video = frame.unsqueeze(2).expand(-1, -1, 4, -1, -1).contiguous()  # (1, 3, T=4, 32, 32)
    with torch.no_grad():
        ref = net2d(frame)
        out = video_net(video)
        res5 = video_net.forward_intermediates(video, indices=[-1], intermediates_only=True)[0]
        ref_feat = net2d.layer4(
            net2d.layer3(
                net2d.layer2(net2d.layer1(net2d.maxpool(net2d.relu(net2d.bn1(net2d.conv1(frame))))))
            )
        )
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    for t in range(res5.shape[2]):  # every frame, no border effect for C2D
        torch.testing.assert_close(res5[:, :, t], ref_feat, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("inflate", ["3x3x3", "3x1x1"])
def test_i3d_interior_frames_match_2d_and_borders_do_not(inflate):
    """Zero temporal padding breaks the static-video property only near the first/last frames.

    With temporal strides 1 the border grows by the temporal radius of every inflated conv on
    the path: conv1 (5 -> 2) + res2 (3 blocks) + res3 (2) + res4 (3) + res5 (1) = 11 frames for
    an R50 I3D; a 24-frame clip leaves frames 11 and 12 exact.
    """
    gen = torch.Generator().manual_seed(1)
    torch.manual_seed(1)
    kw = {"width": 4, "temporal_strides": (1, 1, 1), "num_classes": 3}
    c2d = ResNet3d(**kw).double().eval()
    _randomise_bn(c2d, gen)
    sd2d = _to_2d(c2d.state_dict())
    i3d = ResNet3d(inflate=inflate, **kw).double().eval()
    report = load_pretrained_2d(i3d, sd2d)
    # every inflated kernel sums over t to its 2D kernel
    sd3d = i3d.state_dict()
    inflated = [k for k in report.converted_as("inflated") if sd3d[k].shape[2] > 1]
    assert len(inflated) == 1 + 9  # conv1 + 9 blocks (3 + 2 + 3 + 1)
    for k in inflated:
        torch.testing.assert_close(sd3d[k].sum(2), sd2d[k], rtol=1e-13, atol=1e-15)
    frame = torch.randn(1, 3, 1, 32, 32, dtype=torch.float64, generator=gen)
    with torch.no_grad():
        ref = c2d.forward_features(frame)[:, :, 0]  # the 2D network on the frame
        out = i3d.forward_features(frame.expand(-1, -1, 24, -1, -1).contiguous())
    for t in (11, 12):
        torch.testing.assert_close(out[:, :, t], ref, rtol=1e-10, atol=1e-10)
    for t in (0, 23):  # border frames see zero padding
        assert (out[:, :, t] - ref).abs().max() > 1e-6


def test_create_model_pretrained_from_path_keeps_non_local_init(tmp_path):
    torch.manual_seed(0)
    c2d = ResNet3d(width=4, num_classes=5)
    path = tmp_path / "r50_2d.pth"
    torch.save(_to_2d(c2d.state_dict()), path)
    model = create_model("i3d_r50_nl5", num_classes=5, width=4, pretrained_2d=path)
    sd = model.state_dict()
    torch.testing.assert_close(
        sd["layer2.0.conv1.weight"][:, :, 0], c2d.layer2[0].conv1.weight[:, :, 0]
    )
    torch.testing.assert_close(
        sd["layer1.0.conv2.weight"].sum(2), c2d.layer1[0].conv2.weight[:, :, 0]
    )
    nl_keys = [k for k in sd if ".non_local." in k]
    assert len({k.split(".non_local.")[0] for k in nl_keys}) == 5
    # the non-local blocks keep their identity initialisation (BN gamma = 0)
    assert all(sd[k].abs().max() == 0 for k in nl_keys if k.endswith("norm.weight"))


def test_classifier_of_another_size_is_kept():
    torch.manual_seed(0)
    src = _to_2d(ResNet3d(width=4, num_classes=1000).state_dict())
    model = ResNet3d(width=4, num_classes=400)
    fc_before = model.fc.weight.clone()
    report = load_pretrained_2d(model, src)
    assert "fc.weight" in report.kept and "fc.weight" in report.unused
    torch.testing.assert_close(model.fc.weight, fc_before)


def test_read_state_dict_unwraps_checkpoints():
    sd = {"module.conv1.weight": torch.zeros(1)}
    assert list(read_state_dict({"state_dict": sd})) == ["conv1.weight"]
    assert list(read_state_dict({"model": {"a": torch.zeros(1)}, "epoch": 3})) == ["a"]
    with pytest.raises(TypeError, match="pretrained_2d"):
        read_state_dict(123)
    with pytest.raises(ValueError, match="no such file"):
        read_state_dict("/nonexistent/weights.pth")
    with pytest.raises(TypeError, match="not a tensor"):
        read_state_dict({"conv1.weight": [1, 2]})


def test_other_architecture_gives_clear_errors():
    with torch.device("meta"):
        r50 = create_model("c2d_r50")
        r101_2d = torchvision.models.resnet101(weights=None).state_dict()
        r18_2d = torchvision.models.resnet18(weights=None).state_dict()
        r50_2d = torchvision.models.resnet50(weights=None).state_dict()
    with pytest.raises(ValueError, match=r"unexpected keys.*layer3\.6\.conv1\.weight"):
        inflate_state_dict(r101_2d, r50)
    with pytest.raises(ValueError, match=r"missing keys.*layer1\.0\.conv3\.weight"):
        inflate_state_dict(r18_2d, r50)
    bad = dict(r50_2d)
    bad["layer2.0.conv2.weight"] = torch.empty(128, 128, 5, 5, device="meta")
    with pytest.raises(ValueError, match=r"shape mismatch: layer2\.0\.conv2\.weight"):
        inflate_state_dict(bad, r50)
    # non-strict: reports instead of raising
    _, report = inflate_state_dict(bad, r50, strict=False)
    assert "layer2.0.conv2.weight" in report.kept
