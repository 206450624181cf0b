"""Edge cases of the non-local operation: one answer on every path for empty, non-finite and
extreme inputs, and one clear error for each malformed argument."""

import math

import pytest
import torch

from nlnet.functional.nonlocal_op import INSTANTIATIONS, non_local

IMPLS = ("reference", "fast", "auto")


def _tokens(n=7, n_keys=5, d=4, dv=3, lead=(3,), dtype=torch.float64, requires_grad=False):
    gen = torch.Generator().manual_seed(0)
    make = lambda *s: torch.randn(*s, generator=gen, dtype=dtype)  # noqa: E731
    ts = [make(*lead, n, d), make(*lead, n_keys, d), make(*lead, n_keys, dv), make(2 * d)]
    return [t.requires_grad_(requires_grad) for t in ts]


@pytest.mark.parametrize("instantiation", INSTANTIATIONS)
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("lead", [(0,), (2,), (0, 3)], ids=["B=0", "N'=0", "B=0-heads"])
def test_empty_batch_or_no_keys_gives_zero_output_on_every_path(instantiation, impl, lead):
    n_keys = 0 if lead == (2,) else 5
    theta, phi, g, w_f = _tokens(n_keys=n_keys, lead=lead, requires_grad=True)
    y = non_local(theta, phi, g, instantiation, w_f=w_f, impl=impl)
    assert y.shape == (*lead, 7, 3)
    assert torch.count_nonzero(y) == 0 and not torch.isnan(y).any()  # no keys: 0, never 0/0
    y.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (theta, phi, g))


@pytest.mark.parametrize("instantiation", INSTANTIATIONS)
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("n_keys", [0, 5], ids=["N=N'=0", "N=0"])
@pytest.mark.parametrize("grad", [True, False], ids=["train", "no_grad"])
def test_no_query_positions_gives_empty_output_on_every_path(instantiation, impl, n_keys, grad):
    theta, phi, g, w_f = _tokens(n=0, n_keys=n_keys, requires_grad=grad)
    with torch.set_grad_enabled(grad):
        y = non_local(theta, phi, g, instantiation, w_f=w_f, impl=impl)
    assert y.shape == (3, 0, 3)
    if grad:
        y.sum().backward()
        for t in (theta, phi, g):  # zero gradients (N' > 0: keys that no query used)
            assert t.grad is not None and torch.count_nonzero(t.grad) == 0
    _, weights = non_local(theta, phi, g, instantiation, w_f=w_f, return_attention=True)
    assert weights.shape == (3, 0, n_keys)


@pytest.mark.parametrize("instantiation", INSTANTIATIONS)
def test_query_without_allowed_keys_same_value_on_every_path(instantiation):
    theta, phi, g, w_f = _tokens()
    mask = torch.ones(7, 5, dtype=torch.bool)
    mask[3] = False
    ys = [non_local(theta, phi, g, instantiation, w_f=w_f, mask=mask, impl=i) for i in IMPLS[::2]]
    # no keys at all, through the fast path: the same zero
    ys.append(non_local(theta[:, 3:4], phi[:, :0], g[:, :0], instantiation, w_f=w_f, impl="fast"))
    for y in ys[:2]:
        assert torch.count_nonzero(y[:, 3]) == 0
    torch.testing.assert_close(ys[0], ys[1])
    torch.testing.assert_close(ys[2], ys[0][:, 3:4])


@pytest.mark.parametrize("instantiation", INSTANTIATIONS)
@pytest.mark.parametrize("where", ["theta", "phi", "g"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("grad", [True, False], ids=["train", "no_grad"])
def test_non_finite_inputs_propagate_the_same_way_on_every_path(instantiation, where, value, grad):
    clean = _tokens()
    tokens = [t.clone() for t in clean]
    tokens[("theta", "phi", "g").index(where)][1, 2, 1] = value  # sample 1 only
    outs = {}
    for impl in IMPLS:
        with torch.set_grad_enabled(grad):
            ts = [t.clone().requires_grad_(grad) for t in tokens]
            outs[impl] = non_local(*ts[:3], instantiation, w_f=ts[3], impl=impl)
    ref = non_local(*clean[:3], instantiation, w_f=clean[3], impl="reference")
    for impl, y in outs.items():
        assert torch.isnan(y[1]).all(), impl  # the rule: a non-finite token -> its sample is NaN
        torch.testing.assert_close(y[[0, 2]], ref[[0, 2]], msg=impl)  # the others untouched


@pytest.mark.parametrize("instantiation", INSTANTIATIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_large_logits_finite_gradients_on_fast_path_where_reference_has_them(instantiation, dtype):
    finite = {}
    for impl in IMPLS:
        theta, phi, g, w_f = (t.detach() * 1e4 for t in _tokens(n=33, n_keys=29, dtype=dtype))
        ts = [t.requires_grad_() for t in (theta, phi, g, w_f)]
        y = non_local(*ts[:3], instantiation, w_f=ts[3], scale=False, impl=impl)
        (y.square().mean() / 1e8).backward()
        finite[impl] = torch.isfinite(y).all() and all(
            torch.isfinite(t.grad).all() for t in ts if t.grad is not None
        )
    assert finite["reference"]
    assert finite["fast"] and finite["auto"]


def test_mask_must_broadcast_exactly_to_batch_queries_keys():
    theta, phi, g, _ = _tokens(lead=(2,))
    good = [torch.ones(7, 5), torch.ones(2, 7, 5), torch.ones(1, 1, 5), torch.ones(2, 1, 1)]
    for mask in good:
        assert non_local(theta, phi, g, mask=mask.bool()).shape == (2, 7, 3)
    for shape in [(5, 2, 7, 5), (3, 7, 5), (1, 2, 7, 5), (7, 4), (6, 5)]:
        with pytest.raises(ValueError, match=r"mask of shape .* does not broadcast to"):
            non_local(theta, phi, g, mask=torch.ones(shape, dtype=torch.bool))


@pytest.mark.parametrize("scale", [math.inf, math.nan, 0.0, -1.0, "1"])
def test_bad_scale_is_one_clear_error(scale):
    theta, phi, g, _ = _tokens()
    for impl in IMPLS:
        with pytest.raises(ValueError, match="scale must be a bool or a finite positive float"):
            non_local(theta, phi, g, scale=scale, impl=impl)


def test_zero_width_and_bad_w_f_and_mixed_dtypes_are_clear_errors():
    theta, phi, g, w_f = _tokens()
    for inst in INSTANTIATIONS:
        with pytest.raises(ValueError, match="width d >= 1"):
            non_local(theta[..., :0], phi[..., :0], g, inst, w_f=w_f[:0])
    with pytest.raises(TypeError, match=r"w_f must be a torch.Tensor of shape \(8,\)"):
        non_local(theta, phi, g, "concatenation", w_f=w_f.tolist())
    with pytest.raises(ValueError, match=r"w_f must have shape \(2\*d,\) = \(8,\)"):
        non_local(theta, phi, g, "concatenation", w_f=w_f.view(2, 4))
    with pytest.raises(TypeError, match="w_f must have the dtype of theta"):
        non_local(theta, phi, g, "concatenation", w_f=w_f.float())
    with pytest.raises(TypeError, match="theta, phi and g must share one dtype"):
        non_local(theta, phi.float(), g, "dot_product")


@pytest.mark.parametrize("instantiation", ["gaussian", "embedded_gaussian"])
def test_inference_fast_path_chunks_queries_and_matches_reference(instantiation, monkeypatch):
    import nlnet.functional.nonlocal_op as op

    monkeypatch.setattr(op, "CPU_CHUNK_ENTRIES", 16)  # 16 // 5 keys = 3 queries per chunk
    theta, phi, g, _ = _tokens()
    with torch.no_grad():
        fast = non_local(theta, phi, g, instantiation, impl="fast")
    torch.testing.assert_close(fast, non_local(theta, phi, g, instantiation, impl="reference"))
