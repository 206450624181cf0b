"""The one partial load (:func:`nlnet.models.loading.load_partial`): new layers keep their
initialisation, everything else must fit; no other ``strict=False`` in the package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from nlnet.models import create_model
from nlnet.models.loading import load_partial

PACKAGE = Path(__file__).resolve().parents[2] / "nlnet"


def test_a_plain_network_loads_into_the_one_with_a_block_which_stays_the_identity():
    torch.manual_seed(0)
    plain = create_model("c2d_tiny", num_classes=3, width=4).eval()
    with_block = create_model("c2d_tiny_nl1", num_classes=3, width=4).eval()
    (path,) = [n for n, _ in with_block.named_modules() if n.endswith(".non_local")]
    report = load_partial(with_block, plain.state_dict(), [path])
    assert report.kept and all(k.startswith(path + ".") for k in report.kept)
    assert sorted(report.loaded) == sorted(plain.state_dict()) and not report.unused
    x = torch.rand(2, 3, 4, 32, 32)
    torch.testing.assert_close(with_block(x), plain(x), rtol=0, atol=0)


def test_what_does_not_fit_is_one_line_naming_the_source():
    model = create_model("c2d_tiny_nl1", num_classes=3, width=4)
    state = model.state_dict()
    cases = (
        ({k: v for k, v in state.items() if k != "conv1.weight"}, "missing conv1.weight"),
        ({**state, "fc.weight": torch.zeros(5, 32)}, "fc.weight has shape (5, 32)"),
        ({**state, "extra.weight": torch.zeros(1)}, "unexpected extra.weight"),
    )
    for bad, message in cases:
        with pytest.raises(
            ValueError, match=re.escape(f"caffe2: the weights do not fit this model ({message}")
        ):
            load_partial(model, bad, what="caffe2")
    # a head of another size under keep stays fresh; extra keys may be allowed
    fresh = load_partial(model, {**state, "fc.weight": torch.zeros(5, 32)}, ["fc"])
    assert fresh.kept == ["fc.weight"] and not fresh.complete
    assert load_partial(model, {**state, "extra.weight": torch.zeros(1)}, extra_ok=True).complete


def test_the_package_has_one_partial_load():
    sites = [f"{p.relative_to(PACKAGE)}:{n}" for p in sorted(PACKAGE.rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if "strict=False" in line and not line.lstrip().startswith(("#", "a ", "``"))
             and "load_state_dict" in line]  # fmt: skip
    assert sites == ["models/loading.py:" + sites[0].split(":")[1]] and len(sites) == 1, sites
