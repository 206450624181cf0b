"""Tests of nlnet.functional.masks and nlnet.functional.windows (the "Self-Attention" article,
"Masks" and "Windowed attention")."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from torchvision.models.video.swin_transformer import _compute_attention_mask_3d

from nlnet.functional.attention import scaled_dot_product_attention
from nlnet.functional.masks import (
    causal_mask,
    key_mask_from_lengths,
    local_mask,
    padding_mask,
    shifted_window_mask,
    window_mask,
)
from nlnet.functional.windows import (
    cyclic_shift,
    num_windows,
    pad_to_window,
    window_partition,
    window_reverse,
)

DT = torch.float64


def test_causal_mask_matches_sdpa_is_causal():
    m = causal_mask(5)
    assert m.dtype == torch.bool and m.shape == (5, 5)
    assert all(bool(m[i, j]) == (j <= i) for i in range(5) for j in range(5))
    q = torch.randn(2, 5, 4, dtype=DT)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, q, q, m, impl="reference"),
        F.scaled_dot_product_attention(q, q, q, is_causal=True),
    )
    assert causal_mask(3, 4).shape == (3, 4)


def test_padding_masks_from_lengths_and_key_mask():
    km = key_mask_from_lengths([2, 4], max_len=5)
    assert km.tolist() == [[True, True, False, False, False], [True, True, True, True, False]]
    a = padding_mask([2, 4], max_len=5)
    b = padding_mask(key_mask=km)
    assert a.shape == (2, 1, 1, 5) and torch.equal(a, b)
    assert padding_mask([2, 4], max_len=5, num_queries=3).shape == (2, 1, 3, 5)
    # padded keys get exactly zero weight, real ones still sum to one
    x = torch.randn(2, 2, 5, 4, dtype=DT)  # (B, heads, n, d)
    _, w = scaled_dot_product_attention(x, x, x, a, return_weights=True)
    assert torch.all(w[0, :, :, 2:] == 0) and torch.all(w[1, :, :, 4:] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 5, dtype=DT))


def test_padding_mask_on_queries_zeroes_padded_rows():
    mq = padding_mask([2, 5], max_len=5, mask_queries=True)
    assert mq.shape == (2, 1, 5, 5)
    x = torch.randn(2, 1, 5, 3, dtype=DT)
    for impl in ("fast", "reference"):
        out = scaled_dot_product_attention(x, x, x, mq, impl=impl)
        assert torch.isfinite(out).all() and torch.all(out[0, :, 2:] == 0)
        assert torch.all(out[1].abs().sum(-1) > 0)


def test_padding_mask_errors():
    with pytest.raises(ValueError, match="exactly one"):
        padding_mask()
    with pytest.raises(ValueError, match="max_len"):
        key_mask_from_lengths([3, 6], max_len=4)
    with pytest.raises(TypeError, match="key_mask"):
        padding_mask(key_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match="lengths"):
        key_mask_from_lengths(torch.tensor([1.5, 2.0]))


def test_local_mask_1d_2d_brute_force():
    m1 = local_mask(7, 2)
    assert all(bool(m1[i, j]) == (abs(i - j) <= 2) for i in range(7) for j in range(7))
    h, w, r = 4, 5, 1
    m2 = local_mask((h, w), r)
    coords = list(itertools.product(range(h), range(w)))
    for a, (i, j) in enumerate(coords):
        for b, (k, l) in enumerate(coords):
            assert bool(m2[a, b]) == (abs(i - k) <= r and abs(j - l) <= r)
    assert int(m2[1 * w + 2].sum()) == (2 * r + 1) ** 2  # interior token: full 3x3 box
    assert local_mask((2, 3, 3), 1).shape == (18, 18)
    with pytest.raises(ValueError, match="radius"):
        local_mask(5, -1)


def test_window_mask_is_the_article_block_mask():
    r, c = torch.arange(64).div(8, rounding_mode="floor"), torch.arange(64) % 8
    win = (r // 4) * 2 + c // 4
    article = win[:, None] == win[None, :]
    m = window_mask((8, 8), 4)
    assert torch.equal(m, article)
    assert m.numel() == 4096 and int(m.sum()) == 1024


@pytest.mark.parametrize(
    "grid,window,shift",
    [
        ((8, 8), (4, 4), (2, 2)),
        ((6, 9), (3, 3), (1, 1)),
        ((4, 8, 8), (2, 4, 4), (1, 2, 2)),
        ((8, 8), (4, 4), (0, 2)),
    ],
)
def test_window_mask_raster_equals_partitioned_shifted_mask(grid, window, shift):
    """The raster (N, N) mask, moved into shifted-window order, is block diagonal with the
    (nW, M, M) SW-MSA mask as blocks."""
    raster = window_mask(grid, window, shift)
    pos = torch.arange(raster.shape[0], dtype=DT).reshape(1, *grid, 1)
    order = window_partition(cyclic_shift(pos, shift), window)[..., 0].long()  # (nW, M)
    sw = shifted_window_mask(grid, window, shift)
    for w_idx in range(order.shape[0]):
        idx = order[w_idx]
        assert torch.equal(raster[idx][:, idx], sw[w_idx])
        others = torch.ones(raster.shape[0], dtype=torch.bool)
        others[idx] = False
        assert not raster[idx][:, others].any()  # nothing outside the window


@pytest.mark.parametrize(
    "grid,window,shift",
    [
        ((2, 8, 8), (2, 4, 4), (1, 2, 2)),
        ((4, 6, 9), (2, 3, 3), (1, 1, 1)),
        ((1, 8, 8), (1, 4, 4), (0, 2, 2)),
        ((4, 8, 4), (2, 4, 4), (1, 2, 0)),
    ],
)
def test_shifted_window_mask_matches_torchvision(grid, window, shift):
    tv = _compute_attention_mask_3d(torch.zeros(1), grid, window, shift)  # 0 / -100
    ours = shifted_window_mask(grid, window, shift)
    assert torch.equal(ours, tv == 0)
    if shift[0] == 0 and window[0] == 1:  # a 2D grid is the 3D case with T = 1
        assert torch.equal(shifted_window_mask(grid[1:], window[1:], shift[1:]), ours)


def test_window_mask_padding_non_divisible():
    m = window_mask((5, 6), 4, 2)
    assert m.shape == (30, 30)
    assert torch.equal(m, m.T) and m.diagonal().all()
    full = window_mask((8, 8), 4, 2)
    idx = torch.arange(64).reshape(8, 8)[:5, :6].reshape(-1)
    assert torch.equal(m, full[idx][:, idx])  # same as cropping the padded grid's mask


@pytest.mark.parametrize("shape,window", [((2, 8, 12, 3), (4, 4)), ((2, 4, 6, 6, 3), (2, 3, 3))])
def test_partition_reverse_roundtrip_and_order(shape, window):
    x = torch.randn(*shape, dtype=DT)
    w = window_partition(x, window)
    grid = shape[1:-1]
    assert w.shape == (shape[0] * num_windows(grid, window), torch.tensor(window).prod(), 3)
    assert torch.equal(window_reverse(w, window, grid), x)
    # first window = top-left block, raster order inside
    block = x[(0, *(slice(0, m) for m in window))].reshape(-1, 3)
    assert torch.equal(w[0], block)
    # second window = next block along the last grid dim
    sl = [slice(0, m) for m in window]
    sl[-1] = slice(window[-1], 2 * window[-1])
    assert torch.equal(w[1], x[(0, *sl)].reshape(-1, 3))


def test_cyclic_shift_and_padding():
    x = torch.randn(1, 5, 7, 2, dtype=DT)
    s = cyclic_shift(x, (2, 3))
    assert torch.equal(s[0, 0, 0], x[0, 2, 3])
    assert torch.equal(cyclic_shift(s, (2, 3), reverse=True), x)
    p, pad = pad_to_window(x, 4)
    assert p.shape == (1, 8, 8, 2) and pad == (3, 1)
    assert torch.equal(p[:, :5, :7], x) and p[:, 5:].abs().sum() == 0
    x3 = torch.randn(1, 3, 5, 5, 2)
    assert pad_to_window(x3, (2, 4, 4))[0].shape == (1, 4, 8, 8, 2)


def test_window_errors_name_the_argument():
    x = torch.randn(1, 4, 4, 2)
    with pytest.raises(ValueError, match="window_size"):
        window_partition(x, 8)  # window larger than the grid
    with pytest.raises(ValueError, match="window_size"):
        window_partition(torch.randn(1, 6, 6, 2), 4)  # not divisible
    with pytest.raises(ValueError, match="window_size"):
        window_partition(x, (2, 2, 2))
    with pytest.raises(ValueError, match="x must be channels-last"):
        window_partition(torch.randn(4, 4), 2)
    with pytest.raises(ValueError, match="window_size"):
        window_mask((4, 4), 5)
    with pytest.raises(ValueError, match="shift_size"):
        window_mask((8, 8), 4, 4)
    with pytest.raises(ValueError, match="grid_size"):
        shifted_window_mask((6, 6), 4, 2)
    with pytest.raises(ValueError, match="grid_size"):
        window_reverse(torch.randn(4, 4, 2), 2, (3, 4))
