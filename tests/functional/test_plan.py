"""The block's planner: one table row per instantiation, one pure plan per input shape."""

from __future__ import annotations

import pytest
import torch

from nlnet.functional.instantiations import FORMS, INSTANTIATIONS, form
from nlnet.functional.nonlocal_op import SOFTMAX_FORMS, choose_impl
from nlnet.functional.plan import PATHS, plan_non_local
from nlnet.functional.reassociated import BILINEAR_FORMS, REASSOCIATED_FORMS
from nlnet.layers.nonlocal_block import NonLocal2d, NonLocal3d


def test_one_table_row_per_instantiation_of_section_3_2():
    assert INSTANTIATIONS == (
        "gaussian", "embedded_gaussian", "dot_product", "concatenation", "euclidean"
    )  # fmt: skip
    assert [FORMS[n].equation for n in INSTANTIATIONS] == [
        "Eq. 2", "Eq. 3", "Eq. 4", "Eq. 5", "Sec. 3.2"
    ]  # fmt: skip
    assert SOFTMAX_FORMS == ("gaussian", "embedded_gaussian", "euclidean")
    assert BILINEAR_FORMS == ("embedded_gaussian", "dot_product")
    assert REASSOCIATED_FORMS == ("gaussian", "embedded_gaussian", "dot_product")
    assert [n for n in INSTANTIATIONS if not form(n).embedded] == ["gaussian", "euclidean"]
    with pytest.raises(ValueError, match="instantiation must be one of"):
        form("embedded")


def test_the_plan_is_a_pure_cached_function_of_the_shape():
    args = ("embedded_gaussian", (4, 14, 14), (1, 2, 2), 512, 256)
    a = plan_non_local(*args, training=True)
    assert a is plan_non_local(*args, training=True)  # computed once per shape
    assert a.path == "reassociated" and a.reassociate == (True, True)  # N' = 196 < 3C/4
    big = plan_non_local("embedded_gaussian", (4, 56, 56), (1, 2, 2), 512, 256, training=True)
    assert big.path == "tokens" and big.n == 4 * 56 * 56 and big.n_keys == 4 * 28 * 28
    assert big.op_impl == choose_impl(
        "embedded_gaussian", big.n, big.n_keys, 256, 256, device=torch.device("cpu"), training=True
    )


@pytest.mark.parametrize(
    ("kwargs", "path", "sizes"),
    [
        ({"impl": "reference"}, "reference", (None, None)),
        ({"instantiation": "concatenation"}, "scores", (4 * 8 * 8, 4 * 4 * 4)),
        ({"instantiation": "concatenation", "pool_position": "after"}, "tokens", (256, 64)),
        ({"mode": "space"}, "grouped", (8 * 8, 4 * 4)),
        ({"mode": "time"}, "grouped", (4, 4)),
        ({"temporal_groups": 2, "impl": "fast"}, "tokens", (2 * 8 * 8, 2 * 4 * 4)),
    ],
)
def test_paths_and_attention_sizes(kwargs, path, sizes):
    opts = {"instantiation": "embedded_gaussian", **kwargs}
    plan = plan_non_local(opts.pop("instantiation"), (4, 8, 8), (1, 2, 2), 8, 4, **opts)
    assert plan.path == path and plan.path in PATHS and (plan.n, plan.n_keys) == sizes


def test_the_layer_applies_the_plan_and_a_trace_gets_the_size_free_one():
    block = NonLocal3d(8, instantiation="concatenation")
    x = torch.randn(1, 8, 4, 8, 8)
    assert block.plan(x) is plan_non_local(
        "concatenation", (4, 8, 8), (1, 2, 2), 8, 4, training=True
    )
    size_free = plan_non_local("dot_product", None, (2, 2), 8, 4)
    assert (size_free.path, size_free.op_impl, size_free.n) == ("tokens", "auto", None)
    traced = torch.fx.symbolic_trace(NonLocal2d(8, instantiation="dot_product").eval())
    assert traced(torch.randn(1, 8, 6, 6)).shape == (1, 8, 6, 6)
