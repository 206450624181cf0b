"""Video transformers: joint (ViViT model 1) and divided (TimeSformer T+S) space-time attention."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from nlnet.analysis.attention_record import record_attention
from nlnet.analysis.rollout import (
    divided_rollout,
    divided_weights_to_tokens,
    transformer_attention_figure,
    vit_rollout,
)
from nlnet.layers.attention import merge_heads, split_heads
from nlnet.models import create_model
from nlnet.models.video.transformer import DividedSpaceTimeBlock, VideoTransformer

GRID = (3, 2, 2)  # T', H', W': S = 4 positions
B, D, HEADS = 2, 8, 2


def _block() -> DividedSpaceTimeBlock:
    torch.manual_seed(0)
    return DividedSpaceTimeBlock(D, HEADS, 16, GRID).double().eval()


def test_divided_block_equals_a_written_out_loop():
    """Temporal attention per position, then [cls, frame] through the spatial encoder block per
    frame, the class token averaged over frames: written with explicit loops over (t, s)."""
    block = _block()
    t, s = GRID[0], GRID[1] * GRID[2]
    x = torch.randn(B, 1 + t * s, D, dtype=torch.float64)
    cls, tok = x[:, :1], x[:, 1:].reshape(B, t, s, D).clone()
    for pos in range(s):
        seq = tok[:, :, pos]  # (B, T', D)
        tok[:, :, pos] = seq + block.temporal_attn(block.norm_t(seq))
    outs, cls_outs = [], []
    for frame in range(t):
        y = block.spatial(torch.cat([cls, tok[:, frame]], dim=1))  # (B, 1 + S, D)
        cls_outs.append(y[:, :1])
        outs.append(y[:, 1:])
    expected = torch.cat([torch.stack(cls_outs).mean(0), torch.cat(outs, dim=1)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(block(x), expected)


def test_divided_model_registered_and_checked():
    model = create_model("vivit_tiny_divided", num_classes=5, width=2).eval()
    assert isinstance(model, VideoTransformer) and model.attention == "divided"
    assert all(isinstance(b, DividedSpaceTimeBlock) for b in model.blocks)
    assert model(torch.randn(2, 3, 4, 32, 32)).shape == (2, 5)
    with pytest.raises(ValueError, match="attention: expected one of"):
        VideoTransformer(attention="factorised")
    # the joint model is unchanged by the option
    assert create_model("vivit_tiny", width=2).attention == "joint"


def test_divided_attention_recorded_in_block_order():
    torch.manual_seed(0)
    model = create_model("vivit_tiny_divided", num_classes=5, width=2).eval()
    x = torch.randn(2, 3, 4, 32, 32)
    ref = model(x)
    with record_attention(model) as rec:
        out = model(x)
    assert torch.equal(out, ref)
    assert rec.names[:2] == ["blocks.0.temporal_attn", "blocks.0.spatial.attn"]
    assert len(rec.names) == 8
    t, s = model.grid[0], model.grid[1] * model.grid[2]  # 4, 64
    assert rec.maps["blocks.0.temporal_attn"].shape == (2 * s, 4, t, t)
    assert rec.maps["blocks.0.spatial.attn"].shape == (2 * t, 4, 1 + s, 1 + s)


def test_divided_weights_to_tokens_reproduce_both_attentions():
    """The dense clip-wide matrices times V, then the output projection, give each attention's
    output (the class token's: the mean over the frames)."""
    block = _block()
    t, s = GRID[0], GRID[1] * GRID[2]
    x = torch.randn(B, 1 + t * s, D, dtype=torch.float64)
    cls, tok = x[:, :1], x[:, 1:]

    def v_of(attn, z):  # value projection
        return F.linear(z, attn.in_proj_weight[2 * D :], attn.in_proj_bias[2 * D :])

    def mix(attn, a, v):  # (B, h, n, n) @ (B, n, D) per head, then W_O
        return attn.out_proj(merge_heads(a @ split_heads(v, HEADS)))

    with torch.no_grad():
        seq = tok.reshape(B, t, s, D).transpose(1, 2).reshape(B * s, t, D)
        z_t = block.norm_t(seq)
        out_t, w_t = block.temporal_attn(z_t, return_weights=True)
        frames = torch.cat([cls.repeat_interleave(t, 0),
                            (seq + out_t).reshape(B, s, t, D).transpose(1, 2).reshape(B * t, s, D)],
                           dim=1)  # fmt: skip
        z_s = block.spatial.norm1(frames)
        out_s, w_s = block.spatial.attn(z_s, return_weights=True)
        a_time, a_space = divided_weights_to_tokens(w_t, w_s, GRID)
        assert a_time.shape == a_space.shape == (B, HEADS, 1 + t * s, 1 + t * s)
        for a in (a_time, a_space):
            torch.testing.assert_close(a.sum(-1), torch.ones(B, HEADS, 1 + t * s, dtype=a.dtype))
        # temporal: tokens in clip order (t, s)
        v = v_of(block.temporal_attn, z_t).reshape(B, s, t, D).transpose(1, 2).reshape(B, t * s, D)
        got = mix(block.temporal_attn, a_time[:, :, 1:, 1:], v)
        want = out_t.reshape(B, s, t, D).transpose(1, 2).reshape(B, t * s, D)
        torch.testing.assert_close(got, want)
        assert (a_time[:, :, 0, 1:] == 0).all() and (a_time[:, :, 0, 0] == 1).all()
        # spatial: the class token's value is the same in every frame
        v = v_of(block.spatial.attn, z_s).reshape(B, t, 1 + s, D)
        v = torch.cat([v[:, 0, :1], v[:, :, 1:].reshape(B, t * s, D)], dim=1)
        got = mix(block.spatial.attn, a_space, v)
        o = out_s.reshape(B, t, 1 + s, D)
        want = torch.cat([o[:, :, :1].mean(1), o[:, :, 1:].reshape(B, t * s, D)], dim=1)
        torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="temporal: expected"):
        divided_weights_to_tokens(w_s, w_s, GRID)


def test_divided_rollout_and_figure(tmp_path):
    torch.manual_seed(0)
    model = create_model("vivit_tiny_divided", num_classes=3, width=2).eval()
    x = torch.randn(1, 3, 4, 32, 32)
    logits, heat = divided_rollout(model, x)
    torch.testing.assert_close(logits, model(x))
    assert heat.shape == (1, 4, 8, 8) and (heat >= 0).all() and heat.max() == 1
    frames = np.zeros((4, 32, 32, 3), dtype=np.uint8)
    logits, fig = transformer_attention_figure(model, x, frames, title="divided")
    fig.savefig(tmp_path / "divided.png")
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]  # and one colour bar
    assert len(panels) == 4 and len(fig.axes) == 5
    assert (tmp_path / "divided.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="use divided_rollout"):
        vit_rollout(model, x, model.grid)
