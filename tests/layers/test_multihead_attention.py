"""Tests of nlnet.layers.attention.MultiheadSelfAttention (the "Self-Attention" article,
"Multi-head attention", "Masks", "Permutation equivariance and position")."""

import pytest
import torch
from torch import nn

from nlnet.functional.attention import bool_mask_to_additive, to_mha_mask
from nlnet.functional.masks import causal_mask, key_mask_from_lengths, local_mask, window_mask
from nlnet.layers.attention import MultiheadSelfAttention
from nlnet.layers.pos_embed import LearnedPositionEmbedding, SinusoidalPositionEmbedding

DT = torch.float64
TOL = {"rtol": 0.0, "atol": 1e-12}


def _pair(d=16, h=4, bias=True, seed=0):
    torch.manual_seed(seed)
    mha = nn.MultiheadAttention(d, h, bias=bias, batch_first=True, dtype=DT).eval()
    if bias:
        with torch.no_grad():
            mha.in_proj_bias.normal_()
            mha.out_proj.bias.normal_()
    ours = MultiheadSelfAttention.from_torch(mha).eval()
    return mha, ours


def _masks(n):
    g = torch.Generator().manual_seed(3)
    rand = torch.rand(n, n, generator=g) > 0.4
    rand.fill_diagonal_(True)
    return {
        "none": None,
        "window": window_mask((4, 4), 2),
        "shifted_window": window_mask((4, 4), 2, 1),
        "causal": causal_mask(n),
        "local": local_mask((4, 4), 1),
        "random": rand,
        "additive": torch.randn(n, n, generator=g, dtype=DT),
    }


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(
    "mask_name", ["none", "window", "shifted_window", "causal", "local", "random", "additive"]
)
def test_matches_torch_multihead_attention(bias, mask_name):
    mha, ours = _pair(bias=bias)
    x = torch.randn(2, 16, 16, dtype=DT)
    mask = _masks(16)[mask_name]
    with torch.no_grad():
        y_t, a_t = mha(x, x, x, attn_mask=to_mha_mask(mask), average_attn_weights=False)
        y_n, a_n = ours(x, mask=mask, return_weights=True)
        y_fast = ours(x, mask=mask)
    assert a_n.shape == (2, 4, 16, 16)  # per head, not averaged
    torch.testing.assert_close(y_n, y_t, **TOL)
    torch.testing.assert_close(a_n, a_t, **TOL)
    torch.testing.assert_close(y_fast, y_t, **TOL)


def test_key_mask_is_the_opposite_of_key_padding_mask():
    mha, ours = _pair()
    x = torch.randn(2, 6, 16, dtype=DT)
    km = key_mask_from_lengths([4, 6])
    with torch.no_grad():
        y_t, a_t = mha(x, x, x, key_padding_mask=to_mha_mask(km), average_attn_weights=False)
        y_n, a_n = ours(x, key_mask=km, return_weights=True)
        y_c = ours(x, key_mask=km, mask=causal_mask(6))
        y_tc = mha(x, x, x, key_padding_mask=~km, attn_mask=~causal_mask(6))[0]
    torch.testing.assert_close(y_n, y_t, **TOL)
    torch.testing.assert_close(a_n, a_t, **TOL)
    torch.testing.assert_close(y_c, y_tc, **TOL)
    assert torch.all(a_n[0, :, :, 4:] == 0)


def test_batched_3d_mask_and_unbatched_input():
    mha, ours = _pair()
    x = torch.randn(2, 5, 16, dtype=DT)
    m = torch.rand(2, 5, 5) > 0.3
    m |= torch.eye(5, dtype=torch.bool)
    with torch.no_grad():
        y_t = mha(x, x, x, attn_mask=(~m).repeat_interleave(4, dim=0))[0]
        torch.testing.assert_close(ours(x, mask=m), y_t, **TOL)
        y1, a1 = ours(x[0], return_weights=True)
        y1_t, a1_t = mha(x[0], x[0], x[0], average_attn_weights=False)
    assert y1.shape == (5, 16) and a1.shape == (4, 5, 5)
    torch.testing.assert_close(y1, y1_t, **TOL)
    torch.testing.assert_close(a1, a1_t, **TOL)


def test_cross_attention_with_context():
    mha, ours = _pair()
    x, ctx = torch.randn(2, 3, 16, dtype=DT), torch.randn(2, 7, 16, dtype=DT)
    with torch.no_grad():
        y_t, a_t = mha(x, ctx, ctx, average_attn_weights=False)
        y_n, a_n = ours(x, ctx, return_weights=True)
    torch.testing.assert_close(y_n, y_t, **TOL)
    torch.testing.assert_close(a_n, a_t, **TOL)


def test_state_dict_both_ways():
    ours = MultiheadSelfAttention(16, 4, dtype=DT)
    keys = set(ours.state_dict())
    assert keys == {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}
    mha = nn.MultiheadAttention(16, 4, batch_first=True, dtype=DT)
    mha.load_state_dict(ours.state_dict())  # strict
    back = MultiheadSelfAttention(16, 4, dtype=DT)
    back.load_state_dict(mha.state_dict())  # strict
    x = torch.randn(1, 5, 16, dtype=DT)
    with torch.no_grad():
        torch.testing.assert_close(ours.to_torch()(x, x, x)[0], ours(x), **TOL)
        torch.testing.assert_close(back(x), ours(x), rtol=0, atol=0)
    assert sum(p.numel() for p in MultiheadSelfAttention(16, 4, bias=False).parameters()) == 1024


def test_from_projections_equals_the_seed_formula():
    """MultiHead(X) = Concat(head_1..head_h) W_O with head_i on columns i*d/h:(i+1)*d/h."""
    d, h = 8, 2
    wq, wk, wv, wo = (torch.randn(d, d, dtype=DT) for _ in range(4))
    x = torch.randn(5, d, dtype=DT)
    heads = []
    for i in range(h):
        cols = slice(i * d // h, (i + 1) * d // h)
        q, k, v = x @ wq[:, cols], x @ wk[:, cols], x @ wv[:, cols]
        heads.append(torch.softmax(q @ k.T / (d // h) ** 0.5, -1) @ v)
    expected = torch.cat(heads, dim=1) @ wo
    mod = MultiheadSelfAttention.from_projections(wq, wk, wv, wo, h)
    with torch.no_grad():
        torch.testing.assert_close(mod(x), expected, **TOL)


def test_permutation_equivariance_and_position_encodings():
    """f(PX) = P f(X) without masks/positions; fails once a position encoding is added."""
    torch.manual_seed(0)
    n, d = 16, 8
    attn = MultiheadSelfAttention(d, 2, dtype=DT).eval()
    x = torch.randn(1, n, d, dtype=DT)
    perm = torch.randperm(n)
    with torch.no_grad():
        y, y_p = attn(x), attn(x[:, perm])
        torch.testing.assert_close(y_p, y[:, perm], **TOL)
        sin = SinusoidalPositionEmbedding(d, ndim=2)
        learned = LearnedPositionEmbedding((4, 4), d, dtype=DT)
        for pos in (sin, learned):
            y_pos, y_pos_perm = attn(pos(x, (4, 4))), attn(pos(x[:, perm], (4, 4)))
            assert not torch.allclose(y_pos_perm, y_pos[:, perm], atol=1e-6)
        # a (non-symmetric under perm) mask also breaks it
        m = local_mask(n, 1)
        assert not torch.allclose(attn(x[:, perm], mask=m), attn(x, mask=m)[:, perm], atol=1e-6)
        # ...but permuting the mask with the tokens restores it
        torch.testing.assert_close(
            attn(x[:, perm], mask=m[perm][:, perm]), attn(x, mask=m)[:, perm], **TOL
        )


def test_masked_weights_zero_rows_sum_one():
    _, ours = _pair()
    x = torch.randn(2, 16, 16, dtype=DT)
    m = window_mask((4, 4), 2, 1)
    with torch.no_grad():
        _, a = ours(x, mask=m, return_weights=True)
        _, a_add = ours(x, mask=bool_mask_to_additive(m, DT), return_weights=True)
    assert torch.all(a[..., ~m] == 0)
    torch.testing.assert_close(a.sum(-1), torch.ones(2, 4, 16, dtype=DT), **TOL)
    torch.testing.assert_close(a, a_add, rtol=0, atol=0)


def test_gradcheck_module():
    torch.manual_seed(0)
    mod = MultiheadSelfAttention(4, 2, dtype=DT)
    x = torch.randn(1, 3, 4, dtype=DT, requires_grad=True)
    m = causal_mask(3)
    assert torch.autograd.gradcheck(lambda t: mod(t, mask=m), (x,), fast_mode=True)


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="num_heads"):
        MultiheadSelfAttention(10, 4)
    with pytest.raises(ValueError, match="embed_dim"):
        MultiheadSelfAttention(0, 1)
    mod = MultiheadSelfAttention(8, 2)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match="x must be"):
        mod(torch.randn(2, 5, 6))
    with pytest.raises(ValueError, match="mask"):
        mod(x, mask=torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask"):
        mod(x, mask=torch.ones(5, 5, dtype=torch.int64))
    with pytest.raises(ValueError, match="mask"):
        mod(x, mask=torch.ones(3, 5, 5, dtype=torch.bool))  # batch of 3 masks for 2 inputs
    with pytest.raises(ValueError, match="key_mask"):
        mod(x, key_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="context"):
        mod(x, torch.randn(3, 5, 8))
