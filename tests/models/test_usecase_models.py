"""The practitioner's use-case models: U-Net 2D/3D, EDSR/RCAN, SlowFast, FPN-level blocks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from nlnet.analysis.cost import model_cost
from nlnet.models import create_model, get_model_entry
from nlnet.models.slowfast import convert_pyslowfast_state_dict
from nlnet.models.surgery import insert_non_local, non_local_blocks

NEW = ["unet2d_nl", "unet3d_nl", "edsr_baseline_nl", "rcan_nl", "slowfast_r50_nl5"]


def _tiny(name: str, **kw) -> nn.Module:
    torch.manual_seed(0)
    return create_model(name, **{**get_model_entry(name).default_cfg["test_overrides"], **kw})


@pytest.mark.parametrize("plain", ["unet2d", "unet3d", "edsr_baseline", "rcan", "slowfast_r50"])
def test_block_starts_as_identity_same_function_as_the_plain_model(plain):
    """With the plain model's weights, the model with blocks computes the same outputs."""
    cfg = get_model_entry(plain).default_cfg
    base = _tiny(plain).eval()
    ours = _tiny(plain + ("_nl5" if plain == "slowfast_r50" else "_nl")).eval()
    missing, unexpected = ours.load_state_dict(base.state_dict(), strict=False)
    assert not unexpected and missing and all("nonlocal" in k or "non_local" in k for k in missing)
    x = torch.rand(2, *cfg["test_input_size"])
    with torch.no_grad():
        torch.testing.assert_close(ours(x), base(x))
    assert non_local_blocks(ours)


def test_guide_configurations_of_the_blocks():
    with torch.device("meta"):
        unet2, unet3 = create_model("unet2d_nl"), create_model("unet3d_nl")
        edsr, rcan = create_model("edsr_baseline_nl"), create_model("rcan_nl")
        sf = create_model("slowfast_r50_nl5")
    ((p2, b2),) = non_local_blocks(unet2)
    ((p3, b3),) = non_local_blocks(unet3)
    assert (p2, b2.in_channels, b2.inter_channels, b2.kernel) == (
        "bottleneck.non_local",
        1024,
        512,
        (2, 2),
    )
    assert (p3, b3.in_channels, b3.inter_channels, b3.kernel) == (
        "bottleneck.non_local",
        512,  # the 3D U-Net's bottleneck (Cicek et al. 2016, Fig. 1)
        256,
        (2, 2, 2),
    )
    ((pe, be),) = non_local_blocks(edsr)
    ((pr, br),) = non_local_blocks(rcan)
    assert (pe, be.inter_channels) == ("body.7.non_local", 16) and (pr, br.inter_channels) == (
        "body.4.non_local",
        16,
    )
    assert [p for p, _ in non_local_blocks(sf)] == [
        "s3.pathway0_nonlocal1", "s3.pathway0_nonlocal3",
        "s4.pathway0_nonlocal1", "s4.pathway0_nonlocal3", "s4.pathway0_nonlocal5",
    ]  # fmt: skip
    assert {b.instantiation for _, b in non_local_blocks(sf)} == {"dot_product"}
    assert len(list(edsr.body)) == 17 and edsr.head.out_channels == 64  # 16 blocks + conv, 64 ch
    assert len(rcan.body) == 11 and len(rcan.body[0].body) == 21  # 10 groups x 20 RCABs


def _conv_channels(module: nn.Module, kind: type = nn.Conv3d) -> list[tuple[int, int]]:
    return [(m.in_channels, m.out_channels) for m in module.modules() if type(m) is kind]


def test_unet3d_is_cicek_et_al_with_the_published_parameter_count():
    """Cicek et al. 2016 (Fig. 1): channels double before each pooling, a 512-channel
    bottleneck, 19,069,955 parameters for 3 input channels and 3 classes."""
    with torch.device("meta"):
        model = create_model("unet3d", in_channels=3, num_classes=3)
        half = create_model("unet3d", in_channels=3, num_classes=3, width=16)
        nl = create_model("unet3d_nl", in_channels=3, num_classes=3)
    assert sum(p.numel() for p in model.parameters()) == 19_069_955
    analysis = _conv_channels(model.encoder) + _conv_channels(model.bottleneck)
    assert analysis == [(3, 32), (32, 64), (64, 64), (64, 128), (128, 128), (128, 256),
                        (256, 256), (256, 512)]  # fmt: skip
    assert _conv_channels(model.up, nn.ConvTranspose3d) == [(512, 512), (256, 256), (128, 128)]
    assert _conv_channels(model.decoder) == [(768, 256), (256, 256), (384, 128), (128, 128),
                                             (192, 64), (64, 64)]  # fmt: skip
    assert (model.classifier.in_channels, model.classifier.out_channels) == (64, 3)
    # width: the first convolution's width; everything scales with it
    assert _conv_channels(half.encoder)[0] == (3, 16) and _conv_channels(half.bottleneck)[-1] == (
        128,
        256,
    )
    with pytest.raises(ValueError, match="width"):
        create_model("unet3d", width=16, base_channels=16)
    # the guide's block at the bottleneck, and nothing else differs
    ((path, block),) = non_local_blocks(nl)
    assert (path, block.in_channels) == ("bottleneck.non_local", 512)
    blocks = sum(p.numel() for p in block.parameters())
    assert sum(p.numel() for p in nl.parameters()) == 19_069_955 + blocks
    # the 2D U-Net keeps Ronneberger et al.'s layout (level i at 64 * 2**i, bottleneck 1024)
    with torch.device("meta"):
        unet2 = create_model("unet2d")
    assert _conv_channels(unet2.bottleneck, nn.Conv2d) == [(512, 1024), (1024, 1024)]


@pytest.mark.parametrize("upscale", [2, 3, 4])
def test_sr_upscale_factors(upscale):
    for name in ("edsr_baseline", "rcan_nl"):
        model = _tiny(name, upscale=upscale)
        assert model(torch.rand(1, 3, 8, 12)).shape == (1, 3, 8 * upscale, 12 * upscale)
    with pytest.raises(ValueError, match="scale: expected 2, 3, 4"):
        create_model("edsr_baseline", upscale=5)


def test_full_size_parameters_and_cost():
    """Parameter counts of the papers' models, and the cost command's counter on each."""
    edsr = model_cost("edsr_baseline", (48, 48))
    rcan = model_cost("rcan", (48, 48))
    sf = model_cost("slowfast_r50", (32, 256, 256))
    assert 1.3e6 < edsr.params < 1.45e6  # EDSR baseline x2 (the paper: ~1.5M at x4)
    assert 15.3e6 < rcan.params < 15.7e6  # RCAN: ~16M
    assert 34.3e6 < sf.params < 34.6e6  # PySlowFast SLOWFAST_4x16_R50: 34.4M (400 classes)
    assert 35.5e9 < sf.macs < 36.5e9  # its 36.1 GFLOPs (multiply-adds) at 256x256, 32 frames
    nl = model_cost("unet2d_nl", (64, 64))
    assert len(nl.non_local) == 1 and nl.macs > model_cost("unet2d", (64, 64)).macs
    assert len(model_cost("slowfast_r50_nl5", (32, 224, 224)).non_local) == 5


def test_insert_non_local_into_the_new_models():
    unet = _tiny("unet2d")
    insert_non_local(unet, ["encoder.1"], dim=2, in_channels=8)
    edsr = _tiny("edsr_baseline")
    insert_non_local(edsr, ["body.0", "body.1"], dim=2)  # ResBlocks: class switch
    sf = _tiny("slowfast_r50")
    insert_non_local(sf, ["s4.pathway0_res1"], dim=3)
    for model, n, x in ((unet, 1, torch.rand(1, 3, 32, 32)), (edsr, 2, torch.rand(1, 3, 8, 8)),
                        (sf, 1, torch.rand(1, 3, 8, 64, 64))):  # fmt: skip
        assert len(non_local_blocks(model)) == n
        for _, b in non_local_blocks(model):
            nn.init.ones_(b.norm.weight)
        model(x).sum().backward()
        assert all(b.theta.weight.grad.abs().sum() > 0 for _, b in non_local_blocks(model))


def test_unet_input_errors_name_the_argument():
    model = _tiny("unet2d")
    with pytest.raises(ValueError, match="divisible by 4"):
        model(torch.rand(1, 3, 30, 32))
    with pytest.raises(ValueError, match=r"x: expected an image batch"):
        model(torch.rand(3, 32, 32))
    with pytest.raises(ValueError, match="alpha=4 frames"):
        _tiny("slowfast_r50")(torch.rand(1, 3, 2, 64, 64))


# PySlowFast names (slowfast/models/video_model_builder.py, resnet_helper.py, stem_helper.py,
# nonlocal_helper.py, head_helper.py) and their shapes for SLOWFAST_4x16_R50 / _NLN
PYSLOWFAST_KEYS = {
    "s1.pathway0_stem.conv.weight": (64, 3, 1, 7, 7),
    "s1.pathway1_stem.conv.weight": (8, 3, 5, 7, 7),
    "s1.pathway1_stem.bn.running_var": (8,),
    "s1_fuse.conv_f2s.weight": (16, 8, 5, 1, 1),
    "s1_fuse.bn.weight": (16,),
    "s2.pathway0_res0.branch1.weight": (256, 80, 1, 1, 1),
    "s2.pathway0_res0.branch1_bn.running_mean": (256,),
    "s2.pathway0_res0.branch2.a.weight": (64, 80, 1, 1, 1),
    "s2.pathway1_res0.branch2.a.weight": (8, 8, 3, 1, 1),
    "s2.pathway0_res2.branch2.b.weight": (64, 64, 1, 3, 3),
    "s2.pathway0_res2.branch2.c_bn.bias": (256,),
    "s3.pathway0_res0.branch2.a.weight": (128, 320, 1, 1, 1),
    "s4.pathway0_res0.branch2.a.weight": (256, 640, 3, 1, 1),
    "s5.pathway1_res2.branch2.c.weight": (256, 64, 1, 1, 1),
    "s3_fuse.conv_f2s.weight": (128, 64, 5, 1, 1),
    "head.projection.weight": (400, 2304),
    "s3.pathway0_nonlocal1.conv_theta.weight": (256, 512, 1, 1, 1),
    "s3.pathway0_nonlocal1.conv_theta.bias": (256,),
    "s4.pathway0_nonlocal5.conv_out.weight": (1024, 512, 1, 1, 1),
    "s4.pathway0_nonlocal5.conv_out.bias": (1024,),
    "s4.pathway0_nonlocal5.bn.running_mean": (1024,),
}


def test_pyslowfast_key_names_import_full_size_on_meta():
    with torch.device("meta"):
        model = create_model("slowfast_r50_nl5")
    own = model.state_dict()
    fake = {k: torch.empty(shape, device="meta") for k, shape in PYSLOWFAST_KEYS.items()}
    converted = convert_pyslowfast_state_dict({"module." + k: v for k, v in fake.items()})
    assert "s4.pathway0_nonlocal5.W_z.bias" not in converted  # folded into the BN mean
    for key, value in converted.items():
        assert key in own, key
        assert own[key].shape == value.shape, key


def test_pyslowfast_checkpoint_loads_and_computes_the_same_function(tmp_path):
    """A checkpoint in PySlowFast's layout (renamed back from a tiny model, with a conv_out
    bias) loads strictly after conversion and gives PySlowFast's BN(W y + b) + x."""
    torch.manual_seed(0)
    model = _tiny("slowfast_r50_nl5").eval()
    for _, b in non_local_blocks(model):
        nn.init.normal_(b.norm.weight)
        nn.init.normal_(b.norm.running_mean)
    inverse = {
        "theta": "conv_theta",
        "phi": "conv_phi",
        "g": "conv_g",
        "W_z": "conv_out",
        "norm": "bn",
    }
    theirs = {}
    for key, value in model.state_dict().items():
        parts = key.split(".")
        if len(parts) > 2 and "_nonlocal" in parts[1]:
            parts[2] = inverse[parts[2]]
        theirs[".".join(parts)] = value.clone()
    biases = {}
    for key in [k for k in theirs if k.endswith("conv_out.weight")]:
        prefix = key.removesuffix(".conv_out.weight")
        biases[prefix] = torch.randn(theirs[key].shape[0])
        theirs[prefix + ".conv_out.bias"] = biases[prefix]
        theirs[prefix + ".bn.running_mean"] = theirs[prefix + ".bn.running_mean"] + biases[prefix]
    path = tmp_path / "SLOWFAST_NLN.pyth"
    torch.save({"model_state": theirs}, path)
    ckpt = torch.load(path, weights_only=True)
    fresh = _tiny("slowfast_r50_nl5").eval()
    fresh.load_state_dict(convert_pyslowfast_state_dict(ckpt["model_state"]), strict=True)
    x = torch.rand(1, 3, 8, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(fresh(x), model(x), rtol=1e-5, atol=1e-6)
        assert not torch.allclose(fresh.s3.pathway0_nonlocal1.norm.running_mean,
                                  model.s3.pathway0_nonlocal1.norm.running_mean)  # fmt: skip


def test_fpn_levels_option_of_the_detectors():
    from nlnet.models.detection import build_tiny_mask_rcnn

    model = _tiny("maskrcnn_tiny_nlfpn")
    assert [p for p, _ in non_local_blocks(model)] == [
        f"backbone.fpn.inner_blocks.{i}.non_local" for i in (1, 2, 3)
    ]
    assert {b.kernel for _, b in non_local_blocks(model)} == {(2, 2)}
    custom = build_tiny_mask_rcnn(backbone_block=True, fpn_levels=[0])
    assert [p for p, _ in non_local_blocks(custom)] == [
        "backbone.body.layer3.0.non_local", "backbone.fpn.inner_blocks.0.non_local"
    ]  # fmt: skip
    with pytest.raises(ValueError, match="fpn_levels"):
        build_tiny_mask_rcnn(fpn_levels=[4])
    # blocks at the FPN levels change the features once they are not the identity
    model.eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        before = model.backbone(x)["1"].clone()
        for _, b in non_local_blocks(model):
            nn.init.ones_(b.norm.weight)
        assert not torch.allclose(model.backbone(x)["1"], before)
    faster = _tiny("fasterrcnn_r50_fpn_nlfpn").eval()
    with torch.no_grad():
        (out,) = faster([torch.rand(3, 64, 64)])
    assert set(out) == {"boxes", "labels", "scores"} and len(non_local_blocks(faster)) == 3


def _fpn_levels_out(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return {k: v.clone() for k, v in model.backbone(x).items()}


@pytest.mark.parametrize("builder", ["mask", "faster", "keypoint", "tiny"])
def test_fpn_block_at_the_coarsest_level_reaches_every_finer_level(builder):
    """A block at P5 (level 3) changes P2..P4 (and P5, P6) once it is not the identity: the
    top-down pathway carries the lateral map it sits on. A block at P3 changes P2 and P3 only."""
    from nlnet.models import detection as det

    narrow = {"width_per_group": 4, "min_size": 64, "max_size": 64}
    make = {
        "mask": lambda lv: det.build_mask_rcnn(50, backbone_block=False, fpn_levels=lv, **narrow),
        "faster": lambda lv: det.build_faster_rcnn(50, fpn_levels=lv, **narrow),
        "keypoint": lambda lv: det.build_keypoint_rcnn(
            50, head_blocks=False, fpn_levels=lv, **narrow
        ),
        "tiny": lambda lv: det.build_tiny_mask_rcnn(backbone_block=False, fpn_levels=lv),
    }[builder]
    x = torch.rand(1, 3, 64, 64)
    for level, changed in ((3, {"0", "1", "2", "3", "pool"}), (1, {"0", "1"})):
        torch.manual_seed(0)
        model = make([level]).eval()
        ((path, block),) = non_local_blocks(model)
        assert path == f"backbone.fpn.inner_blocks.{level}.non_local"
        before = _fpn_levels_out(model, x)
        nn.init.constant_(block.norm.weight, 1.0)  # BN gamma != 0: the block is not the identity
        after = _fpn_levels_out(model, x)
        moved = {k for k in before if not torch.allclose(before[k], after[k])}
        assert moved == changed, (level, moved)


def test_edsr_bicubic_residual_option():
    import torch.nn.functional as F

    model = _tiny("edsr_baseline", bicubic_residual=True)
    last = model.tail[-1]
    nn.init.zeros_(last.weight), nn.init.zeros_(last.bias)
    x = torch.rand(1, 3, 8, 8)
    expected = F.interpolate(x, scale_factor=2, mode="bicubic")
    torch.testing.assert_close(model(x), expected)
    with pytest.raises(ValueError, match="bicubic_residual"):
        create_model("edsr_baseline", num_classes=1, bicubic_residual=True)


def test_edsr_control_has_the_blocks_place_and_size_and_starts_as_the_identity():
    """``edsr_baseline_res1`` (the control of Sec. 4.1): a plain residual unit where
    ``edsr_baseline_nl`` has its block, within 3 % of the block's parameters; it starts as the
    identity, so a fresh control model computes plain EDSR with the same weights."""
    from nlnet.models.edsr import ResidualControl2d

    kw = {"n_resblocks": 4, "n_feats": 32}
    with torch.device("meta"):
        plain, control, nl = (create_model(n, **kw) for n in
                              ("edsr_baseline", "edsr_baseline_res1", "edsr_baseline_nl"))  # fmt: skip
    count = [sum(p.numel() for p in m.parameters()) for m in (plain, control, nl)]
    ((path, _),) = non_local_blocks(nl)
    assert path == "body.1.non_local" and isinstance(control.body[2], ResidualControl2d)
    assert abs((count[1] - count[0]) / (count[2] - count[0]) - 1) < 0.03
    tiny, ref = _tiny("edsr_baseline_res1"), _tiny("edsr_baseline")  # 2 blocks: control at 1

    def shift(key: str) -> str:  # body.<i> of the control model -> body.<i - 1> of EDSR
        head, _, rest = key.partition(".")
        if head != "body":
            return key
        index, _, rest = rest.partition(".")
        return f"body.{int(index) - 1}.{rest}"

    state = tiny.state_dict()
    ref.load_state_dict({k if k.startswith("body.0.") else shift(k): v
                         for k, v in state.items() if not k.startswith("body.1.")})  # fmt: skip
    x = torch.rand(1, 3, 8, 8)
    torch.testing.assert_close(tiny(x), ref(x))
    with pytest.raises(ValueError, match="placement="):
        create_model("edsr_baseline_res1", block={"reduction": 2})
