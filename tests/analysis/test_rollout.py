"""Transformer attention recording and attention rollout (Abnar & Zuidema 2020)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nlnet.analysis.attention_record import find_attention_layers, record_attention
from nlnet.analysis.rollout import (
    attention_rollout,
    patch_merging_matrix,
    rollout_figure,
    swin_rollout,
    vit_rollout,
    window_weights_to_tokens,
)
from nlnet.layers import WindowAttention2d
from nlnet.models import create_model


def test_rollout_is_the_product_of_residual_normalised_maps():
    torch.manual_seed(0)
    maps = [torch.softmax(torch.randn(2, 3, 5, 5), -1) for _ in range(3)]
    r = attention_rollout(maps)
    expected = torch.eye(5).expand(2, 5, 5)
    for a in maps:
        a = 0.5 * a.mean(1) + 0.5 * torch.eye(5)
        expected = a @ expected  # rows of a already sum to 1
    torch.testing.assert_close(r, expected)
    torch.testing.assert_close(r.sum(-1), torch.ones(2, 5))
    ident = attention_rollout([torch.eye(4).expand(1, 2, 4, 4)] * 2)
    torch.testing.assert_close(ident, torch.eye(4)[None])


def test_window_weights_to_tokens_reproduces_the_layer_output():
    """The dense matrix times V, then the projection, is exactly the shifted-window layer."""
    torch.manual_seed(0)
    layer = WindowAttention2d(8, 3, num_heads=2, shift_size=1).double().eval()
    x = torch.randn(2, 6, 6, 8, dtype=torch.float64)  # 4 shifted 3 x 3 windows
    out, w = layer(x, return_weights=True)
    dense = window_weights_to_tokens(w, layer, (6, 6))  # (B, h, 36, 36)
    assert dense.shape == (2, 2, 36, 36)
    v = F.linear(x.reshape(2, 36, 8), layer.qkv.weight[16:], layer.qkv.bias[16:])
    v = v.reshape(2, 36, 2, 4).transpose(1, 2)  # (B, h, G, d)
    y = (dense @ v).transpose(1, 2).reshape(2, 36, 8)
    torch.testing.assert_close(layer.proj(y).reshape(2, 6, 6, 8), out)
    # a padded grid: the share of the zero padding tokens is dropped, real rows keep the rest
    _, w = layer(x[:, :5, :5], return_weights=True)
    sums = window_weights_to_tokens(w, layer, (5, 5)).sum(-1)
    assert (sums <= 1 + 1e-12).all() and (sums > 0).all() and (sums < 1 - 1e-6).any()


def test_patch_merging_matrix_shares_children_equally():
    m = patch_merging_matrix((3, 4))
    assert m.shape == (4, 12)
    torch.testing.assert_close(m.sum(0), torch.full((12,), 0.25))
    assert m[0, [0, 1, 4, 5]].tolist() == [0.25] * 4


def test_vit_recording_and_rollout():
    torch.manual_seed(0)
    model = create_model("vit_tiny").eval()
    x = torch.randn(2, 3, 32, 32)
    ref = model(x)
    with record_attention(model) as rec:  # no non-local block: the attention layers
        out = model(x)
    assert torch.equal(out, ref)
    assert rec.names == [n for n, _ in find_attention_layers(model)]
    w = rec.maps[rec.names[0]]
    assert w.shape == (2, 2, 17, 17) and rec.feature_sizes[rec.names[0]] == (17,)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 17))
    logits, heat = vit_rollout(model, x, model.grid_size)
    torch.testing.assert_close(logits, ref)
    assert heat.shape == (2, 4, 4) and torch.allclose(heat.amax((1, 2)), torch.ones(2))


def test_swin_rollout_and_figure(tmp_path):
    torch.manual_seed(0)
    model = create_model("swin_tiny").eval()
    x = torch.randn(1, 3, 32, 32)
    logits, heat = swin_rollout(model, x)
    assert logits.shape == (1, 10) and heat.shape == (1, 16, 16)
    assert (heat >= 0).all() and heat.max() == 1
    fig = rollout_figure(x[0], heat[0])
    fig.savefig(tmp_path / "rollout.png")
    assert (tmp_path / "rollout.png").stat().st_size > 1000


def test_transformer_attention_figure_for_each_family(tmp_path):
    import numpy as np

    from nlnet.analysis.rollout import transformer_attention_figure

    torch.manual_seed(0)
    for name, shape in (("vit_tiny", (1, 3, 32, 32)), ("swin_tiny", (1, 3, 32, 32)),
                        ("vivit_tiny", (1, 3, 4, 32, 32))):  # fmt: skip
        model = create_model(name, num_classes=3, **({"width": 2} if "vivit" in name else {}))
        x = torch.randn(shape)
        frames = np.zeros((shape[2] if len(shape) == 5 else 1, 32, 32, 3), dtype=np.uint8)
        logits, fig = transformer_attention_figure(model.eval(), x, frames, title=name)
        torch.testing.assert_close(logits, model(x))
        fig.savefig(tmp_path / f"{name}.png")
        panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
        assert len(panels) == (4 if "vivit" in name else 2)
        assert len(fig.axes) == len(panels) + 1  # one colour bar for the attention
