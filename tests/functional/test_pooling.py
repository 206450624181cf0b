"""nlnet's max pooling equals PyTorch's (values and gradients, ties included) in 1D/2D/3D."""

import math

import pytest
import torch
import torch.nn.functional as F

from nlnet.functional.pooling import max_pool

POOLS = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
CASES = [
    ((2, 3, 9), (2,)),
    ((2, 3, 7, 9), (2, 2)),
    ((2, 3, 6, 6), (3, 2)),
    ((2, 3, 3, 5, 7), (1, 2, 2)),
    ((2, 3, 4, 6, 6), (2, 2, 3)),
]


@pytest.mark.parametrize("shape,kernel", CASES, ids=[str(k) for _, k in CASES])
@pytest.mark.parametrize("ties", [False, True], ids=["random", "ties"])
def test_values_and_gradients_equal_torch_max_pool(shape, kernel, ties):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=torch.float64)
    if ties:  # post-ReLU maps: many equal zeros in a window (the first one gets the gradient)
        x = x.relu().round()
    pool = POOLS[len(kernel)]
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    ours, theirs = max_pool(a, kernel), pool(b, kernel, kernel)
    assert torch.equal(ours, theirs)
    grad = torch.randn_like(ours)
    ours.backward(grad)
    theirs.backward(grad)
    assert torch.equal(a.grad, b.grad)
    with torch.no_grad():
        assert torch.equal(max_pool(x, kernel), pool(x, kernel, kernel))


def test_non_finite_values_and_trivial_kernels():
    x = torch.randn(1, 2, 4, 4)
    x[0, 0, 1, 1], x[0, 1, 2, 3] = math.nan, -math.inf
    torch.testing.assert_close(max_pool(x, (2, 2)), F.max_pool2d(x, 2, 2), equal_nan=True)
    assert max_pool(x, (1, 1)) is x
    assert max_pool(x[:, :, :0], (2, 2)).shape == (1, 2, 0, 2)


STEM_POOLS = [  # (shape, kernel, stride, padding): Table 1's pool1 / pool2, the 1x3x3 stem pool
    ((2, 16, 4, 28, 28), (3, 3, 3), (2, 2, 2), (1, 1, 1)),
    ((1, 16, 5, 29, 31), (1, 3, 3), (1, 2, 2), (0, 1, 1)),
    ((2, 32, 5, 16, 16), (3, 1, 1), (2, 1, 1), (1, 0, 0)),
    ((1, 16, 5, 31, 30), (2, 3, 3), (2, 2, 2), (0, 0, 0)),  # the released code's, unpadded
]


def test_stem_max_pool_fast_path_gradcheck(monkeypatch):
    import nlnet.functional.pooling as P

    monkeypatch.setattr(P, "FAST_MIN_NUMEL", 0)  # the channels-last path on a float64 map
    x = torch.randn(1, 16, 3, 5, 5, dtype=torch.float64, requires_grad=True)
    fn = lambda t: P.max_pool3d(t, 3, 2, 1)  # noqa: E731  (ints, as nn.MaxPool3d takes them)
    assert torch.equal(fn(x), F.max_pool3d(x, 3, 2, 1))
    assert torch.autograd.gradcheck(fn, (x,))
    assert torch.autograd.gradgradcheck(fn, (x,))


@pytest.mark.parametrize("shape,kernel,stride,padding", STEM_POOLS)
@pytest.mark.parametrize("data", ["random", "ties", "nan"])
def test_stem_max_pool_is_torchs_bit_for_bit(shape, kernel, stride, padding, data):
    from nlnet.functional.pooling import FAST_MIN_NUMEL, _ChannelsLastMaxPool3d, max_pool3d

    assert math.prod(shape) >= FAST_MIN_NUMEL  # the fast path runs
    torch.manual_seed(0)
    x = torch.randn(shape)
    if data == "ties":  # post-ReLU maps: windows of equal zeros
        x = x.relu().round()
    if data == "nan":
        x[0, 0, 1, 2, 3], x[0, 1, 0, 0, 0] = math.nan, -math.inf
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    applied = []
    original = _ChannelsLastMaxPool3d.apply
    try:
        _ChannelsLastMaxPool3d.apply = lambda *args: applied.append(1) or original(*args)
        ours = max_pool3d(a, kernel, stride, padding)
    finally:
        _ChannelsLastMaxPool3d.apply = original
    theirs = F.max_pool3d(b, kernel, stride, padding)
    assert applied and ours.is_contiguous()
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0, equal_nan=True)
    grad = torch.randn_like(ours)
    ours.backward(grad)
    theirs.backward(grad)
    assert torch.equal(a.grad, b.grad)
    with torch.no_grad():  # inference: the channels-last kernel without the index bookkeeping
        fast = max_pool3d(x, kernel, stride, padding)
    assert fast.is_contiguous()
    torch.testing.assert_close(fast, theirs.detach(), rtol=0, atol=0, equal_nan=True)


def test_stem_max_pool_falls_back_where_torch_is_fast_or_traced():
    from nlnet.layers.pooling import MaxPool3d

    pool, ref = MaxPool3d(3, 2, 1), torch.nn.MaxPool3d(3, 2, 1)
    assert repr(pool) == repr(ref) and pool.state_dict() == {}
    cl = torch.randn(1, 16, 4, 32, 32).contiguous(memory_format=torch.channels_last_3d)
    assert pool(cl).is_contiguous(memory_format=torch.channels_last_3d)  # PyTorch's own kernel
    assert torch.equal(pool(cl), ref(cl))
    ceil = MaxPool3d(3, 2, 1, ceil_mode=True)
    x = torch.randn(1, 16, 5, 33, 33)
    assert torch.equal(ceil(x), F.max_pool3d(x, 3, 2, 1, ceil_mode=True))
    graph = torch.fx.symbolic_trace(torch.nn.Sequential(pool)).graph  # traces: no branch on x
    assert any(n.target is F.max_pool3d for n in graph.nodes)
