"""The non-local operation: fast paths against the explicit reference, gradients, memory, errors."""

import pytest
import torch

from nlnet.functional.nonlocal_op import INSTANTIATIONS, choose_impl, non_local, pairwise_weights


@pytest.fixture(autouse=True)
def _seeded():
    """Each test starts from the same random state (whatever ran before it)."""
    torch.manual_seed(0)


def _tokens(n=37, n_keys=23, d=6, dv=5, lead=(2,), dtype=torch.float64, requires_grad=False):
    theta = torch.randn(*lead, n, d, dtype=dtype, requires_grad=requires_grad)
    phi = torch.randn(*lead, n_keys, d, dtype=dtype, requires_grad=requires_grad)
    g = torch.randn(*lead, n_keys, dv, dtype=dtype, requires_grad=requires_grad)
    w_f = torch.randn(2 * d, dtype=dtype, requires_grad=requires_grad)
    return theta, phi, g, w_f


@pytest.mark.parametrize("instantiation", INSTANTIATIONS)
@pytest.mark.parametrize("lead", [(2,), (2, 3)], ids=["batch", "batch-heads"])
@pytest.mark.parametrize("dv", [5, 6, 9])
@pytest.mark.parametrize("scale", [True, False])
def test_fast_equals_reference_forward_and_grad(instantiation, lead, dv, scale):
    inputs = _tokens(lead=lead, dv=dv, requires_grad=True)
    outs, grads = {}, {}
    for impl in ("fast", "reference"):
        y = non_local(*inputs[:3], instantiation, scale=scale, w_f=inputs[3], impl=impl)
        outs[impl] = y
        grads[impl] = torch.autograd.grad(
            (y * torch.linspace(-1, 1, y.numel()).view_as(y).double()).sum(),
            inputs,
            allow_unused=True,
        )
    torch.testing.assert_close(outs["fast"], outs["reference"], rtol=1e-10, atol=1e-10)
    for gf, gr in zip(grads["fast"], grads["reference"]):
        if gr is None:  # w_f is unused by the other instantiations
            assert gf is None
        else:
            torch.testing.assert_close(gf, gr, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("instantiation", INSTANTIATIONS)
def test_gradcheck_fast_path(instantiation):
    inputs = _tokens(n=7, n_keys=5, d=3, dv=2, lead=(1,), requires_grad=True)

    def fn(theta, phi, g, w_f):
        return non_local(theta, phi, g, instantiation, w_f=w_f, impl="fast")

    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)


def test_reference_weights_definition():
    theta, phi, g, w_f = _tokens(lead=(1,))
    # Eq. 3 with C = sum_j f, unscaled: rows sum to 1 and equal exp(.)/sum exp(.)
    w = pairwise_weights(theta, phi, "embedded_gaussian", scale=False)
    logits = theta @ phi.transpose(-1, -2)
    torch.testing.assert_close(w, logits.exp() / logits.exp().sum(-1, keepdim=True))
    # Eq. 4, C = N'
    torch.testing.assert_close(pairwise_weights(theta, phi, "dot_product"), logits / phi.shape[-2])
    # Eq. 5 written out with an explicit concatenation per pair
    d = theta.shape[-1]
    cat = torch.cat(
        [
            theta[0].unsqueeze(1).expand(-1, phi.shape[1], -1),
            phi[0].unsqueeze(0).expand(theta.shape[1], -1, -1),
        ],
        dim=-1,
    )
    f = torch.relu(cat @ w_f) / phi.shape[1]
    torch.testing.assert_close(pairwise_weights(theta, phi, "concatenation", w_f=w_f)[0], f)
    assert d == 6


def test_scale_default_is_inverse_sqrt_d():
    theta, phi, g, _ = _tokens(lead=(1,))
    scaled = pairwise_weights(theta, phi, "embedded_gaussian", scale=True)
    manual = pairwise_weights(theta / theta.shape[-1] ** 0.5, phi, "embedded_gaussian", scale=False)
    torch.testing.assert_close(scaled, manual)


def test_concatenation_edge_cases_all_negative_and_ties():
    theta, phi, g, w_f = _tokens(lead=(1,))
    d = theta.shape[-1]
    w = torch.zeros(2 * d, dtype=torch.float64)
    w[0], w[d] = 1.0, 1.0
    theta = theta.clone()
    phi = phi.clone()
    theta[..., 0] = -100.0  # every pair non-positive: y must be exactly 0
    y = non_local(theta, phi, g, "concatenation", w_f=w, impl="fast")
    assert torch.count_nonzero(y) == 0
    theta[..., 0] = 0.0
    phi[..., :5, 0] = 0.0  # exact ties at the ReLU kink
    torch.testing.assert_close(
        non_local(theta, phi, g, "concatenation", w_f=w, impl="fast"),
        non_local(theta, phi, g, "concatenation", w_f=w, impl="reference"),
    )


@pytest.mark.parametrize("instantiation", INSTANTIATIONS)
def test_permutation_equivariance(instantiation):
    theta, phi, g, w_f = _tokens(n=19, n_keys=19, lead=(1,))
    x_perm = torch.randperm(19)
    y = non_local(theta, phi, g, instantiation, w_f=w_f)
    # Permuting the positions (queries, keys and values alike) permutes the output.
    y_p = non_local(theta[:, x_perm], phi[:, x_perm], g[:, x_perm], instantiation, w_f=w_f)
    torch.testing.assert_close(y_p, y[:, x_perm])


@pytest.mark.parametrize("instantiation", INSTANTIATIONS)
@pytest.mark.parametrize("d_v", [8, 4, 16])  # gaussian in a block: d = C, d_v = C / 2
def test_fast_path_never_builds_the_pairwise_matrix(instantiation, d_v, max_numel):
    n, d = 256, 8
    theta = torch.randn(2, d, n).transpose(1, 2).requires_grad_()  # transposed view on purpose
    phi = torch.randn(2, d, n).transpose(1, 2).requires_grad_()
    g = torch.randn(2, d_v, n).transpose(1, 2).requires_grad_()
    w_f = torch.randn(2 * d, requires_grad=True)
    with max_numel() as rec:
        y = non_local(theta, phi, g, instantiation, w_f=w_f, impl="fast")
        y.sum().backward()
    assert rec.max_numel < n * n / 4, f"{instantiation}: a tensor of {rec.max_numel} elements"
    with max_numel() as rec_ref:
        non_local(theta, phi, g, instantiation, w_f=w_f, impl="reference").sum().backward()
    assert rec_ref.max_numel >= 2 * n * n  # the reference does build it


def test_mask_restricts_and_renormalises():
    theta, phi, g, w_f = _tokens(n=6, n_keys=6, lead=(1,))
    mask = torch.eye(6, dtype=torch.bool) | torch.eye(6, dtype=torch.bool).roll(1, 0)
    for inst in INSTANTIATIONS:
        y, w = non_local(theta, phi, g, inst, w_f=w_f, mask=mask, return_attention=True)
        assert torch.all(w[:, ~mask] == 0)
        if inst in ("gaussian", "embedded_gaussian"):
            torch.testing.assert_close(w.sum(-1), torch.ones(1, 6, dtype=torch.float64))
        torch.testing.assert_close(y, w @ g)


@pytest.mark.parametrize("instantiation", INSTANTIATIONS)
def test_all_masked_query_gives_zero_output_not_nan(instantiation):
    theta, phi, g, w_f = _tokens(n=5, n_keys=4, lead=(1,), requires_grad=True)
    mask = torch.ones(5, 4, dtype=torch.bool)
    mask[2] = False  # query 2 may use no key at all
    y, w = non_local(theta, phi, g, instantiation, w_f=w_f, mask=mask, return_attention=True)
    assert torch.isfinite(y).all() and torch.isfinite(w).all()
    assert torch.count_nonzero(y[:, 2]) == 0 and torch.count_nonzero(w[:, 2]) == 0
    y.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (theta, phi, g))


def test_additive_float_mask_equals_boolean_mask():
    theta, phi, g, _ = _tokens(n=6, n_keys=6, lead=(1,))
    allowed = torch.rand(6, 6) > 0.4
    allowed[:, 0] = True
    additive = torch.zeros(6, 6, dtype=torch.float64).masked_fill(~allowed, float("-inf"))
    torch.testing.assert_close(
        non_local(theta, phi, g, mask=additive), non_local(theta, phi, g, mask=allowed)
    )


def test_choose_impl_by_size():
    cpu = torch.device("cpu")
    assert (
        choose_impl("embedded_gaussian", 784, 784, 512, 512, device=cpu, training=True)
        == "reference"
    )
    assert (
        choose_impl("embedded_gaussian", 784, 784, 512, 512, device=cpu, training=False)
        == "reference"
    )
    assert (
        choose_impl("embedded_gaussian", 3136, 3136, 256, 256, device=cpu, training=False) == "fast"
    )
    # 56x56 with pooled keys: training keeps the explicit matrix (4 vs 5 products in backward),
    # inference takes the chunked explicit matmuls; without pooling training takes flash
    eg = lambda n, m, t: choose_impl("embedded_gaussian", n, m, 256, 256, device=cpu, training=t)  # noqa: E731
    assert (eg(3136, 784, True), eg(3136, 784, False)) == ("reference", "fast")
    assert eg(3136, 3136, True) == "fast"
    cuda = torch.device("cuda")
    assert (
        choose_impl("embedded_gaussian", 784, 784, 512, 512, device=cuda, training=True) == "fast"
    )
    assert (
        choose_impl("embedded_gaussian", 12544, 12544, 512, 512, device=cpu, training=True)
        == "fast"
    )
    assert (
        choose_impl("gaussian", 12544, 12544, 1024, 512, device=cpu, training=True) == "reference"
    )
    assert choose_impl("gaussian", 25088, 25088, 1024, 512, device=cpu, training=True) == "fast"
    assert choose_impl("dot_product", 6272, 6272, 512, 512, device=cpu, training=True) == "fast"
    assert choose_impl("dot_product", 49, 49, 512, 512, device=cpu, training=True) == "reference"


def test_bad_inputs_name_the_argument():
    theta, phi, g, w_f = _tokens(lead=(1,))
    with pytest.raises(ValueError, match="instantiation"):
        non_local(theta, phi, g, "cosine")
    with pytest.raises(ValueError, match="phi and g"):
        non_local(theta, phi, g[:, :-1], "embedded_gaussian")
    with pytest.raises(ValueError, match="theta and phi"):
        non_local(theta[..., :-1], phi, g, "embedded_gaussian")
    with pytest.raises(ValueError, match="w_f"):
        non_local(theta, phi, g, "concatenation")
    with pytest.raises(ValueError, match="w_f"):
        non_local(theta, phi, g, "concatenation", w_f=w_f[:-1])
    with pytest.raises(TypeError, match="floating"):
        non_local(theta.long(), phi, g)
    with pytest.raises(TypeError, match="mask"):
        non_local(theta, phi, g, "dot_product", mask=torch.ones(37, 23))
    with pytest.raises(ValueError, match="mask"):
        non_local(theta, phi, g, mask=torch.ones(36, 23, dtype=torch.bool))
    with pytest.raises(ValueError, match="impl"):
        non_local(theta, phi, g, impl="flash")
    with pytest.raises(ValueError, match="scale"):
        non_local(theta, phi, g, scale=-1.0)
