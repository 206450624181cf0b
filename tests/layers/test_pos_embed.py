"""Tests of position encodings: nlnet.functional.pos_embed and nlnet.layers.pos_embed (seed
the "Self-Attention" article, "Permutation equivariance and position")."""

import math

import pytest
import torch
import torch.nn.functional as F
from torchvision.models.swin_transformer import ShiftedWindowAttention
from torchvision.models.video.swin_transformer import ShiftedWindowAttention3d

from nlnet.functional.pos_embed import (
    relative_position_bias,
    relative_position_index,
    resize_pos_embed,
    sinusoidal_embedding_1d,
    sinusoidal_embedding_2d,
)
from nlnet.layers.pos_embed import LearnedPositionEmbedding, SinusoidalPositionEmbedding

DT = torch.float64


def test_sinusoidal_1d_formula():
    pe = sinusoidal_embedding_1d(10, 8, dtype=DT)
    assert pe.shape == (10, 8)
    for pos in (0, 3, 9):
        for i in range(4):
            angle = pos / 10000 ** (2 * i / 8)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-12)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-12)
    # dot products depend only on the offset (relative positions are linear functions)
    g = pe @ pe.T
    torch.testing.assert_close(g[0, 2].expand(8), g.diagonal(2), rtol=0, atol=1e-12)


def test_sinusoidal_2d_halves_encode_row_and_column():
    pe = sinusoidal_embedding_2d((3, 5), 8, dtype=DT)
    assert pe.shape == (15, 8)
    rows, cols = sinusoidal_embedding_1d(3, 4, dtype=DT), sinusoidal_embedding_1d(5, 4, dtype=DT)
    for r in range(3):
        for c in range(5):
            torch.testing.assert_close(pe[r * 5 + c], torch.cat([rows[r], cols[c]]))
    with pytest.raises(ValueError, match="dim"):
        sinusoidal_embedding_2d((3, 5), 6)
    with pytest.raises(ValueError, match="dim"):
        sinusoidal_embedding_1d(3, 5)


def test_resize_pos_embed_bicubic_and_prefix():
    torch.manual_seed(0)
    pe = torch.randn(1, 1 + 4 * 4, 6, dtype=DT)
    out = resize_pos_embed(pe, (6, 8), num_prefix_tokens=1)
    assert out.shape == (1, 1 + 48, 6)
    assert torch.equal(out[:, 0], pe[:, 0])  # class token untouched
    grid = pe[:, 1:].reshape(1, 4, 4, 6).permute(0, 3, 1, 2)
    expected = F.interpolate(grid, size=(6, 8), mode="bicubic", align_corners=False)
    torch.testing.assert_close(out[:, 1:], expected.permute(0, 2, 3, 1).reshape(1, 48, 6))
    assert resize_pos_embed(pe, 4, num_prefix_tokens=1) is pe  # same grid: unchanged
    const = torch.full((9, 3), 0.7, dtype=DT)  # (N, D) layout; a constant stays constant
    torch.testing.assert_close(resize_pos_embed(const, 5), torch.full((25, 3), 0.7, dtype=DT))
    rect = torch.randn(2 * 3, 4, dtype=DT)
    assert resize_pos_embed(rect, (4, 6), old_grid=(2, 3)).shape == (24, 4)


def test_resize_pos_embed_non_square_needs_old_grid():
    with pytest.raises(ValueError, match="old_grid"):
        resize_pos_embed(torch.randn(6, 4), (4, 4))
    with pytest.raises(ValueError, match="old_grid"):
        resize_pos_embed(torch.randn(6, 4), (4, 4), old_grid=(2, 2))
    with pytest.raises(ValueError, match="pos_embed"):
        resize_pos_embed(torch.randn(4), 2)


def test_learned_position_embedding_module():
    torch.manual_seed(0)
    mod = LearnedPositionEmbedding((4, 4), 6, num_prefix_tokens=1, dtype=DT)
    assert mod.pos_embed.shape == (1, 17, 6)
    x = torch.randn(2, 17, 6, dtype=DT)
    torch.testing.assert_close(mod(x), x + mod.pos_embed)
    x_big = torch.randn(2, 1 + 36, 6, dtype=DT)
    on_the_fly = mod(x_big, grid_size=6)
    expected = resize_pos_embed(mod.pos_embed, 6, num_prefix_tokens=1)
    torch.testing.assert_close(on_the_fly, x_big + expected)
    mod.resize_(6)
    assert mod.grid_size == (6, 6) and mod.pos_embed.shape == (1, 37, 6)
    torch.testing.assert_close(mod(x_big), on_the_fly)
    assert isinstance(mod.pos_embed, torch.nn.Parameter) and mod.pos_embed.requires_grad
    with pytest.raises(ValueError, match="x must be"):
        mod(x)


def test_sinusoidal_module():
    mod = SinusoidalPositionEmbedding(8, ndim=2)
    x = torch.zeros(1, 6, 8, dtype=DT)
    torch.testing.assert_close(mod(x, (2, 3))[0], sinusoidal_embedding_2d((2, 3), 8, dtype=DT))
    with pytest.raises(ValueError, match="grid_size"):
        mod(x)  # 6 tokens are not a square grid
    mod1 = SinusoidalPositionEmbedding(8)
    torch.testing.assert_close(mod1(x)[0], sinusoidal_embedding_1d(6, 8, dtype=DT))
    with pytest.raises(ValueError, match="dim"):
        SinusoidalPositionEmbedding(6, ndim=2)


def test_relative_position_index_matches_torchvision():
    tv2 = ShiftedWindowAttention(4, [3, 4], [0, 0], 1)
    assert torch.equal(relative_position_index((3, 4)).reshape(-1), tv2.relative_position_index)
    tv3 = ShiftedWindowAttention3d(4, [2, 3, 4], [0, 0, 0], 1)
    assert torch.equal(relative_position_index((2, 3, 4)), tv3.relative_position_index)
    idx = relative_position_index(5)
    assert idx.shape == (5, 5) and int(idx.min()) == 0 and int(idx.max()) == 8
    # same offset -> same index
    i2 = relative_position_index((3, 3))
    assert i2[0, 4] == i2[4, 8]  # (0,0)-(1,1) and (1,1)-(2,2)
    assert i2[0, 4] != i2[4, 0]


def test_relative_position_bias_gather():
    table = torch.arange(9 * 2, dtype=DT).reshape(9, 2)  # 1D window of 5: 2*5-1 offsets
    idx = relative_position_index(5)
    b = relative_position_bias(table, idx)
    assert b.shape == (2, 5, 5)
    for i in range(5):
        for j in range(5):
            assert b[1, i, j] == table[i - j + 4, 1]
    with pytest.raises(ValueError, match="window_size"):
        relative_position_index((4, 4), (3, 3))
