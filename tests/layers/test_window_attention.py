"""Tests of nlnet.layers.window_attention against torchvision's Swin (the "Self-Attention"
article, "Windowed attention"; Liu et al. 2021)."""

import pytest
import torch
from torchvision.models.swin_transformer import ShiftedWindowAttention, SwinTransformerBlock
from torchvision.models.video.swin_transformer import ShiftedWindowAttention3d

from nlnet.functional.masks import window_mask
from nlnet.layers.attention import MultiheadSelfAttention
from nlnet.layers.window_attention import (
    SwinBlock,
    WindowAttention,
    WindowAttention2d,
    WindowAttention3d,
    swin_blocks,
)

DT = torch.float64
TOL = {"rtol": 0.0, "atol": 1e-10}


def _tv2d(window, shift, dim=8, heads=2, seed=0):
    torch.manual_seed(seed)
    tv = ShiftedWindowAttention(dim, list(window), list(shift), heads).to(DT).eval()
    with torch.no_grad():
        tv.relative_position_bias_table.normal_()  # make the bias matter
        tv.qkv.bias.normal_()
        tv.proj.bias.normal_()
    return tv


def _tv3d(window, shift, dim=8, heads=2, seed=0):
    torch.manual_seed(seed)
    tv = ShiftedWindowAttention3d(dim, list(window), list(shift), heads).to(DT).eval()
    with torch.no_grad():
        tv.relative_position_bias_table.normal_()
        tv.qkv.bias.normal_()
    return tv


@pytest.mark.parametrize("shift", [(0, 0), (2, 2), (1, 2)])
@pytest.mark.parametrize(
    "grid", [(8, 8), (7, 10), (3, 10), (4, 4)], ids=["divisible", "padded", "small_h", "one_win"]
)
def test_matches_torchvision_2d(shift, grid):
    tv = _tv2d((4, 4), shift)
    ours = WindowAttention.from_torchvision(tv).eval()
    x = torch.randn(2, *grid, 8, dtype=DT)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), tv(x), **TOL)
        out, w = ours(x, return_weights=True)
    torch.testing.assert_close(out, tv(x), **TOL)
    assert w.shape[-2:] == (16, 16) and w.shape[2] == 2


def test_matches_torchvision_2d_rectangular_window():
    tv = _tv2d((3, 4), (1, 2))
    ours = WindowAttention2d(8, (3, 4), 2, (1, 2)).to(DT).eval()
    ours.load_state_dict(tv.state_dict())  # strict: torchvision's index buffer is ignored
    x = torch.randn(1, 5, 9, 8, dtype=DT)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), tv(x), **TOL)


@pytest.mark.parametrize(
    "window,shift,grid",
    [
        ((2, 4, 4), (0, 0, 0), (4, 8, 8)),
        ((2, 4, 4), (1, 2, 2), (4, 8, 8)),
        ((2, 4, 4), (1, 2, 2), (3, 7, 10)),  # not divisible: padded
        ((4, 4, 4), (2, 2, 2), (2, 9, 6)),  # T smaller than the window: clipped
        ((2, 3, 3), (1, 1, 1), (5, 6, 4)),
    ],
)
def test_matches_torchvision_3d(window, shift, grid):
    tv = _tv3d(window, shift)
    ours = WindowAttention.from_torchvision(tv).eval()
    assert ours.small_grid == "clip"
    x = torch.randn(1, *grid, 8, dtype=DT)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), tv(x), **TOL)
        torch.testing.assert_close(ours(x, return_weights=True)[0], tv(x), **TOL)


@pytest.mark.parametrize("ndim", [2, 3])
def test_swin_block_matches_torchvision(ndim):
    torch.manual_seed(0)
    if ndim == 2:
        window, shift, x = [4, 4], [2, 2], torch.randn(2, 6, 9, 8, dtype=DT)
        tv = SwinTransformerBlock(8, 2, window, shift)
    else:
        window, shift, x = [2, 4, 4], [1, 2, 2], torch.randn(1, 3, 6, 5, 8, dtype=DT)
        tv = SwinTransformerBlock(8, 2, window, shift, attn_layer=ShiftedWindowAttention3d)
    tv = tv.to(DT).eval()
    with torch.no_grad():
        tv.attn.relative_position_bias_table.normal_()
    ours = SwinBlock(8, 2, window, shift).to(DT).eval()
    ours.load_state_dict(tv.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(ours(x), tv(x), **TOL)


def test_swin_blocks_alternate_shift():
    seq = swin_blocks(4, 8, 2, (4, 4))
    assert [blk.attn.shift_size for blk in seq] == [(0, 0), (2, 2), (0, 0), (2, 2)]
    seq3 = swin_blocks(2, 8, 2, (2, 7, 7))
    assert [blk.attn.shift_size for blk in seq3] == [(0, 0, 0), (1, 3, 3)]
    assert seq(torch.randn(1, 8, 8, 8)).shape == (1, 8, 8, 8)


def test_int_window_size_everywhere():
    """An int window size M is (M, M) (or (M, M, M) with ndim=3 / a 3-entry shift), wherever a
    window size is accepted; the modules equal the ones built from the tuple."""
    x2, x3 = torch.randn(1, 8, 8, 8), torch.randn(1, 4, 8, 8, 8)
    for build in (
        lambda w, **k: SwinBlock(8, 2, w, **k),
        lambda w, **k: WindowAttention(8, w, 2, **k),
    ):
        for w_int, w_tuple, x, kw in ((4, (4, 4), x2, {}), (2, (2, 2, 2), x3, {"ndim": 3})):
            torch.manual_seed(0)
            a = build(w_int, **kw)
            torch.manual_seed(0)
            b = build(w_tuple)
            assert a.state_dict().keys() == b.state_dict().keys()
            with torch.no_grad():
                torch.testing.assert_close(a(x), b(x), rtol=0, atol=0)
    assert SwinBlock(8, 2, 4, shift_size=(1, 2, 2)).attn.window_size == (4, 4, 4)
    seq = swin_blocks(2, 8, 2, 4)
    assert [blk.attn.shift_size for blk in seq] == [(0, 0), (2, 2)]
    assert [blk.attn.window_size for blk in swin_blocks(2, 8, 2, 2, ndim=3)] == [(2, 2, 2)] * 2
    with pytest.raises(ValueError, match="ndim must be 2 or 3"):
        SwinBlock(8, 2, 4, ndim=4)
    with pytest.raises(ValueError, match="does not have ndim=3"):
        WindowAttention(8, (4, 4), 2, ndim=3)


@pytest.mark.parametrize("shift", [0, 2])
def test_window_attention_equals_global_attention_with_window_mask(shift):
    """W-MSA / SW-MSA (zero bias) = global multi-head attention with the raster window mask."""
    torch.manual_seed(0)
    wa = WindowAttention2d(8, 4, 2, shift).to(DT).eval()
    with torch.no_grad():
        wa.relative_position_bias_table.zero_()
    mhsa = MultiheadSelfAttention(8, 2, dtype=DT).eval()
    with torch.no_grad():
        mhsa.in_proj_weight.copy_(wa.qkv.weight)
        mhsa.in_proj_bias.copy_(wa.qkv.bias)
        mhsa.out_proj.load_state_dict(wa.proj.state_dict())
    x = torch.randn(2, 8, 8, 8, dtype=DT)
    mask = window_mask((8, 8), 4, shift)
    with torch.no_grad():
        y_global = mhsa(x.reshape(2, 64, 8), mask=mask).reshape(2, 8, 8, 8)
        torch.testing.assert_close(wa(x), y_global, **TOL)


def test_shifted_weights_zero_outside_region_and_fast_equals_reference():
    torch.manual_seed(0)
    ref = WindowAttention2d(8, 4, 2, 2, impl="reference").to(DT).eval()
    fast = WindowAttention2d(8, 4, 2, 2, impl="fast").to(DT).eval()
    fast.load_state_dict(ref.state_dict())
    x = torch.randn(2, 8, 8, 8, dtype=DT)
    with torch.no_grad():
        out, w = ref(x, return_weights=True)
        torch.testing.assert_close(fast(x), out, **TOL)
    assert w.shape == (2, 4, 2, 16, 16)
    # the last window mixes 4 regions after the shift: 4x4 block structure of zeros
    last = w[:, 3]
    assert (last == 0).any()
    torch.testing.assert_close(last.sum(-1), torch.ones_like(last.sum(-1)), **TOL)
    assert torch.all(w[:, 0] > 0)  # the first window is one contiguous region


def test_mask_padding_hides_padded_keys():
    torch.manual_seed(0)
    wa = WindowAttention2d(8, 4, 2, 0, mask_padding=True).to(DT).eval()
    plain = WindowAttention2d(8, 4, 2, 0).to(DT).eval()
    plain.load_state_dict(wa.state_dict())
    x = torch.randn(1, 6, 6, 8, dtype=DT)
    with torch.no_grad():
        y, w = wa(x, return_weights=True)
        y_plain = plain(x)
    # window 0 is all real; window 1 (cols 4..7) has padded cols 6, 7 as keys
    pad_cols = torch.tensor([c >= 2 for r in range(4) for c in range(4)])
    assert torch.all(w[0, 1, :, :, pad_cols] == 0)
    torch.testing.assert_close(y[:, :4, :4], y_plain[:, :4, :4], **TOL)
    assert not torch.allclose(y[:, :, 4:], y_plain[:, :, 4:])
    assert torch.isfinite(y).all()


def test_clipped_window_uses_correct_relative_offsets():
    """Clipping H and W (not only T) still reads the bias of the true offsets."""
    torch.manual_seed(0)
    wa = WindowAttention3d(4, (2, 4, 4), 1).to(DT).eval()
    small = WindowAttention3d(4, (2, 3, 2), 1).to(DT).eval()
    table = wa.relative_position_bias_table.detach().reshape(3, 7, 7, 1)
    with torch.no_grad():
        small.relative_position_bias_table.copy_(table[:, 1:6, 2:5].reshape(-1, 1))
        small.qkv.load_state_dict(wa.qkv.state_dict())
        small.proj.load_state_dict(wa.proj.state_dict())
    x = torch.randn(1, 2, 3, 2, 4, dtype=DT)  # grid equal to the small window
    with torch.no_grad():
        torch.testing.assert_close(wa(x), small(x), **TOL)


def test_gradcheck_window_attention():
    torch.manual_seed(0)
    wa = WindowAttention2d(4, 2, 2, 1).to(DT)
    x = torch.randn(1, 4, 3, 4, dtype=DT, requires_grad=True)
    assert torch.autograd.gradcheck(wa, (x,), fast_mode=True)
    wa3 = WindowAttention3d(4, 2, 1, 1).to(DT)
    x3 = torch.randn(1, 2, 3, 2, 4, dtype=DT, requires_grad=True)
    assert torch.autograd.gradcheck(wa3, (x3,), fast_mode=True)


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="num_heads"):
        WindowAttention2d(10, 4, 4)
    with pytest.raises(ValueError, match="shift_size"):
        WindowAttention2d(8, 4, 2, 4)
    with pytest.raises(ValueError, match="window_size"):
        WindowAttention(8, (4, 4, 4, 4), 2)  # (an int is accepted: test_int_window_size_everywhere)
    with pytest.raises(ValueError, match="small_grid"):
        WindowAttention2d(8, 4, 2, small_grid="crop")
    strict = WindowAttention2d(8, 4, 2, small_grid="error")
    with pytest.raises(ValueError, match="window_size"):
        strict(torch.randn(1, 3, 8, 8))  # window larger than the grid
    with pytest.raises(ValueError, match="x must be channels-last"):
        strict(torch.randn(1, 8, 8, 8, 8))
    with pytest.raises(ValueError, match="x must be channels-last"):
        strict(torch.randn(1, 8, 8, 6))


@pytest.mark.parametrize("impl", ["reference", "fast", "auto"])
@pytest.mark.parametrize(
    "make,shape",
    [
        (lambda: WindowAttention2d(8, 4, 2), (0, 8, 8, 8)),
        (lambda: WindowAttention2d(8, 4, 2, shift_size=2), (0, 7, 10, 8)),
        (lambda: WindowAttention3d(8, (2, 4, 4), 2, shift_size=(1, 2, 2)), (0, 2, 8, 8, 8)),
        (lambda: SwinBlock(8, 2, (4, 4), shift_size=2), (0, 8, 8, 8)),
        (lambda: MultiheadSelfAttention(8, 2), (0, 5, 8)),
        # empty grids: no position, so no window (before: an error or a division by zero)
        (lambda: WindowAttention2d(8, 4, 2), (2, 0, 8, 8)),
        (lambda: WindowAttention2d(8, 4, 2, shift_size=2), (2, 7, 0, 8)),
        (lambda: WindowAttention2d(8, 4, 2, small_grid="error"), (2, 0, 0, 8)),
        (lambda: WindowAttention3d(8, (2, 4, 4), 2, shift_size=(1, 2, 2)), (2, 0, 8, 8, 8)),
        (lambda: WindowAttention3d(8, (2, 4, 4), 2), (2, 2, 5, 0, 8)),
        (lambda: SwinBlock(8, 2, (4, 4), shift_size=2), (2, 8, 0, 8)),
        (lambda: MultiheadSelfAttention(8, 2), (2, 0, 8)),
    ],
    ids=[
        "w2d",
        "sw2d-padded",
        "sw3d",
        "swin-block",
        "mhsa",
        "w2d-H=0",
        "sw2d-W=0",
        "w2d-strict-0x0",
        "sw3d-T=0",
        "w3d-clip-W=0",
        "swin-block-W=0",
        "mhsa-n=0",
    ],  # fmt: skip
)
def test_empty_batch_or_grid_gives_empty_output(make, shape, impl):
    module = make()
    for m in module.modules():
        if hasattr(m, "impl"):
            m.impl = impl
    x = torch.randn(shape, requires_grad=True)
    out = module(x)
    assert out.shape == x.shape
    out.sum().backward()
    assert x.grad.shape == x.shape
    for name, p in module.named_parameters():  # zero gradients where any, never NaN
        assert p.grad is None or torch.count_nonzero(p.grad) == 0, name
    if isinstance(module, (WindowAttention2d, WindowAttention3d)) and 0 in shape[1:-1]:
        out, weights = module(x, return_weights=True)
        assert out.shape == x.shape and weights.shape[:3] == (shape[0], 0, 2)
