"""The model registry: every registered model builds, runs, learns; names say what they are."""

from __future__ import annotations

import argparse

import pytest
import torch
from torch import nn

import nlnet.models.registry as registry
from nlnet.models.registry import create_model, get_model_entry, list_models, register_model
from nlnet.models.surgery import non_local_blocks, non_local_paths

FAMILIES = ("resnet3d", "resnet2d", "segmentation")


ALL = list_models()
OURS = [n for n in ALL if get_model_entry(n).default_cfg.get("family") in FAMILIES]


def _tiny_input(cfg: dict) -> torch.Tensor:
    task = cfg.get("task", "video_classification")
    if "test_input_size" in cfg:
        return torch.randn(1, *cfg["test_input_size"])
    # 128x128 keeps res5 at 4x4: a res5 block pools its keys to 2x2, more than one key (with a
    # single key the softmax is constant and theta/phi get exactly zero gradient)
    if task == "video_classification":
        return torch.randn(1, 3, 8, 128, 128)
    return torch.randn(1, 3, 64, 64)


def test_registry_contents():
    expected = {
        "c2d_r50", "c2d_r50_nl1", "c2d_r50_nl5", "c2d_r50_nl10",
        "c2d_r50_nl_res2", "c2d_r50_nl_res3", "c2d_r50_nl_res4", "c2d_r50_nl_res5",
        "c2d_r101", "c2d_r101_nl1", "c2d_r101_nl5", "c2d_r101_nl10",
        "i3d_r50", "i3d_r50_nl5", "i3d311_r50", "i3d311_r50_nl5", "i3d311_r101_nl10",
        "resnet50_nl_coco", "resnet50_nl_guide", "seg_r50", "seg_r50_nl",
    }  # fmt: skip
    assert expected <= set(ALL)
    assert ALL == sorted(ALL)
    assert list_models("r101") == [n for n in ALL if "r101" in n]
    for name in ALL:
        assert get_model_entry(name).description


# detectors take lists of images and return losses/detections: tests/models/test_dense_models.py
DETECTION_TASKS = ("instance_segmentation", "keypoints", "object_detection")


@pytest.mark.parametrize(
    "name", [n for n in ALL if get_model_entry(n).default_cfg.get("task") not in DETECTION_TASKS]
)
def test_tiny_forward_backward_every_parameter_gets_a_gradient(name):
    """Same topology at a narrow width (``test_overrides``), 5 classes, one backward pass."""
    torch.manual_seed(0)
    cfg = get_model_entry(name).default_cfg
    model = create_model(name, num_classes=5, **cfg.get("test_overrides", {}))
    for _, block in non_local_blocks(model):  # gamma = 0 would zero the block's gradients
        nn.init.ones_(block.norm.weight)
    x = _tiny_input(cfg)
    out = model(x)
    if cfg.get("task") == "segmentation":
        assert out.shape == (1, 5, *x.shape[2:])
    elif cfg.get("task") == "super_resolution":  # num_classes = output channels
        assert out.shape == (1, 5, *(s * cfg["upscale"] for s in x.shape[2:]))
    else:
        assert out.shape == (1, 5)
    out.square().mean().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, pname
        assert torch.isfinite(p.grad).all(), pname
    for bname, block in non_local_blocks(model):
        for pname, p in block.named_parameters():
            assert p.grad.abs().sum() > 0, f"{bname}.{pname}"


@pytest.mark.parametrize("name", [n for n in OURS if "_nl" in n])
def test_names_say_where_the_blocks_are(name):
    with torch.device("meta"):
        model = create_model(name)
    blocks = [n.removesuffix(".non_local") for n, _ in non_local_blocks(model)]
    cfg = get_model_entry(name).default_cfg
    if cfg["task"] == "video_classification":
        layers = (3, 4, 6, 3) if "_r50" in name else (3, 4, 23, 3)
        assert blocks == non_local_paths(cfg["blocks"], layers)
        count = name.rsplit("_nl", 1)[1]
        if count.isdigit():
            assert len(blocks) == int(count)
    elif "coco" in name:
        assert blocks == ["layer3.4" if "50" in name else "layer3.21"]
    elif "guide" in name:
        assert blocks == ["layer4"]
    else:
        assert blocks == ["head"]


def test_full_size_image_models_on_meta():
    with torch.device("meta"):
        coco = create_model("resnet50_nl_coco")
        guide = create_model("resnet50_nl_guide", num_classes=10)
        seg = create_model("seg_r50_nl")
        assert coco(torch.empty(1, 3, 800, 1344)).shape == (1, 1000)
        assert guide(torch.empty(2, 3, 224, 224)).shape == (2, 10)
        assert seg(torch.empty(1, 3, 512, 1024)).shape == (1, 19, 512, 1024)
    ((_, g),) = non_local_blocks(guide)
    assert g.in_channels == 2048 and g.inter_channels == 1024 and g.kernel == (1, 1)


def test_overrides_reach_the_blocks_and_the_backbone():
    with torch.device("meta"):
        m = create_model("c2d_r50_nl5", mode="space", instantiation="gaussian", dropout=0.2)
        custom = create_model(
            "c2d_r50", nl_at=["layer1.0", "layer4.2"], nl_options={"reduction": 4}
        )
    assert {b.mode for _, b in non_local_blocks(m)} == {"space"}
    assert {b.instantiation for _, b in non_local_blocks(m)} == {"gaussian"}
    assert m.dropout.p == 0.2
    assert [b.inter_channels for _, b in non_local_blocks(custom)] == [64, 512]
    with pytest.raises(ValueError, match="nl_at"):
        create_model("c2d_r50", mode="space", width=4)


def test_unknown_name_and_duplicate_registration():
    with pytest.raises(ValueError, match="did you mean.*c2d_r50_nl5"):
        create_model("c2d_r50_nl55")
    with pytest.raises(ValueError, match="already registered"):
        register_model(lambda **kw: nn.Identity(), name="c2d_r50")


def test_register_model_decorator_forms():
    try:

        @register_model
        def _tmp_bare(**kwargs):
            """A bare registration."""
            return nn.Linear(2, kwargs.get("num_classes", 3))

        @register_model(description="with args", default_cfg={"task": "x", "num_classes": 4})
        def _tmp_args(**kwargs):
            return nn.Linear(2, kwargs.get("num_classes", 4))

        assert get_model_entry("_tmp_bare").description == "A bare registration."
        assert get_model_entry("_tmp_args").default_cfg["num_classes"] == 4
        assert create_model("_tmp_bare", num_classes=6).out_features == 6
        assert create_model("_tmp_args").out_features == 4
        assert "_tmp_args" in list_models()
    finally:
        registry._REGISTRY.pop("_tmp_bare", None)
        registry._REGISTRY.pop("_tmp_args", None)


def test_cli_prints_the_table(capsys):
    from nlnet.commands import models as command

    parser = argparse.ArgumentParser()
    command.configure_parser(parser)
    assert command.main(parser.parse_args(["--filter", "c2d_r50_nl_res"])) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["name", "params"]
    assert [line.split()[0] for line in out[1:]] == [f"c2d_r50_nl_res{i}" for i in (2, 3, 4, 5)]
    assert out[1].split()[1] == "24.46M"  # 24.33M C2D R50 + one block with 256 channels
    assert command.main(parser.parse_args(["--filter", "nothing_like_this"])) == 1
    assert "nlnet models" in command.EXAMPLES
