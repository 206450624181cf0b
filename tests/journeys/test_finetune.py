"""Fine-tuning every registered model: ``create_model(name, weights=..., num_classes=k)`` with
k different from the weights' classes gives a fresh head of k outputs and every other tensor
loaded; the classifier, input kind and preprocessing are facts of the model (registry), read by
``reset_head``; ``pretrained=True`` gives advice that fits the model; weights names are not
rewritten to paths by the config."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nlnet.models.registry import create_model, get_model_entry, list_models, model_facts

#: one model per family in the default suite (narrow copies); every other one is slow
DEFAULT = {"c2d_tiny_nl1", "vivit_tiny", "vit_tiny", "swin_tiny", "seg_tiny_nl",
           "maskrcnn_tiny_nl", "resnet50_nl_guide", "c2d_r50_nl5"}  # fmt: skip
MODELS = [n if n in DEFAULT else pytest.param(n, marks=pytest.mark.slow) for n in list_models()]


def _randomised(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    return {k: (torch.randn_like(v) if v.is_floating_point() else v.clone())
            for k, v in model.state_dict().items()}  # fmt: skip


def _under(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("name", MODELS)
def test_weights_with_another_class_count_give_a_fresh_head(name):
    entry, facts = get_model_entry(name), model_facts(name)
    narrow = dict(entry.default_cfg.get("test_overrides", {}))
    source = _randomised(create_model(name, **narrow))
    k = facts.num_classes + 3
    torch.manual_seed(2)
    model = create_model(name, weights=source, num_classes=k, **narrow)
    own = model.state_dict()
    fresh = [key for key in own if _under(key, facts.classifier)
             and own[key].shape != source[key].shape]  # fmt: skip
    assert fresh, f"{name}: no classifier tensor changed size ({facts.classifier})"
    for key, value in own.items():
        if key in fresh:  # k outputs (a box regressor: 4 per class)
            assert value.shape[0] % k == 0 and value.shape[0] != source[key].shape[0], key
        else:
            assert torch.equal(value, source[key]), f"{name}: {key} not loaded"
    assert model.pretrained_cfg is facts  # the ModelCfg travels with the model


def test_model_facts_name_each_models_classifier_and_input():
    for name in list_models():
        facts = model_facts(name)
        assert facts is get_model_entry(name).facts is get_model_entry(name).default_cfg
        assert facts.name == name  # one home: the registry's ModelCfg
        with torch.device("meta"):
            model = create_model(name)
        modules = dict(model.named_modules())
        assert all(c in modules for c in facts.classifier), (name, facts.classifier)
        kinds = ("clip", "volume") if len(facts.input_size) == 4 else ("image",)  # volume: 3D scans
        assert facts.input_kind in kinds, name
        assert len(facts.mean) == len(facts.std) == facts.input_size[0], name


@pytest.mark.parametrize(
    "name,arch",
    [
        ("resnet50_nl_guide", "resnet50"),
        pytest.param("c2d_r50_nl5", "resnet50", marks=pytest.mark.slow),
        pytest.param("vit_b_16", "vit_b_16", marks=pytest.mark.slow),
        pytest.param("swin_t", "swin_t", marks=pytest.mark.slow),
        pytest.param("seg_r50_nl", "resnet50", marks=pytest.mark.slow),
    ],
)
def test_torchvision_weights_by_name_from_the_cache(name, arch, fake_weights):
    """``weights="IMAGENET1K_V1"`` reads $TORCH_HOME's file (fake, real name): a new head of
    k outputs, every tensor with an ImageNet counterpart holds the file's value."""
    path = fake_weights(arch)
    facts = model_facts(name)
    assert facts.weights_arch == arch and facts.weights_meta("IMAGENET1K_V1")["url"].endswith(
        path.name
    )
    model = create_model(name, weights="IMAGENET1K_V1", num_classes=7)
    params = dict(model.named_parameters())
    first = next(p for n, p in params.items() if not _under(n, facts.classifier)
                 and "non_local" not in n)  # fmt: skip
    t = first.detach()
    assert bool((t == t.flatten()[0]).all()) and float(t.abs().max()) > 0  # the file's constant
    if facts.task == "image_classification":
        head = params[f"{facts.classifier[0]}.weight"]
        assert head.shape[0] == 7 and float(head.detach().std()) > 0 or torch.all(head == 0)


def test_pretrained_true_advice_fits_the_model():
    with pytest.raises(ValueError, match="weights='IMAGENET1K_V1'.*num_classes") as vit:
        create_model("vit_b_16", pretrained=True)
    assert "import-caffe2" not in str(vit.value)
    with pytest.raises(ValueError, match="weights='IMAGENET1K_V1'.*model.init.*import-caffe2"):
        create_model("c2d_r50", pretrained=True)
    with pytest.raises(ValueError, match="no published weights"):
        create_model("vit_tiny", pretrained=True)


def test_reset_head_reads_the_classifier_from_the_model(tmp_path):
    """``model.init: {from: CKPT, reset_head: true}`` on a ViT (classifier ``head``, not the
    old default ``fc``)."""
    from nlnet.engine.checkpoint import save_checkpoint
    from nlnet.engine.config import load_config
    from nlnet.engine.modeling import build_model, head_names

    src = create_model("vit_tiny", num_classes=10)
    path = save_checkpoint(tmp_path / "vit.pt", model=src, model_name="vit_tiny", num_classes=10)
    cfg = load_config(None, {"task": "image_classification", "data.builtin": "digits", "model.name": "vit_tiny",
                             "model.num_classes": 4,
                             "model.init": {"from": str(path), "reset_head": True}})  # fmt: skip
    assert head_names(cfg) == ("head",)
    model = build_model(cfg)
    assert model.head.out_features == 4
    assert torch.equal(model.patch_embed.weight, src.patch_embed.weight) if hasattr(
        model, "patch_embed") else True  # fmt: skip
    sd, ref = model.state_dict(), src.state_dict()
    assert all(torch.equal(v, ref[k]) for k, v in sd.items() if not k.startswith("head."))


def test_weights_names_are_not_made_absolute(tmp_path, monkeypatch):
    """``init: IMAGENET1K_V1`` (every paper config) stays a name; paths still resolve."""
    from nlnet.engine.config import absolute_paths, load_config

    monkeypatch.chdir(tmp_path)
    cfg = absolute_paths(load_config("kinetics/c2d_r50_nl5"))
    assert cfg.model.init == "IMAGENET1K_V1"
    (tmp_path / "w.pth").write_bytes(b"")
    cfg = absolute_paths(load_config("kinetics/c2d_r50_nl5", ["model.init=w.pth"]))
    assert cfg.model.init == str(tmp_path / "w.pth")
    cfg = absolute_paths(load_config("kinetics/c2d_r50_nl5",
                                     ["model.init={from: sub/x.pt, reset_head: true}"]))  # fmt: skip
    assert cfg.model.init == {"from": str(tmp_path / "sub" / "x.pt"), "reset_head": True}


def test_image_data_section_is_checked_at_load():
    from nlnet.engine.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="data.sise"):
        load_config(
            None, {"task": "image_classification", "data": {"builtin": "digits", "sise": 32}}
        )
    with pytest.raises(ConfigError, match="exactly one of data.root"):
        load_config(None, {"task": "image_classification", "data": {}})
    with pytest.raises(ConfigError, match="data.builtin"):
        load_config(None, {"task": "image_classification", "data": {"builtin": "mnist"}})


def test_r3d_18_takes_torchvisions_kinetics_weights_by_name(fake_weights):
    """``r3d_18`` (a ``ResNet3d`` of basic blocks) loads torchvision's ``R3D_18_Weights`` file
    from the cache (fake, real name), renamed: every tensor but the new head holds the file's."""
    from nlnet.models.video.torchvision_r3d import r3d_state_from_torchvision

    path = fake_weights("r3d_18", "KINETICS400_V1")
    assert model_facts("r3d_18").weights_meta("KINETICS400_V1")["url"].endswith(path.name)
    source = r3d_state_from_torchvision(torch.load(path, weights_only=True))
    model = create_model("r3d_18", weights="KINETICS400_V1", num_classes=7)
    own = model.state_dict()
    assert set(own) == set(source) and own["fc.weight"].shape == (7, 512)
    for key, value in own.items():
        if not key.startswith("fc."):
            assert torch.equal(value, source[key]), key


def test_a_video_config_without_statistics_takes_its_models():
    """``data.mean``/``data.std`` unset: the model's (Kinetics' for r3d_18, whose weights expect
    them; ImageNet's for the paper's networks); set: the user's."""
    from nlnet.engine.config import load_config

    assert load_config(None, ["model.name=r3d_18"]).data.mean == model_facts("r3d_18").mean
    assert load_config(None, ["model.name=c2d_r50_nl5"]).data.mean == (0.485, 0.456, 0.406)
    mine = load_config(None, ["model.name=r3d_18", "data.mean=[0.5,0.5,0.5]",
                              "data.std=[0.2,0.2,0.2]"])  # fmt: skip
    assert (mine.data.mean, mine.data.std) == ((0.5,) * 3, (0.2,) * 3)
    half = load_config(None, ["model.name=r3d_18", "data.mean=[0.5,0.5,0.5]"])
    assert half.data.std == (0.229, 0.224, 0.225)  # the section's, never half of the model's


@pytest.mark.parametrize("name", ["r3d_18", "c2d_r50_nl5"])
def test_rgb_weights_fit_a_model_of_one_or_four_input_channels(name):
    """A grey video or a one-channel volume fine-tunes from RGB weights (timm's
    ``adapt_input_conv``): the first kernel summed over RGB for one channel, repeated and scaled
    by 3/C for C; an input equal on every channel gives the RGB model's first response (exact
    for 1 and 6 channels; 4 channels get RGB, R again, all scaled by 3/4)."""
    narrow = dict(get_model_entry(name).default_cfg.get("test_overrides", {}))
    source = create_model(name, **narrow)
    x = torch.randn(1, 1, 4, 16, 16)
    expected = source.conv1(x.expand(-1, 3, -1, -1, -1))
    for channels in (1, 4, 6):
        model = create_model(name, in_channels=channels, weights=source.state_dict(),
                             num_classes=3, **narrow)  # fmt: skip
        assert model.conv1.weight.shape[1] == channels
        assert torch.equal(model.layer1[0].conv1.weight, source.layer1[0].conv1.weight)
        if channels == 4:
            w = source.conv1.weight.detach()
            torch.testing.assert_close(model.conv1.weight.detach(),
                                       torch.cat([w, w[:, :1]], 1) * 0.75)  # fmt: skip
            continue
        got = model.conv1(x.expand(-1, channels, -1, -1, -1))
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_2d_weights_of_the_same_names_inflate_into_a_block_free_video_resnet():
    """A torchvision-layout 2D ResNet-50 state dict (its keys are c2d_r50's own names) is
    inflated (Sec. 4.1), not taken for this model's own weights; a grey input works too."""
    narrow = {"width": 4}
    as_2d = {k: v[:, :, 0] if v.dim() == 5 else v
             for k, v in create_model("c2d_r50", **narrow).state_dict().items()}  # fmt: skip
    for channels in (3, 1):
        model = create_model("c2d_r50", in_channels=channels, weights=as_2d, num_classes=3,
                             **narrow)  # fmt: skip
        rgb = as_2d["conv1.weight"]
        want = rgb if channels == 3 else rgb.sum(1, keepdim=True)
        torch.testing.assert_close(model.conv1.weight.detach()[:, :, 0], want)


def test_reset_head_finds_the_classifier_of_a_network_of_ones_own(tmp_path):
    """A network passed to ``train(model=...)`` is not registered: ``reset_head`` takes the
    module its ``get_classifier()`` returns (timm's convention), else its last ``nn.Linear``
    (here ``head``, not ``fc``), and loads everything else."""
    from torch import nn

    from nlnet.engine.config import load_config
    from nlnet.engine.modeling import head_names, init_from_pretrained

    class HeadNet(nn.Module):
        def __init__(self, k: int = 4) -> None:
            super().__init__()
            self.body, self.head = nn.Linear(6, 5), nn.Linear(5, k)

        def forward(self, x):
            return self.head(self.body(x))

    class TimmStyle(HeadNet):
        def __init__(self) -> None:
            super().__init__()
            self.aux = nn.Linear(4, 2)  # registered last, not the classifier

        def get_classifier(self) -> nn.Module:
            return self.head

    torch.manual_seed(0)
    for cls in (HeadNet, TimmStyle):
        src, net = cls(), cls()
        path = tmp_path / f"{cls.__name__}.pt"
        torch.save({"model": src.state_dict(), "model_name": "user:x", "num_classes": 4}, path)
        cfg = load_config(None, {"task": "image_classification", "data.builtin": "digits",
                                 "model.name": "user:x", "model.num_classes": 4,
                                 "model.init": {"from": str(path), "reset_head": True}})  # fmt: skip
        assert head_names(cfg, net) == ("head",)
        fresh = net.head.weight.detach().clone()
        init_from_pretrained(net, cfg)
        assert torch.equal(net.body.weight, src.body.weight)
        assert torch.equal(net.head.weight, fresh)  # reset: not the source's head
    assert head_names(cfg, nn.Sequential(nn.Conv2d(3, 3, 1))) == ("fc",)  # none: the default
    # registered before the blocks, the classifier is the Linear of num_classes outputs
    early = nn.Sequential()
    early.head, early.mlp = nn.Linear(5, 4), nn.Linear(5, 5)
    assert head_names(cfg, early) == ("head",)


class _OwnImageNet(torch.nn.Module):
    """A small image classifier of one's own whose classifier is ``head``."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, 2), torch.nn.ReLU(),
                                        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())  # fmt: skip
        self.head = torch.nn.Linear(4, 10)

    def forward(self, x):
        return self.head(self.body(x))


def test_an_image_network_of_ones_own_predicts_from_python_and_is_named_on_the_cli(
    tmp_path, capsys
):
    """Trained with ``train(cfg, model=...)`` on the digits: ``nlnet.load_model(path, model=)``
    carries the stored image preprocessing, so ``nlnet.predict`` takes image files; the
    command line, which cannot rebuild the class, says how in one line."""
    import nlnet
    from nlnet.cli import main
    from nlnet.engine.config import load_config
    from nlnet.engine.loop import train

    torch.manual_seed(0)
    cfg = load_config(None, {"task": "image_classification", "data.builtin": "digits",
                             "data.size": 16, "optim.max_iters": 1, "train.batch_size": 4,
                             "train.workers": 0, "train.progress": False, "eval.workers": 0,
                             "output_dir": str(tmp_path / "run")})  # fmt: skip
    ckpt = train(cfg, model=_OwnImageNet())["checkpoint"]
    model = nlnet.load_model(ckpt, model=_OwnImageNet())
    assert isinstance(model.nlnet_transform, nlnet.ImageTransform)
    image = tmp_path / "digit.png"
    from PIL import Image

    Image.fromarray(np.full((12, 12, 3), 200, np.uint8)).save(image)
    [pred] = nlnet.predict(model, [image])
    assert pred.scores.shape == (10,) and len(pred.top(2)) == 2
    capsys.readouterr()
    assert main(["predict", str(image), "--checkpoint", str(ckpt)]) == 2
    err = capsys.readouterr().err
    assert "holds a network of your own class" in err and "model=YourNet" in err
