"""Where blocks go and with which options: one ``placement=`` and one ``block=`` for every
model of the registry (:mod:`nlnet.models.placement`, :mod:`nlnet.layers.block_spec`)."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest
import torch

from nlnet.layers.block_spec import BlockOptions
from nlnet.layers.nonlocal_block import NonLocalNd
from nlnet.models import create_model, list_models
from nlnet.models.placement import Placement
from nlnet.models.registry import get_model_entry
from nlnet.models.surgery import non_local_blocks

WITH_BLOCKS = [n for n in list_models() if get_model_entry(n).default_cfg.blocks]


def test_the_record_is_the_blocks_keyword_options_with_its_defaults():
    params = inspect.signature(NonLocalNd.__init__).parameters
    block = {n: p.default for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    record = {f.name: f.default for f in dataclasses.fields(BlockOptions)}
    assert record == block
    options = BlockOptions.of({"mode": "space", "sub_sample": [1, 2, 2]})
    assert options.sub_sample == (1, 2, 2) and hash(options)  # YAML lists; hashable
    assert options.changes() == {"mode": "space", "sub_sample": (1, 2, 2)}
    assert BlockOptions.of(options, reduction=2).changes()["reduction"] == 2


@pytest.mark.parametrize("given, message", [
    ({"instantation": "gaussian"}, "unknown option 'instantation' (did you mean 'instantiation'?)"),
    ({"mode": "spaec"}, "block: mode must be one of"),
    ({"init": "w_z", "gate": "scalar"}, "block: init='w_z' and gate='scalar'"),
    ({"reduction": 2, "inter_channels": 8}, "block: give either inter_channels or reduction"),
    ({"norm_groups": 4}, "block: norm_groups applies to norm='gn' only"),
    ("space", "block: expected a mapping of block options"),
])  # fmt: skip
def test_a_bad_option_is_one_line_before_any_build(given, message):
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        BlockOptions.of(given)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("given, paths", [
    ("nl5", ["layer2.1", "layer2.3", "layer3.1", "layer3.3", "layer3.5"]),
    ({"res3": [1, 3], "res4": 5}, ["layer2.1", "layer2.3", "layer3.5"]),
    ({3: (1,), "layer3": [0]}, ["layer2.1", "layer3.0"]),
    ([[], [1, 3], [1, 3, 5], []], ["layer2.1", "layer2.3", "layer3.1", "layer3.3", "layer3.5"]),
    ("layer4", ["layer4"]),
    (["bottleneck", "head"], ["bottleneck", "head"]),
])  # fmt: skip
def test_every_spelling_of_a_placement_resolves_to_module_paths(given, paths):
    placement = Placement.of(given)
    assert placement.resolve((3, 4, 6, 3)) == paths
    assert Placement.of(placement) is placement and Placement.of(None) is None
    residual = all(re.fullmatch(r"layer\d\.\d+", p) for p in paths)
    assert (placement.stage_indices((3, 4, 6, 3)) is not None) == residual
    for bad in ({"conv3": [1]}, {"res3": [-1]}, ["layer2.1", "layer2.1"], [1, 2], "nl7x"):
        if bad == "nl7x":
            assert Placement.of(bad).paths == ("nl7x",)  # a path: refused by the model
            continue
        with pytest.raises(ValueError, match="placement"):
            Placement.of(bad)


def _sites(model: torch.nn.Module) -> list[str]:
    """Where the model's blocks are, as placement paths (SlowFast: ``res{k}`` stage units)."""
    sites = []
    for name, _ in non_local_blocks(model):
        slowfast = re.fullmatch(r"s(\d)\.pathway0_nonlocal(\d+)", name)
        sites.append(f"res{slowfast[1]}:{slowfast[2]}" if slowfast else
                     name.removesuffix(".non_local"))  # fmt: skip
    return sites


def _as_placement(sites: list[str]) -> object:
    if all(":" in s for s in sites):  # SlowFast: stage -> units
        stages: dict[str, list[int]] = {}
        for s in sites:
            stage, unit = s.split(":")
            stages.setdefault(stage, []).append(int(unit))
        return stages
    return sites


@pytest.mark.parametrize("name", WITH_BLOCKS)
def test_every_model_places_its_blocks_where_placement_says_with_block_options(name):
    """The registry's contract: each model with blocks takes ``placement=`` and ``block=``;
    the blocks built are those the placement names (its own placement given back builds the
    same blocks; none builds none), and ``block=`` reaches all of them."""
    over = dict(get_model_entry(name).default_cfg.test_overrides)
    changes = {"bias": False, "scale": False}
    with torch.device("meta"):
        default = create_model(name, **over)
        sites = _sites(default)
        assert sites, f"{name}: its default_cfg says blocks, none were built"
        again = create_model(name, **{**over, "placement": _as_placement(sites), "block": changes})
        none = create_model(name, **{**over, "placement": None})
    assert _sites(again) == sites and _sites(none) == []
    biases = re.compile(r"\.(theta|phi|g)\.bias$")  # bias=False drops them, nothing else
    assert sorted(n for n, _ in default.named_parameters() if not biases.search(n)) == sorted(
        n for n, _ in again.named_parameters())  # fmt: skip
    blocks = [b for _, b in non_local_blocks(again)]
    assert len(blocks) == len(sites)
    assert all(b.theta is None or b.theta.bias is None for b in blocks), name
    assert all(b.scale is False for b in blocks), name
