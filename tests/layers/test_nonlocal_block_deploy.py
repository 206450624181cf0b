"""Deployment: the block traces with torch.fx, exports with torch.export and compiles with
torch.compile(fullgraph=True) (no graph breaks), for every instantiation, 1D/2D/3D and mode."""

import pytest
import torch

from nlnet.layers.nonlocal_block import NonLocal3d

SIZES = {1: (8,), 2: (4, 6), 3: (4, 4, 6)}


def test_symbolic_trace_of_the_default_video_block():
    block = NonLocal3d(8)
    traced = torch.fx.symbolic_trace(block)
    x = torch.randn(2, 8, 2, 4, 4)
    torch.testing.assert_close(traced(x), block(x))
    with pytest.raises(ValueError, match="in_channels=8"):  # the checks run in the traced graph
        traced(torch.randn(2, 7, 2, 4, 4))
    # the eager block returns an empty output for an empty grid; the trace has no such branch
    assert block(torch.randn(2, 8, 2, 0, 4)).shape == (2, 8, 2, 0, 4)
    with pytest.raises(ValueError, match="empty grid .* torch.fx-traced"):
        traced(torch.randn(2, 8, 2, 0, 4))


@pytest.mark.parametrize("impl", ["auto", "fast", "reference"])
def test_fx_trace_matches_eager_on_every_path(nl_config, make_nl_block, impl):
    dim, inst, mode = nl_config
    extra = [{}, {"temporal_groups": 2}] if dim == 3 else [{}]
    for kw in extra:
        block = make_nl_block(dim, inst, mode, impl=impl, **kw).eval()
        traced = torch.fx.symbolic_trace(block)
        x = torch.randn(2, 4, *SIZES[dim])
        torch.testing.assert_close(traced(x), block(x))
        y = torch.randn(3, 4, *(s + 2 for s in SIZES[dim]))  # sizes are read at run time
        torch.testing.assert_close(traced(y), block(y))


def test_torch_export_matches_eager(nl_config, make_nl_block):
    dim, inst, mode = nl_config
    block = make_nl_block(dim, inst, mode, **({"temporal_groups": 2} if dim == 3 else {})).eval()
    x = torch.randn(2, 4, *SIZES[dim])
    exported = torch.export.export(block, (x,))
    torch.testing.assert_close(exported.module()(x), block(x))


@pytest.mark.parametrize(
    "dim,inst,mode,kw",
    [(3, "embedded_gaussian", "time", {}), (2, "concatenation", "spacetime", {"impl": "fast"})],
)
def test_compile_fullgraph_inference_has_no_graph_break(make_nl_block, dim, inst, mode, kw):
    torch._dynamo.reset()
    block = make_nl_block(dim, inst, mode, **kw).eval()
    # fullgraph=True raises on any graph break; the eager backend keeps the test fast
    compiled = torch.compile(block, fullgraph=True, backend="eager")
    x = torch.randn(2, 4, *SIZES[dim])
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), block(x))
    torch._dynamo.reset()
