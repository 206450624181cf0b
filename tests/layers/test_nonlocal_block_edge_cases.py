"""Edge cases of the non-local block over all instantiations, 1D/2D/3D, modes and paths: empty
batches and grids, non-finite inputs, large logits, and one clear error per malformed argument."""

import itertools
import math

import pytest
import torch

from nlnet.layers.nonlocal_block import NonLocal1d, NonLocal2d, NonLocal3d

SIZES = {1: (8,), 2: (4, 6), 3: (2, 4, 6)}
IMPLS = ("reference", "fast", "auto")


@pytest.mark.parametrize("sub_sample", [False, True])
def test_empty_batch_gives_empty_output(nl_config, make_nl_block, sub_sample):
    dim, inst, mode = nl_config
    block = make_nl_block(dim, inst, mode, sub_sample=sub_sample)
    for impl in IMPLS:
        block.impl = impl
        for training in (True, False):
            block.train(training)
            x = torch.randn(0, 4, *SIZES[dim], requires_grad=True)
            z = block(x)
            assert z.shape == x.shape
            z.sum().backward()
            assert x.grad.shape == x.shape


def _empty_grids(dim):
    """Each axis of the grid set to 0 in turn: (0, W), (H, 0), ... (N = N' = 0)."""
    size = SIZES[dim]
    return [size[:axis] + (0,) + size[axis + 1 :] for axis in range(dim)]


@pytest.mark.parametrize("sub_sample", [False, True])
def test_empty_grid_gives_empty_output_and_zero_gradients(nl_config, make_nl_block, sub_sample):
    dim, inst, mode = nl_config
    extra = [{}, {"temporal_groups": 2}] if dim == 3 else [{}]
    for kw, impl, training, grid in itertools.product(
        extra, IMPLS, (True, False), _empty_grids(dim)
    ):
        block = make_nl_block(dim, inst, mode, sub_sample=sub_sample, impl=impl, **kw)
        block.train(training)
        block.norm.running_mean.fill_(0.5)
        x = torch.randn(2, 4, *grid, requires_grad=True)
        z = block(x)
        assert z.shape == x.shape, (kw, impl, training, grid)
        z.sum().backward()
        assert x.grad.shape == x.shape
        for name, p in block.named_parameters():  # zero gradients, never None or NaN
            assert p.grad is not None and torch.count_nonzero(p.grad) == 0, name
        # BatchNorm treats the empty map as PyTorch treats an empty batch: statistics kept
        assert torch.equal(block.norm.running_mean, torch.full((4,), 0.5))
        assert torch.equal(block.norm.running_var, torch.ones(4))
        with torch.no_grad():
            assert block(x).shape == x.shape
        z, attn = block(x, return_attention=True)
        assert z.shape == x.shape and attn.shape == (2, 0, 0)


@pytest.mark.parametrize("norm", ["gn", "ln", "affine", None])
def test_empty_grid_with_every_norm(norm):
    block = NonLocal2d(4, norm=norm, norm_groups=2 if norm == "gn" else None)
    x = torch.randn(2, 4, 5, 0, requires_grad=True)
    z = block(x)
    assert z.shape == x.shape
    z.sum().backward()
    assert all(torch.count_nonzero(p.grad) == 0 for p in block.parameters())


def test_grid_too_small_for_the_pooling_kernel_is_still_an_error():
    # size 0: an empty output; sizes 1 (non-zero but smaller than the kernel 2): an error
    for size in [(1, 6), (4, 1), (0, 1)]:
        with pytest.raises(ValueError, match="too small for the sub_sample kernel"):
            NonLocal2d(4)(torch.randn(2, 4, *size))
        with pytest.raises(ValueError, match="too small for the sub_sample kernel"):
            NonLocal2d(4).key_grid(size)
    assert NonLocal2d(4).key_grid((0, 6)) == (0, 3)
    assert NonLocal2d(4, sub_sample=False)(torch.randn(2, 4, 1, 0)).shape == (2, 4, 1, 0)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_input_propagates_the_same_way_on_every_path(nl_config, make_nl_block, value):
    dim, inst, mode = nl_config
    block = make_nl_block(dim, inst, mode)
    x = torch.randn(3, 4, *SIZES[dim])
    bad = x.clone()
    bad.view(3, -1)[1, 5] = value  # sample 1 only
    for training in (True, False):
        block.train(training)
        outs = {}
        for impl in IMPLS:
            block.impl = impl
            block.norm.reset_running_stats()
            if training:
                outs[impl] = block(bad.clone().requires_grad_())
            else:
                with torch.no_grad():
                    outs[impl] = block(bad)
        for impl, z in outs.items():
            if training:  # batch statistics mix the samples: everything is NaN
                assert torch.isnan(z).all(), (impl, training)
            else:  # the rule: the sample with a non-finite value is NaN, the others are not
                assert torch.isnan(z[1]).all(), impl
                assert torch.isfinite(z[[0, 2]]).all(), impl
                torch.testing.assert_close(z[[0, 2]], outs["reference"][[0, 2]])


def test_large_inputs_give_finite_gradients_on_every_path(nl_config, make_nl_block):
    dim, inst, mode = nl_config
    block = make_nl_block(dim, inst, mode).train()
    x = 1e4 * torch.randn(2, 4, *SIZES[dim])
    outs = {}
    for impl in IMPLS:
        block.impl = impl
        block.zero_grad()
        xx = x.clone().requires_grad_()
        z = block(xx)
        z.square().mean().backward()
        grads = [xx.grad] + [p.grad for p in block.parameters() if p.grad is not None]
        assert all(torch.isfinite(gr).all() for gr in grads), impl
        outs[impl] = z.detach()
    torch.testing.assert_close(outs["fast"], outs["reference"], rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(outs["auto"], outs["reference"], rtol=1e-3, atol=1e-3)


def test_mixed_dtypes_between_input_and_block_are_one_clear_error():
    block = NonLocal2d(4)
    with pytest.raises(TypeError, match=r"NonLocal2d has torch.float32 parameters but x is"):
        block(torch.randn(1, 4, 4, 4, dtype=torch.float64))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast mixes dtypes on purpose
        assert block(torch.randn(1, 4, 4, 4).bfloat16()).shape == (1, 4, 4, 4)


@pytest.mark.parametrize("scale", [math.inf, math.nan, 0.0, -2.0])
def test_bad_scale_is_rejected_at_construction(scale):
    with pytest.raises(ValueError, match="scale must be a bool or a finite positive float"):
        NonLocal3d(4, scale=scale)


def test_return_attention_must_be_a_bool():
    with pytest.raises(TypeError, match="return_attention"):
        NonLocal1d(4)(torch.randn(1, 4, 6), return_attention="yes")
