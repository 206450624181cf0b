"""Tests of nlnet.functional.attention (the "Self-Attention" article, "Formal Definition", "Masks")."""

import math

import pytest
import torch
import torch.nn.functional as F

from nlnet.functional.attention import (
    additive_mask_to_bool,
    attention_scores,
    attention_weights,
    bool_mask_to_additive,
    from_mha_mask,
    masked_softmax,
    scaled_dot_product_attention,
    softmax_jacobian_norm,
    to_mha_mask,
)
from nlnet.functional.masks import causal_mask, local_mask

DT = torch.float64


def _qkv(*batch, n=6, m=6, dk=4, dv=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, n, dk, generator=g, dtype=DT)
    k = torch.randn(*batch, m, dk, generator=g, dtype=DT)
    v = torch.randn(*batch, m, dv, generator=g, dtype=DT)
    return q, k, v


def _naive(q, k, v, bool_mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if bool_mask is not None:
        s = s.masked_fill(~bool_mask, float("-inf"))
    a = torch.softmax(s, dim=-1)
    return a @ v, a


def test_reference_matches_formula_and_sdpa():
    q, k, v = _qkv(2, 3)
    out, w = scaled_dot_product_attention(q, k, v, return_weights=True)
    ref_out, ref_w = _naive(q, k, v)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-12)
    torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-12)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["none", "bool", "float", "bool_broadcast"])
@pytest.mark.parametrize("batch", [(), (2,), (2, 3), (2, 2, 3)])
def test_fast_and_reference_paths_agree(kind, batch):
    q, k, v = _qkv(*batch, n=5, m=7)
    g = torch.Generator().manual_seed(1)
    mask = None
    if kind == "bool":
        mask = torch.rand(*batch, 5, 7, generator=g) > 0.3
    elif kind == "float":
        mask = torch.randn(5, 7, generator=g, dtype=DT)
        mask[0, 2] = float("-inf")
    elif kind == "bool_broadcast":
        mask = torch.rand(1, 7, generator=g) > 0.5  # key mask broadcast over queries
        mask[0, 0] = True
    fast = scaled_dot_product_attention(q, k, v, mask, impl="fast")
    ref = scaled_dot_product_attention(q, k, v, mask, impl="reference")
    auto = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(fast, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(auto, fast, rtol=0, atol=0)


def test_bool_mask_equals_additive_mask():
    q, k, v = _qkv(2)
    mask = local_mask(6, 1)
    a = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    b = scaled_dot_product_attention(q, k, v, bool_mask_to_additive(mask, DT), return_weights=True)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_masked_weights_exactly_zero_and_rows_sum_to_one():
    q, k, v = _qkv(3, n=8, m=8)
    mask = causal_mask(8) & local_mask(8, 2)
    _, w = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    assert torch.all(w[..., ~mask] == 0)
    assert torch.all(w[..., mask] > 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 8, dtype=DT), rtol=0, atol=1e-14)
    # "masking means zeroing weights after the softmax" is wrong: rows would not sum to one
    _, w_full = scaled_dot_product_attention(q, k, v, return_weights=True)
    assert not torch.allclose((w_full * mask).sum(-1), torch.ones(3, 8, dtype=DT))


@pytest.mark.parametrize("impl", ["reference", "fast"])
@pytest.mark.parametrize("as_float", [False, True])
def test_all_masked_rows_give_zero_output_and_no_nan(impl, as_float):
    q, k, v = _qkv(2, n=4, m=5)
    q.requires_grad_(True)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[1] = False  # query 1 may use no key
    m = bool_mask_to_additive(mask, DT) if as_float else mask
    res = scaled_dot_product_attention(q, k, v, m, impl=impl, return_weights=impl == "reference")
    out = res[0] if impl == "reference" else res
    assert torch.isfinite(out).all()
    assert torch.all(out[:, 1] == 0)
    if impl == "reference":
        assert torch.all(res[1][:, 1] == 0)
        torch.testing.assert_close(res[1][:, [0, 2, 3]].sum(-1), torch.ones(2, 3, dtype=DT))
    ref_rows, _ = _naive(q[:, [0, 2, 3]], k, v)
    torch.testing.assert_close(out[:, [0, 2, 3]], ref_rows, rtol=0, atol=1e-12)
    out.sum().backward()
    assert torch.isfinite(q.grad).all()
    assert torch.all(q.grad[:, 1] == 0)


def test_masked_softmax_all_neg_inf_row():
    s = torch.tensor([[0.0, float("-inf")], [float("-inf"), float("-inf")]], dtype=DT)
    p = masked_softmax(s)
    assert torch.equal(p, torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=DT))


def test_scale_default_and_custom():
    q, k, v = _qkv(n=3, m=3, dk=16)
    s = attention_scores(q, k)
    torch.testing.assert_close(s, q @ k.T / 4.0, rtol=0, atol=1e-14)
    torch.testing.assert_close(attention_scores(q, k, scale=1.0), q @ k.T, rtol=0, atol=0)
    w = attention_weights(q, k, scale=1.0)
    torch.testing.assert_close(w, torch.softmax(q @ k.T, -1), rtol=0, atol=1e-14)
    a = scaled_dot_product_attention(q, k, v, scale=0.3, impl="fast")
    b = scaled_dot_product_attention(q, k, v, scale=0.3, impl="reference")
    torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_mha_mask_conversions():
    mask = torch.tensor([[True, False], [True, True]])
    assert torch.equal(to_mha_mask(mask), ~mask)
    assert torch.equal(from_mha_mask(to_mha_mask(mask)), mask)
    additive = bool_mask_to_additive(mask, DT)
    assert to_mha_mask(additive) is additive
    assert torch.equal(additive_mask_to_bool(additive), mask)
    assert to_mha_mask(None) is None


def test_softmax_jacobian_norm_matches_autograd():
    p = torch.softmax(torch.randn(3, 5, dtype=DT), -1)
    for i in range(3):
        jac = torch.autograd.functional.jacobian(lambda z: torch.softmax(z, -1), torch.log(p[i]))
        torch.testing.assert_close(softmax_jacobian_norm(p[i]), torch.linalg.norm(jac))
    # a one-hot row passes no gradient, a uniform row the most
    one_hot = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=DT)
    assert softmax_jacobian_norm(one_hot) == 0
    assert softmax_jacobian_norm(torch.full((4,), 0.25, dtype=DT)) > 0.4


@pytest.mark.parametrize("impl", ["reference", "fast"])
def test_gradcheck_attention(impl):
    q, k, v = _qkv(1, n=3, m=4, dk=2, dv=2)
    mask = torch.tensor(
        [[True, True, False, True], [False, True, True, True], [False, False, False, False]]
    )
    for t in (q, k, v):
        t.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda a, b, c: scaled_dot_product_attention(a, b, c, mask, impl=impl),
        (q, k, v),
        fast_mode=True,
    )


def test_dropout_changes_output_only_when_active():
    q, k, v = _qkv(n=16, m=16)
    torch.manual_seed(0)
    out = scaled_dot_product_attention(q, k, v, dropout_p=0.5, impl="reference")
    assert not torch.allclose(out, scaled_dot_product_attention(q, k, v))


def test_bad_inputs_name_the_argument():
    q, k, v = _qkv(n=4, m=5)
    with pytest.raises(ValueError, match="mask"):
        scaled_dot_product_attention(q, k, v, torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask"):
        scaled_dot_product_attention(q, k, v, torch.ones(5, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask"):
        scaled_dot_product_attention(q, k, v, torch.ones(4, 5, dtype=torch.long))
    qb, kb, vb = _qkv(2, 3, n=4, m=5)
    with pytest.raises(ValueError, match="mask of shape .*batch dims"):
        scaled_dot_product_attention(qb, kb, vb, torch.ones(5, 4, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask"):
        scaled_dot_product_attention(q, k, v, [[True] * 5] * 4)
    with pytest.raises(ValueError, match="impl"):
        scaled_dot_product_attention(q, k, v, impl="flash")
    with pytest.raises(ValueError, match="impl='fast'"):
        scaled_dot_product_attention(q, k, v, impl="fast", return_weights=True)
    with pytest.raises(ValueError, match="d_k"):
        scaled_dot_product_attention(q, k[..., :3], v)
    with pytest.raises(ValueError, match="value"):
        scaled_dot_product_attention(q, k, v[:4])
    with pytest.raises(TypeError, match="query"):
        scaled_dot_product_attention(q.long(), k, v)
