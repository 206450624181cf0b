"""The Euclidean Gaussian of Sec. 3.2 (Wang et al., CVPR 2018): f = exp(-||x_i - x_j||^2), C = sum_j f.

Checked against ``softmax(-||x_i - x_j||^2) g`` written here from the pairwise differences (never
the ``||x_i||^2 + ||x_j||^2 - 2 x_i^T x_j`` expansion the library uses), in float64.
"""

import pytest
import torch

from nlnet.analysis.cost import model_cost
from nlnet.functional.instantiations import form
from nlnet.functional.nonlocal_op import choose_impl, non_local, pairwise_weights
from nlnet.functional.plan import plan_non_local
from nlnet.layers.nonlocal_block import NonLocal2d


def _independent(theta, phi, g, s):
    diff = theta.unsqueeze(-2) - phi.unsqueeze(-3)  # (..., N, N', d)
    dist = (diff * diff).sum(-1)
    return torch.softmax(-s * dist, dim=-1) @ g


@pytest.mark.parametrize("impl", ["reference", "fast", "auto"])
@pytest.mark.parametrize("scale", [False, True, 0.3])
def test_equals_the_softmax_of_minus_squared_distances(impl, scale):
    torch.manual_seed(0)
    theta = torch.randn(2, 7, 5, dtype=torch.float64)
    phi = torch.randn(2, 4, 5, dtype=torch.float64) * 2 + 1  # keys far from the origin
    g = torch.randn(2, 4, 3, dtype=torch.float64)
    s = {False: 1.0, True: 5**-0.5, 0.3: 0.3}[scale]
    y = non_local(theta, phi, g, "euclidean", scale=scale, impl=impl)
    torch.testing.assert_close(y, _independent(theta, phi, g, s), rtol=1e-10, atol=1e-12)


def test_weights_and_heads():
    torch.manual_seed(1)
    theta = torch.randn(2, 3, 6, 4, dtype=torch.float64)
    phi = torch.randn(2, 3, 5, 4, dtype=torch.float64)
    w = pairwise_weights(theta, phi, "euclidean", scale=False)
    diff = theta.unsqueeze(-2) - phi.unsqueeze(-3)
    torch.testing.assert_close(w, torch.softmax(-(diff**2).sum(-1), -1))
    # differs from the dot-product Gaussian of Eq. 2 (the ||x_j||^2 term does not cancel)
    assert not torch.allclose(w, pairwise_weights(theta, phi, "gaussian", scale=False))


def test_mask_zeroes_pairs_and_keeps_rows_normalised():
    torch.manual_seed(2)
    theta, phi = torch.randn(5, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    mask = torch.rand(5, 4) > 0.4
    mask[1:, 0] = True  # every other row has a key
    mask[0] = False  # a row without keys: zero weights, no NaN
    w = pairwise_weights(theta, phi, "euclidean", scale=False, mask=mask)
    assert (w[~mask] == 0).all()
    torch.testing.assert_close(w[1:].sum(-1), torch.ones(4, dtype=w.dtype))
    assert torch.equal(w[0], torch.zeros(4, dtype=w.dtype))
    # on the allowed keys: the softmax of minus the squared distances over those keys only
    diff = theta.unsqueeze(-2) - phi.unsqueeze(-3)
    logits = (-(diff**2).sum(-1)).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(w[1:], torch.softmax(logits[1:], -1))


@pytest.mark.parametrize("impl", ["reference", "fast"])
def test_gradcheck_float64(impl):
    torch.manual_seed(3)
    theta = torch.randn(1, 4, 3, dtype=torch.float64, requires_grad=True)
    phi = torch.randn(1, 3, 3, dtype=torch.float64, requires_grad=True)
    g = torch.randn(1, 3, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda a, b, c: non_local(a, b, c, "euclidean", impl=impl), (theta, phi, g)
    )


def test_block_paths_agree_and_gradcheck():
    torch.manual_seed(4)
    block = NonLocal2d(4, instantiation="euclidean").double()
    with torch.no_grad():
        block.norm.weight.normal_()
    x = torch.randn(2, 4, 6, 6, dtype=torch.float64)
    outs = {}
    for impl in ("reference", "fast", "auto"):
        block.impl = impl
        outs[impl] = block(x)
    torch.testing.assert_close(outs["fast"], outs["reference"])
    torch.testing.assert_close(outs["auto"], outs["reference"])
    # the block's y is the independent formula on the raw features and the pooled keys
    _, attn = block(x, return_attention=True)
    tokens = x.flatten(2).transpose(1, 2)
    keys = torch.nn.functional.max_pool2d(x, 2).flatten(2).transpose(1, 2)
    diff = tokens.unsqueeze(-2) - keys.unsqueeze(-3)
    torch.testing.assert_close(attn, torch.softmax(-(diff**2).sum(-1) / 2.0, -1))  # 1/sqrt(C=4)
    block.impl = "reference"
    small = torch.randn(1, 4, 2, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(block, (small,))


def test_planner_and_form():
    f = form("euclidean")
    assert f.softmax and not f.embedded and not f.reassociates and f.fast_path == "sdpa"
    # no re-association (the logits are not a bilinear form): the token path, the op decides
    plan = plan_non_local("euclidean", (8, 56, 56), (1, 2, 2), 64, 32, training=True)
    assert plan.path == "tokens" and plan.reassociate == (False, False)
    assert plan.op_impl == choose_impl(
        "euclidean", 8 * 56 * 56, 8 * 28 * 28, 64, 32, device=torch.device("cpu"), training=True
    )
    assert plan_non_local("euclidean", (4, 4, 4), (1, 2, 2), 8, 4, mode="time").path == "grouped"


def test_cost_counts_the_euclidean_block():
    gauss = model_cost("c2d_r50_nl5", (8, 112, 112), instantiation="gaussian")
    eucl = model_cost("c2d_r50_nl5", (8, 112, 112), instantiation="euclidean")
    assert eucl.params == gauss.params  # no theta/phi either: f on x itself
    assert len(eucl.non_local) == 5
    for e, g in zip(eucl.non_local, gauss.non_local):
        # the fused kernel sees one more query/key channel ([2x, 1], [x, -||x||^2])
        assert g.macs < e.macs < 1.01 * g.macs
