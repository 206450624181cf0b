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
