"""The model registry: every registered model builds, runs, learns; names say what they are."""

from __future__ import annotations

import argparse

import pytest
import torch
from torch import nn

import nlnet.models.registry as registry
from nlnet.models.model_cfg import WEIGHTS_FORMATS, ModelCfg
from nlnet.models.registry import (
    create_model,
    find_models,
    get_model_entry,
    list_models,
    register_model,
)
from nlnet.models.surgery import non_local_blocks, non_local_paths

FAMILIES = ("resnet3d", "resnet2d", "segmentation")


ALL = list_models()
OURS = [n for n in ALL if get_model_entry(n).default_cfg.family in FAMILIES]


def _tiny_input(cfg: ModelCfg) -> torch.Tensor:
    task = cfg.task
    if cfg.test_input_size:
        return torch.randn(1, *cfg.test_input_size)
    # 128x128 keeps res5 at 4x4: a res5 block pools its keys to 2x2, more than one key (with a
    # single key the softmax is constant and theta/phi get exactly zero gradient)
    if task == "video_classification":
        return torch.randn(1, 3, 8, 128, 128)
    return torch.randn(1, 3, 64, 64)


def _check_contract(model: nn.Module, x: torch.Tensor, cfg: ModelCfg) -> None:
    """One model contract: forward = head(features); features a tensor; stage maps (a list in
    timm's ``(final, maps)`` for the classifiers, tests/models/test_model_contract.py; a dict of
    named maps, ``stage_maps``, for the dense models, which have no timm signature)."""
    with torch.no_grad():
        feats = model.forward_features(x)
        # timm's forward_intermediates for the classifiers; the dense models' named maps
        stages = (
            model.stage_maps(x) if hasattr(model, "stage_maps") else model.forward_intermediates(x)
        )
        out = model(x)
        head = model.forward_head(feats)
    if isinstance(stages, tuple):  # timm's contract: (final features, [maps])
        torch.testing.assert_close(stages[0], feats)
        stages = dict(enumerate(stages[1]))
    assert isinstance(feats, torch.Tensor) and feats.shape[0] == x.shape[0]
    assert stages and all(isinstance(v, torch.Tensor) for v in stages.values())
    assert all(v.dim() == x.dim() and v.shape[0] == x.shape[0] for v in stages.values())
    if cfg.task == "segmentation" and head.shape[2:] != x.shape[2:]:  # upsampled by forward
        head = torch.nn.functional.interpolate(head, size=x.shape[-2:], mode="bilinear")
    torch.testing.assert_close(out, head)


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
    assert list_models("*r101*") == [n for n in ALL if "r101" in n]
    assert list_models("c2d_r50_nl?") == ["c2d_r50_nl1", "c2d_r50_nl5"]  # fnmatch, not substring
    assert list_models("r101") == []  # no wildcard: the exact name, as timm's list_models
    assert list_models("c2d_r101") == ["c2d_r101"]
    assert find_models("r101") == list_models("*r101*")  # find_models: names containing it
    assert list_models(["i3d_r50*", "c2d_r101*"], exclude="*nl10") == [
        "c2d_r101", "c2d_r101_nl1", "c2d_r101_nl5", "i3d_r50", "i3d_r50_nl5"
    ]  # fmt: skip
    assert find_models(["i3d_r50", "c2d_r101"], exclude=["nl"]) == ["c2d_r101", "i3d_r50"]
    for name in ALL:
        assert get_model_entry(name).description


# detectors take lists of images and return losses/detections: tests/models/test_dense_models.py
DETECTION_TASKS = ("detection",)


@pytest.mark.parametrize(
    "name", [n for n in ALL if get_model_entry(n).default_cfg.task not in DETECTION_TASKS]
)
def test_tiny_forward_backward_every_parameter_gets_a_gradient(name):
    """Same topology at a narrow width (``test_overrides``), 5 classes, one backward pass."""
    torch.manual_seed(0)
    cfg = get_model_entry(name).default_cfg
    model = create_model(name, num_classes=5, **cfg.test_overrides)
    for _, block in non_local_blocks(model):  # gamma = 0 would zero the block's gradients
        nn.init.ones_(block.norm.weight)
    x = _tiny_input(cfg)
    _check_contract(model.eval(), x, cfg)
    out = model.train()(x)
    if cfg.task == "segmentation":
        assert out.shape == (1, 5, *x.shape[2:])  # a volume keeps its (D, H, W)
    elif cfg.task == "super_resolution":  # num_classes = output channels
        assert out.shape == (1, 5, *(s * cfg.upscale for s in x.shape[2:]))
    else:
        assert out.shape == (1, 5)
    out.square().mean().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, pname
        assert torch.isfinite(p.grad).all(), pname
    for bname, block in non_local_blocks(model):
        for pname, p in block.named_parameters():
            assert p.grad.abs().sum() > 0, f"{bname}.{pname}"


BLOCK_NAMES = [n for n in OURS if "_nl" in n]


@pytest.mark.parametrize("name", BLOCK_NAMES)
def test_names_say_where_the_blocks_are(name):
    with torch.device("meta"):
        model = create_model(name)
    blocks = [n.removesuffix(".non_local") for n, _ in non_local_blocks(model)]
    cfg = get_model_entry(name).default_cfg
    _check_cfg_facts(model, cfg)
    if cfg.task == "video_classification":
        layers = (3, 4, 6, 3) if "_r50" in name else (3, 4, 23, 3)
        assert blocks == non_local_paths(cfg.blocks, layers)
        count = name.rsplit("_nl", 1)[1]
        if count.isdigit():
            assert len(blocks) == int(count)
    elif "coco" in name:
        assert blocks == ["layer3.4" if "50" in name else "layer3.21"]
    elif "guide" in name:
        assert blocks == ["layer4"]
    elif name.startswith("resnet_tiny"):  # the COCO placement on a ResNet-18 layout
        assert blocks == non_local_paths(cfg.blocks, (2, 2, 2, 2)) == ["layer3.0"]
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
        m = create_model("c2d_r50_nl5", block={"mode": "space", "instantiation": "gaussian"},
                         dropout=0.2)  # fmt: skip
        custom = create_model("c2d_r50", placement=["layer1.0", "layer4.2"],
                              block={"reduction": 4})  # fmt: skip
        # the keywords of earlier releases: the same models, each with a DeprecationWarning
        with pytest.warns(DeprecationWarning) as record:
            old = create_model("c2d_r50_nl5", mode="space", instantiation="gaussian")
            old_custom = create_model("c2d_r50", nl_at=["layer1.0", "layer4.2"],
                                      nl_options={"reduction": 4})  # fmt: skip
    assert {b.mode for _, b in non_local_blocks(m)} == {"space"}
    assert {b.instantiation for _, b in non_local_blocks(m)} == {"gaussian"}
    assert m.dropout.p == 0.2
    assert [b.inter_channels for _, b in non_local_blocks(custom)] == [64, 512]
    for new, legacy in ((m, old), (custom, old_custom)):
        assert [(n, b.extra_repr()) for n, b in non_local_blocks(new)] == [
            (n, b.extra_repr()) for n, b in non_local_blocks(legacy)]  # fmt: skip
    said = sorted(str(w.message).split("=")[0] for w in record)
    assert said == ["instantiation", "mode", "nl_at", "nl_options"]
    with pytest.raises(ValueError, match="placement="):
        create_model("c2d_r50", block={"mode": "space"}, width=4)
    with pytest.raises(ValueError, match="did you mean 'instantiation'"):
        create_model("c2d_r50_nl5", block={"instantation": "gaussian"}, width=4)
    with pytest.raises(ValueError, match="given twice"):
        create_model("c2d_r50_nl5", block={"mode": "space"}, mode="time", width=4)


def test_unknown_name_and_duplicate_registration():
    with pytest.raises(ValueError, match="did you mean.*c2d_r50_nl5"):
        create_model("c2d_r50_nl55")
    with pytest.raises(ValueError, match="already registered"):
        register_model(lambda **kw: nn.Identity(), name="c2d_r50")


def test_register_model_needs_a_typed_default_cfg():
    with pytest.raises(TypeError, match="needs a default_cfg"):

        @register_model
        def _tmp_bare(**kwargs):
            return nn.Linear(2, 3)

    with pytest.raises(TypeError, match=r"unknown key\(s\) \['hflp'\]"):
        register_model(lambda: None, name="_tmp_typo", default_cfg={**_CFG, "hflp": 1})
    with pytest.raises(ValueError, match="input_size"):
        register_model(lambda: None, name="_tmp_size", default_cfg={**_CFG, "input_size": (3,)})
    assert "_tmp_bare" not in registry._REGISTRY and "_tmp_typo" not in registry._REGISTRY


_CFG = {"task": "x", "num_classes": 4, "input_size": (3, 1, 2)}


def test_register_model_decorator_forms():
    try:

        @register_model(default_cfg=_CFG)
        def _tmp_bare(**kwargs):
            """A registration with the description from the docstring."""
            return nn.Linear(2, kwargs.get("num_classes", 3))

        @register_model(description="with args", default_cfg=ModelCfg(**_CFG))
        def _tmp_args(**kwargs):
            return nn.Linear(2, kwargs.get("num_classes", 4))

        desc = get_model_entry("_tmp_bare").description
        assert desc == "A registration with the description from the docstring."
        cfg = get_model_entry("_tmp_args").default_cfg
        assert (cfg.num_classes, cfg.input_kind, cfg.mean) == (4, "image", (0.485, 0.456, 0.406))
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


# -- registry-wide contract (timm's test_models.py is the example) ------------------------------
@pytest.mark.parametrize("name", ALL)
def test_every_name_is_one_grepable_builder_with_a_valid_cfg(name):
    import inspect

    entry = get_model_entry(name)
    assert entry.builder.__name__ == name, "one decorated function per name, named after it"
    source = inspect.getsource(inspect.getmodule(entry.builder))
    assert f"def {name}(" in source
    cfg = entry.default_cfg
    assert isinstance(cfg, ModelCfg) and cfg.family and cfg.first_conv and cfg.classifier
    kinds = ("clip", "volume") if len(cfg.input_size) == 4 else ("image",)  # volume: (C, D, H, W)
    assert cfg.input_kind in kinds
    assert cfg["task"] == cfg.get("task") == cfg.task and "classifier" in cfg  # as a mapping
    assert len(cfg.mean) == len(cfg.std) == cfg.input_size[0]
    assert cfg.name == name and entry.facts is cfg  # the facts' one home
    assert cfg.weights_format in WEIGHTS_FORMATS
    if cfg.weights_format == "inflate":  # 2D weights by name need a torchvision counterpart
        assert cfg.weights_arch is not None
    if cfg.weights_arch is None:
        assert cfg.weights_meta() == {}


def test_model_cfg_derives_the_weights_facts_once():
    base = {"task": "image_classification", "num_classes": 4, "input_size": (3, 8, 8)}
    cfg = ModelCfg(**base, depth=101, weights_format="inflate")
    assert (cfg.weights_arch, cfg.weights_format) == ("resnet101", "inflate")
    assert cfg.replace(name="x") == ModelCfg(**base, depth=101, weights_format="inflate", name="x")
    no_arch = ModelCfg(**base, depth=18, weights_format="inflate")  # no torchvision counterpart
    assert (no_arch.weights_arch, no_arch.weights_format) == (None, "native")
    named = ModelCfg(**base, torchvision_arch="resnet152", weights_format="inflate")
    assert named.weights_arch == "resnet152"
    assert ModelCfg(**base, depth=50).weights_arch is None  # native: no torchvision weights
    assert (ModelCfg(**base).dynamic_time, ModelCfg(**base).takes_dropout) == (True, True)
    with pytest.raises(ValueError, match="weights_format"):
        ModelCfg(**base, weights_format="onnx")


def test_model_cfg_travels_with_a_copied_or_pickled_model():
    import copy
    import pickle

    cfg = get_model_entry("c2d_r50").default_cfg
    assert copy.deepcopy(cfg) is cfg and copy.copy(cfg) is cfg  # immutable: shared
    again = pickle.loads(pickle.dumps(cfg))
    assert again == cfg and again.test_overrides["width"] == 4 and again.name == "c2d_r50"
    model = create_model("c2d_tiny", width=2)
    assert copy.deepcopy(model).pretrained_cfg is model.pretrained_cfg


def _check_cfg_facts(model: nn.Module, cfg: ModelCfg) -> None:
    """The model's first convolution and classifier are where its ModelCfg says."""
    first = model.get_submodule(cfg.first_conv)
    head = model.get_submodule(cfg.classifier[0])
    for path in cfg.classifier[1:]:
        model.get_submodule(path)
    first = next(m for m in first.modules() if isinstance(m, (nn.Conv2d, nn.Conv3d)))
    assert first.in_channels == cfg.input_size[0]
    assert first.weight.dim() == len(cfg.input_size) + 1 or cfg.input_kind == "clip"
    if cfg.task in ("video_classification", "image_classification", "segmentation"):
        last = [m for m in head.modules() if isinstance(m, (nn.Linear, nn.Conv2d, nn.Conv3d))][-1]
        out = last.out_features if isinstance(last, nn.Linear) else last.out_channels
        assert out == cfg.num_classes


# the named block placements are built full size on meta (and checked) above
@pytest.mark.parametrize("name", [n for n in ALL if n not in BLOCK_NAMES])
def test_every_model_builds_full_size_on_meta_as_its_cfg_says(name):
    cfg = get_model_entry(name).default_cfg
    with torch.device("meta"):
        model = create_model(name)
    _check_cfg_facts(model, cfg)
