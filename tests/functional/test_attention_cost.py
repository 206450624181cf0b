"""Tests of nlnet.functional.cost against the figures of the "Self-Attention" article ("Cost",
"Windowed attention", "Multi-head attention")."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from nlnet.functional.attention import attention_scores
from nlnet.functional.cost import (
    global_attention_macs,
    num_tokens,
    projection_params,
    score_entries,
    score_memory_bytes,
    window_attention_macs,
    window_score_entries,
)
from nlnet.layers.attention import MultiheadSelfAttention
from nlnet.layers.window_attention import WindowAttention2d


def test_vit_patches_tokens_and_entries():
    n = num_tokens(224, 16)
    assert n == 14 * 14 == 196
    assert score_entries(n) == 38_416


def test_one_token_per_pixel():
    n = num_tokens(224, 1)
    assert n == 50_176
    entries = score_entries(n)
    assert entries == pytest.approx(2.52e9, rel=2e-3)
    assert entries // score_entries(num_tokens(224, 16)) == 256**2 == 65_536
    mem = score_memory_bytes(n, dtype=torch.float32)
    assert mem == entries * 4
    assert mem / 1e9 == pytest.approx(10.0, rel=0.01)  # "roughly 10 GB in 32-bit floats"
    assert score_memory_bytes(n, dtype=4) == mem


def test_full_size_score_matrix_on_meta_device():
    q = torch.empty(1, 50_176, 64, device="meta")
    s = attention_scores(q, q)
    assert s.shape == (1, 50_176, 50_176)
    assert s.numel() * s.element_size() == score_memory_bytes(50_176)


def test_swin_windows_cut_entries_64_fold():
    n = num_tokens(224, 4)
    assert n == 56 * 56 == 3_136
    windowed = window_score_entries(56, 7)
    assert windowed == n * 49
    assert score_entries(n) / windowed == 64
    g, w = global_attention_macs(56, 56, 96), window_attention_macs(56, 56, 96, 7)
    assert g == 4 * 3136 * 96**2 + 2 * 3136**2 * 96
    assert w == 4 * 3136 * 96**2 + 2 * 49 * 3136 * 96
    # linear in the number of patches for fixed M: doubling hw doubles the window cost
    assert window_attention_macs(56, 112, 96, 7) == 2 * w
    assert global_attention_macs(56, 112, 96) > 2 * g


def test_projection_parameters():
    assert projection_params(512) == 4 * 512**2 == 1_048_576
    assert projection_params(512, bias=True) == 1_050_624
    for heads, bias in ((8, True), (1, False), (16, True)):
        mod = MultiheadSelfAttention(512, heads, bias=bias, device="meta")
        assert sum(p.numel() for p in mod.parameters()) == projection_params(512, bias)
    mha = torch.nn.MultiheadAttention(512, 8, device="meta")
    assert sum(p.numel() for p in mha.parameters()) == 1_050_624


def _macs(module, x):
    with FlopCounterMode(display=False) as counter:
        module(x)
    return counter.get_total_flops() // 2  # one multiply-add = 2 FLOPs


def test_formulas_match_counted_macs():
    """Count the real matmuls of nlnet's modules (Swin stage-1 size on the meta device)."""
    h = w = 56
    c = 96
    attn = MultiheadSelfAttention(c, 3, impl="reference", device="meta")
    assert _macs(attn, torch.empty(1, h * w, c, device="meta")) == global_attention_macs(h, w, c)
    wattn = WindowAttention2d(c, 7, 3, impl="reference", device="meta")
    got = _macs(wattn, torch.empty(1, h, w, c, device="meta"))
    assert got == window_attention_macs(h, w, c, 7)


def test_cost_errors():
    with pytest.raises(ValueError, match="patch_size"):
        num_tokens(224, 15)
    with pytest.raises(ValueError, match="window_size"):
        window_score_entries(56, 9)
    with pytest.raises(ValueError, match="image_size"):
        num_tokens((224, 224, 3), 16)
