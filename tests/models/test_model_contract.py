"""timm's model contract over the registry, the plugin entry points and the one name filter.

Every registered classification model has ``feature_info``, ``forward_intermediates``,
``forward_head(pre_logits=)``, ``get_classifier`` and ``reset_classifier``
(:mod:`nlnet.models.features`), built narrow (``ModelCfg.test_overrides``) on the CPU.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys

import pytest
import torch
from torch import nn

import nlnet.models.registry as registry
from nlnet.models.features import feature_take_indices
from nlnet.models.registry import create_model, get_model_entry, list_models, name_matches

CLASSIFICATION = ("video_classification", "image_classification")

ALL = list_models()
CLASSIFIERS = [n for n in ALL if get_model_entry(n).default_cfg.task in CLASSIFICATION]


def _tiny(name: str, num_classes: int = 5) -> tuple[nn.Module, torch.Tensor]:
    cfg = get_model_entry(name).default_cfg
    torch.manual_seed(0)
    model = create_model(name, num_classes=num_classes, **cfg.test_overrides).eval()
    size = cfg.test_input_size or cfg.input_size
    if cfg.test_input_size is None:  # 64 x 64 frames keep res5 at 2 x 2
        size = (3, 8, 64, 64) if cfg.input_kind == "clip" else (3, 64, 64)
    return model, torch.randn(2, *size)


def test_every_classification_family_is_checked():
    families = {get_model_entry(n).default_cfg.family for n in CLASSIFIERS}
    assert {"slowfast"} < families  # the two-pathway model too, no exemption
    assert len(CLASSIFIERS) > 30


@pytest.mark.parametrize("name", CLASSIFIERS)
def test_timm_contract(name):
    model, x = _tiny(name)
    cfg = get_model_entry(name).default_cfg
    info = model.feature_info
    assert info and all(set(f) == {"num_chs", "reduction", "module"} for f in info)
    with torch.no_grad():
        feats = model.forward_features(x)
        final, maps = model.forward_intermediates(x)
        pooled = model.forward_head(feats, pre_logits=True)
        logits = model.forward_head(feats)
        out = model(x)
    torch.testing.assert_close(final, feats)
    torch.testing.assert_close(out, logits)
    assert len(maps) == len(info)
    spatial = x.shape[-2:]
    for f, m in zip(info, maps):
        model.get_submodule(f["module"])  # a real module path
        assert m.shape[:2] == (x.shape[0], f["num_chs"]), f
        assert m.dim() == x.dim(), f  # channels-first maps (B, C, *grid)
        assert tuple(m.shape[-2:]) == tuple(s // f["reduction"] for s in spatial), f
    assert model.get_classifier() is model.get_submodule(cfg.classifier[0])
    assert pooled.shape == (x.shape[0], model.get_classifier().in_features)
    torch.testing.assert_close(model.get_classifier()(pooled), logits)
    _check_indices_and_reset(model, x, maps)


def _check_indices_and_reset(model: nn.Module, x: torch.Tensor, maps: list[torch.Tensor]) -> None:
    """``indices``/``stop_early``/``intermediates_only`` pick from ``maps``; a reset classifier
    has the new size, and none (0 classes) leaves the pooled features."""
    n = len(model.feature_info)
    with torch.no_grad():
        last_two = model.forward_intermediates(x, indices=2, intermediates_only=True)
        first, early = model.forward_intermediates(x, indices=[0], stop_early=True)
    assert len(last_two) == 2
    torch.testing.assert_close(last_two, maps[n - 2 :])
    assert len(early) == 1
    torch.testing.assert_close(early[0], maps[0])
    assert first.shape[0] == x.shape[0]
    model.reset_classifier(3)
    assert model.get_classifier().out_features == 3
    with torch.no_grad():
        assert model(x).shape == (x.shape[0], 3)
    model.reset_classifier(0)  # no classifier: the head returns the pooled features
    with torch.no_grad():
        feats = model.forward_features(x)
        torch.testing.assert_close(model(x), model.forward_head(feats, pre_logits=True))


def test_feature_take_indices_reads_indices_as_timm_does():
    assert feature_take_indices(5) == ([0, 1, 2, 3, 4], 4)
    assert feature_take_indices(5, 2) == ([3, 4], 4)
    assert feature_take_indices(5, [0, -1]) == ([0, 4], 4)
    for bad in (6, 0, [5], [-6], []):
        with pytest.raises(ValueError, match="indices"):
            feature_take_indices(5, bad)


# ---------------------------------------------------------------------------- plugins
PLUGIN = '''
from torch import nn
from nlnet.models.registry import register_model

@register_model(default_cfg={"task": "x", "num_classes": 2, "input_size": (3, 4, 4)})
def fake_plugin_model(**kwargs):
    """A model from a plugin."""
    return nn.Linear(4, kwargs.get("num_classes", 2))
'''


def _plugin(monkeypatch, tmp_path, module: str, source: str, name: str) -> None:
    """``module`` written to ``tmp_path`` (on ``sys.path``) and declared as the one
    ``nlnet.models`` entry point ``name``; the registry reads the entry points afresh."""
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = importlib.metadata.EntryPoint(name, module, registry.ENTRY_POINT_GROUP)
    real = importlib.metadata.entry_points

    def entry_points(**kw):
        if kw.get("group") == registry.ENTRY_POINT_GROUP:
            return importlib.metadata.EntryPoints([ep])
        return real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    monkeypatch.delitem(sys.modules, module, raising=False)


def test_an_entry_point_plugin_registers_models_on_first_lookup(monkeypatch, tmp_path):
    _plugin(monkeypatch, tmp_path, "nlnet_fake_plugin", PLUGIN, "fake")
    try:
        assert "fake_plugin_model" not in registry._REGISTRY  # not before the first lookup
        assert list_models("fake_plugin*") == ["fake_plugin_model"]
        assert create_model("fake_plugin_model", num_classes=3).out_features == 3
        assert get_model_entry("fake_plugin_model").description == "A model from a plugin."
    finally:
        registry._REGISTRY.pop("fake_plugin_model", None)
        sys.modules.pop("nlnet_fake_plugin", None)


def test_a_broken_plugin_is_one_warning_naming_it(monkeypatch, tmp_path):
    source = "import missing_dependency_of_the_plugin\n"
    _plugin(monkeypatch, tmp_path, "nlnet_broken_plugin", source, "broken")
    with pytest.warns(RuntimeWarning, match=r"model plugin 'broken' \(nlnet_broken_plugin") as rec:
        names = list_models()
    assert len(rec) == 1 and "missing_dependency_of_the_plugin" in str(rec[0].message)
    assert "c2d_r50" in names  # the other models are still there


def test_the_tiny_models_are_a_family_of_the_registry_not_a_plugin():
    assert "c2d_tiny_nl1" in list_models("c2d_tiny*") and "i3d_tiny_nl1" in list_models("i3d*")
    assert registry.get_model_entry("c2d_tiny_nl1").builder.__module__ == "nlnet.models.video.tiny"
    eps = importlib.metadata.entry_points(group=registry.ENTRY_POINT_GROUP)
    assert not any(ep.value.startswith("nlnet.") for ep in eps)  # nlnet declares no plugin


# ---------------------------------------------------------------------------- one name filter
@pytest.mark.parametrize("pattern", ["r101", "*r101*", "c2d_r50_nl?", "i3d*nl5", "tiny", "zzz"])
def test_cli_filter_and_find_models_match_the_same_way(pattern, capsys):
    """``nlnet models --filter`` is :func:`find_models` (a bare text: the names containing it);
    :func:`list_models` reads a bare text as the exact name, as timm does."""
    from nlnet.commands import models as command
    from nlnet.models.registry import find_models

    parser = argparse.ArgumentParser()
    command.configure_parser(parser)
    rc = command.main(parser.parse_args(["--filter", pattern, "--no-params"]))
    lines = capsys.readouterr().out.splitlines()
    expected = find_models(pattern)
    assert expected == [n for n in ALL if name_matches(n, pattern, contains=True)]
    if expected:
        assert rc == 0 and [line.split()[0] for line in lines[1:]] == expected
    else:
        assert rc == 1 and lines == [f"no model matches {pattern!r}"]
    assert list_models(pattern) == [n for n in ALL if name_matches(n, pattern)]
    assert name_matches("c2d_r101", "r101", contains=True) and not name_matches("c2d_r101", "r101")
    assert not name_matches("c2d_r101", "r101?", contains=True)


def test_fully_conv_test_head_without_classifier_returns_the_pooled_features():
    """The released fully-convolutional test head (eval mode) needs ``fc``; after
    ``reset_classifier(0)`` the model gives the pooled features instead of failing."""
    model = create_model("c2d_r50", num_classes=4, head="fully_conv").eval()
    x = torch.randn(1, 3, 8, 64, 64)
    model.reset_classifier(0)
    with torch.no_grad():
        torch.testing.assert_close(
            model(x), model.forward_head(model.forward_features(x), pre_logits=True)
        )
