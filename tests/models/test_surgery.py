"""Non-local surgery: placements (Tables 2b/2c), identity at init, state dicts, errors."""

from __future__ import annotations

import copy
import io

import pytest
import torch
import torchvision
from torch import nn

from nlnet.layers.nonlocal_block import NonLocal2d, NonLocal3d
from nlnet.models.surgery import infer_channels, insert_non_local, non_local_blocks, non_local_paths
from nlnet.models.video.resnet3d import ResNet3d

R50, R101 = (3, 4, 6, 3), (3, 4, 23, 3)


def test_placement_presets_resnet50():
    # Table 2a/2b: right before the last residual block of the stage
    assert non_local_paths("nl1", R50) == ["layer3.4"]
    assert [non_local_paths(f"res{i}", R50)[0] for i in (2, 3, 4, 5)] == [
        "layer1.1",
        "layer2.2",
        "layer3.4",
        "layer4.1",
    ]
    # Table 2c: 2 in res3 + 3 in res4 at every other block; 10 = every block of res3 and res4
    assert non_local_paths("nl5", R50) == [
        "layer2.1",
        "layer2.3",
        "layer3.1",
        "layer3.3",
        "layer3.5",
    ]
    assert non_local_paths("nl10", R50) == [f"layer2.{i}" for i in range(4)] + [
        f"layer3.{i}" for i in range(6)
    ]


def test_placement_presets_resnet101():
    assert non_local_paths("nl1", R101) == ["layer3.21"]
    # released code: res3 mod 2, res4 mod (2 * 4 - 1) = 7
    assert non_local_paths("nl5", R101) == [
        "layer2.1",
        "layer2.3",
        "layer3.6",
        "layer3.13",
        "layer3.20",
    ]
    nl10 = non_local_paths("nl10", R101)
    assert len(nl10) == 10 and nl10[:4] == [f"layer2.{i}" for i in range(4)]
    assert nl10[4:] == [f"layer3.{i}" for i in (2, 5, 8, 11, 14, 17)]
    with pytest.raises(ValueError, match="placement"):
        non_local_paths("nl3", R50)


def _tiny_image_resnet() -> nn.Module:
    return torchvision.models.resnet50(weights=None, width_per_group=4, num_classes=10)


@pytest.mark.parametrize("at", ["layer3.4", "layer4", ["layer2.1", "layer3.0"]])
def test_identity_at_init_on_torchvision_resnet(at):
    torch.manual_seed(0)
    model = _tiny_image_resnet().eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        before = model(x)
    insert_non_local(model, at)
    blocks = non_local_blocks(model)
    assert len(blocks) == (1 if isinstance(at, str) else 2)
    assert all(isinstance(b, NonLocal2d) for _, b in blocks)
    with torch.no_grad():
        torch.testing.assert_close(model(x), before, rtol=0, atol=0)
    # training mode too (BN gamma = 0 makes the block an exact identity)
    model.train()
    ref = _tiny_image_resnet()
    ref.load_state_dict(model.state_dict(), strict=False)
    ref.train()
    torch.testing.assert_close(model(x), ref(x), rtol=0, atol=0)


def test_block_is_active_after_training_and_state_dict_round_trip():
    torch.manual_seed(0)
    model = insert_non_local(_tiny_image_resnet(), ["layer3.4", "layer4"]).eval()
    keys = set(model.state_dict())
    plain = set(_tiny_image_resnet().state_dict())
    assert plain < keys
    assert {k for k in keys - plain} == {
        k for k in keys if k.startswith(("layer3.4.non_local.", "layer4.non_local."))
    }
    assert "layer3.4.non_local.theta.weight" in keys and "layer4.non_local.W_z.weight" in keys
    for _, block in non_local_blocks(model):  # pretend training moved gamma away from zero
        nn.init.normal_(block.norm.weight)
    x = torch.randn(1, 3, 64, 64)
    plain_model = _tiny_image_resnet().eval()
    plain_model.load_state_dict(model.state_dict(), strict=False)
    with torch.no_grad():
        out = model(x)
        assert (out - plain_model(x)).abs().max() > 1e-4  # the hooked blocks are applied
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    fresh = insert_non_local(_tiny_image_resnet(), ["layer3.4", "layer4"]).eval()
    fresh.load_state_dict(torch.load(buf, weights_only=True), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(fresh(x), out, rtol=0, atol=0)
        torch.testing.assert_close(copy.deepcopy(model)(x), out, rtol=0, atol=0)
    # a plain checkpoint loads into the model with blocks; only the block keys are missing
    res = fresh.load_state_dict(_tiny_image_resnet().state_dict(), strict=False)
    assert res.unexpected_keys == [] and all(".non_local." in k for k in res.missing_keys)


def test_video_model_presets_options_and_identity():
    torch.manual_seed(0)
    model = ResNet3d(width=4, num_classes=3).eval()
    x = torch.randn(1, 3, 8, 64, 64)
    with torch.no_grad():
        before = model(x)
    insert_non_local(model, "nl5", mode="time", instantiation="dot_product")
    names = [n for n, _ in non_local_blocks(model)]
    assert names == [f"{p}.non_local" for p in non_local_paths("nl5", R50)]
    blocks = [b for _, b in non_local_blocks(model)]
    assert all(isinstance(b, NonLocal3d) for b in blocks)
    assert all(b.mode == "time" and b.instantiation == "dot_product" for b in blocks)
    assert blocks[0].in_channels == 32 and blocks[-1].in_channels == 64  # res3 / res4 widths
    assert blocks[0].inter_channels == 16  # half channels by default
    with torch.no_grad():
        torch.testing.assert_close(model(x), before, rtol=0, atol=0)


def test_default_block_follows_paper_video_settings():
    model = insert_non_local(ResNet3d(width=4), "nl1")
    ((_, block),) = non_local_blocks(model)
    assert block.instantiation == "embedded_gaussian" and block.mode == "spacetime"
    assert block.kernel == (1, 2, 2)  # spatial max-pool subsampling
    assert isinstance(block.norm, nn.BatchNorm3d) and block.norm.weight.abs().max() == 0


def test_infer_channels():
    m = torchvision.models.resnet18(weights=None)
    assert infer_channels(m.layer3[1]) == 256  # BasicBlock
    r50 = _tiny_image_resnet()
    assert infer_channels(r50.layer3[2]) == 1024  # Bottleneck
    assert infer_channels(r50.layer4) == 2048  # stage (Sequential)
    assert infer_channels(nn.Conv3d(3, 7, 1)) == 7
    with pytest.raises(ValueError, match="in_channels"):
        infer_channels(nn.ReLU())
    insert_non_local(m, "layer3.1")
    assert non_local_blocks(m)[0][1].in_channels == 256


def test_errors():
    model = _tiny_image_resnet()
    with pytest.raises(ValueError, match=r"at: no module at path 'layer9\.0'"):
        insert_non_local(model, ["layer9.0"])
    insert_non_local(model, "layer3.4")
    with pytest.raises(ValueError, match="already has a non-local block"):
        insert_non_local(model, "layer3.4")
    with pytest.raises(ValueError, match="duplicate"):
        insert_non_local(model, ["layer2.0", "layer2.0"])
    with pytest.raises(ValueError, match="mode"):
        insert_non_local(_tiny_image_resnet(), "layer3.4", mode="time")  # 2D block
    with pytest.raises(ValueError, match="layers"):
        insert_non_local(nn.Sequential(nn.Conv2d(3, 4, 1)), "nl5")
    with pytest.raises(TypeError, match="model"):
        insert_non_local("resnet", "layer3.4")
    with pytest.raises(ValueError, match="dim"):
        insert_non_local(_tiny_image_resnet(), "layer3.4", dim=4)
    # nothing is changed when a later path is wrong
    fresh = _tiny_image_resnet()
    with pytest.raises(ValueError):
        insert_non_local(fresh, ["layer3.4", "nope"])
    assert non_local_blocks(fresh) == []


class _Heads(nn.Module):
    """A model whose owner calls the members of a ModuleDict and a ModuleList itself."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.heads = nn.ModuleDict({"seg": nn.Conv2d(4, 4, 1)})
        self.blocks = nn.ModuleList([nn.Conv2d(4, 4, 1), nn.Conv2d(4, 4, 1)])

    def forward(self, x):
        x = self.stem(x)
        for i in range(len(self.blocks)):
            x = self.blocks[i](x)
        return self.heads["seg"](x)


@pytest.mark.parametrize("at", ["heads", "blocks"])
def test_a_container_without_a_forward_of_its_own_is_refused(at):
    model = _Heads()
    with pytest.raises(ValueError, match=f"at: module '{at}' is a Module(Dict|List).*name one"):
        insert_non_local(model, at)
    assert not non_local_blocks(model)  # nothing changed
    insert_non_local(model, f"{at}.{'seg' if at == 'heads' else '1'}", sub_sample=False)
    assert len(non_local_blocks(model)) == 1 and model(torch.randn(1, 3, 8, 8)).shape[1] == 4


@pytest.mark.parametrize("at", ["", None, 3])
def test_a_path_that_is_not_one_is_named(at):
    with pytest.raises((ValueError, TypeError), match="at: expected a module path"):
        insert_non_local(_Heads(), at)


class _Concat(nn.Module):
    """Two branches concatenated (an Inception block's shape): its last convolution has half
    the channels of its output."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 4, 1), nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.a(x), self.b(x)], 1)


def test_example_input_measures_what_the_layers_do_not_say():
    """A concatenating module's channels cannot be read from its layers: the inferred block
    fails on the first forward with the way out in the message; with ``example_input`` the
    channels (and dim) are measured on one pass that leaves the BatchNorm statistics and the
    modes alone, and the network computes what it did before (identity at init)."""
    torch.manual_seed(0)
    net = nn.Sequential(_Concat(), nn.BatchNorm2d(8), nn.Conv2d(8, 2, 1))
    x = torch.randn(2, 3, 6, 6)
    guessed = insert_non_local(copy.deepcopy(net), "0")
    with pytest.raises(ValueError, match=r"in_channels=4 from the layers of '0' \(_Concat\): pass"):
        guessed(x)
    with torch.no_grad():
        net(x)  # statistics of the data, so that the comparison below is not of zeros
        before, stats = net.eval()(x), net[1].running_mean.clone()
    net.train()
    insert_non_local(net, ["0"], example_input=x)
    assert net[0].non_local.in_channels == 8 and isinstance(net[0].non_local, NonLocal2d)
    assert torch.equal(net[1].running_mean, stats) and net.training and net[0].training
    torch.testing.assert_close(net.eval()(x), before, rtol=0, atol=0)
    unused = _Concat()
    unused.spare = nn.Conv2d(3, 3, 1)  # registered, never called
    with pytest.raises(ValueError, match=r"module 'spare' did not run"):
        insert_non_local(unused, "spare", example_input=x)
    with pytest.raises(ValueError, match=r"output of '0' is \(2, 3\), not a \(B, C, \*grid\)"):
        insert_non_local(nn.Sequential(nn.Linear(3, 3)), "0", example_input=torch.randn(2, 3))


def test_example_input_on_torchvision_inception_and_fire_modules():
    """GoogLeNet's Inception blocks and SqueezeNet's Fire modules concatenate branches."""
    g = torchvision.models.googlenet(weights=None, init_weights=False, aux_logits=False)
    x = torch.randn(1, 3, 64, 64)
    insert_non_local(g, ["inception4a", "inception5b"], example_input=x)
    assert (g.inception4a.non_local.in_channels, g.inception5b.non_local.in_channels) == (512, 1024)
    assert g.eval()(x).shape == (1, 1000)
    # a grid side equal to a branch's width (inception3a at 128 x 128: 16 x 16 maps, a 16-wide
    # branch) is no channels-last layout
    g = torchvision.models.googlenet(weights=None, init_weights=False, aux_logits=False)
    insert_non_local(g, "inception3a", example_input=torch.randn(1, 3, 128, 128))
    assert g.inception3a.non_local.in_channels == 256
    s = torchvision.models.squeezenet1_0()
    insert_non_local(s, "features.4", example_input=x)
    assert s.features[4].non_local.in_channels == 128 and s(x).shape == (1, 1000)


class _ChannelsLast(nn.Module):
    """A stage that returns (B, H, W, C), as Swin's do."""

    def __init__(self) -> None:
        super().__init__()
        self.proj, self.norm = nn.Linear(3, 6), nn.LayerNorm(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.proj(x.permute(0, 2, 3, 1)))


def test_example_input_refuses_outputs_that_are_not_channels_first():
    """A measured axis 1 that is no width of the module's layers (channels last, tokens) is not
    taken for channels: one line that names the shape and the layers' widths."""
    net = nn.Sequential(_ChannelsLast())
    with pytest.raises(ValueError, match=r"output of '0' is \(2, 5, 7, 6\): its last axis is "
                                         r"the width of its linear layers \(\[6\]\)"):  # fmt: skip
        insert_non_local(net, "0", example_input=torch.randn(2, 3, 5, 7))
    assert not non_local_blocks(net)


def test_channels_come_from_the_last_layer_with_weights_of_a_sequential():
    """A Sequential ending in an activation, a pool or dropout has the channels of the layer
    before (MobileNet's and EfficientNet's last stage end in Hardswish/SiLU)."""
    torch.manual_seed(0)
    stage = nn.Sequential(nn.Conv1d(3, 5, 1), nn.BatchNorm1d(5), nn.ReLU(), nn.Dropout())
    insert_non_local(stage, "1")  # the norm itself
    net = nn.Sequential(nn.Sequential(nn.Conv2d(3, 6, 1), nn.Hardswish(), nn.MaxPool2d(2)))
    insert_non_local(net, "0")
    assert net[0].non_local.in_channels == 6 and net(torch.randn(1, 3, 8, 8)).shape[1] == 6
    with pytest.raises(ValueError, match=r"at: module '0': cannot infer whether a MaxPool2d .* "
                                         r"\(or example_input=\)"):  # fmt: skip
        insert_non_local(nn.Sequential(nn.MaxPool2d(2)), "0")
