"""Edge cases of the non-local block over all instantiations, 1D/2D/3D, modes and paths: empty
batches and grids, non-finite inputs, large logits, and one clear error per malformed argument."""

import math

import pytest
import torch

from nlnet.functional.nonlocal_op import INSTANTIATIONS
from nlnet.layers.nonlocal_block import NonLocal1d, NonLocal2d, NonLocal3d

BLOCKS = {1: NonLocal1d, 2: NonLocal2d, 3: NonLocal3d}
SIZES = {1: (8,), 2: (4, 6), 3: (2, 4, 6)}
IMPLS = ("reference", "fast", "auto")
CONFIGS = [
    (dim, inst, mode)
    for dim in (1, 2, 3)
    for inst in INSTANTIATIONS
    for mode in (("spacetime", "space", "time") if dim == 3 else ("spacetime",))
]
IDS = [f"{d}d-{i}-{m}" for d, i, m in CONFIGS]


def _block(dim, inst, mode, **kw):
    torch.manual_seed(0)
    block = BLOCKS[dim](4, instantiation=inst, **({"mode": mode} if dim == 3 else {}), **kw)
    with torch.no_grad():
        block.norm.weight.normal_()  # a live output path
    return block


@pytest.mark.parametrize("dim,inst,mode", CONFIGS, ids=IDS)
@pytest.mark.parametrize("sub_sample", [False, True])
def test_empty_batch_gives_empty_output(dim, inst, mode, sub_sample):
    block = _block(dim, inst, mode, sub_sample=sub_sample)
    for impl in IMPLS:
        block.impl = impl
        for training in (True, False):
            block.train(training)
            x = torch.randn(0, 4, *SIZES[dim], requires_grad=True)
            z = block(x)
            assert z.shape == x.shape
            z.sum().backward()
            assert x.grad.shape == x.shape
    # an empty grid: a clear error, as nn.Conv gives (its message is less direct)
    with pytest.raises(ValueError, match="empty grid"):
        block(torch.randn(2, 4, *SIZES[dim][:-1], 0))


@pytest.mark.parametrize("dim,inst,mode", CONFIGS, ids=IDS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_input_propagates_the_same_way_on_every_path(dim, inst, mode, value):
    block = _block(dim, inst, mode)
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


@pytest.mark.parametrize("dim,inst,mode", CONFIGS, ids=IDS)
def test_large_inputs_give_finite_gradients_on_every_path(dim, inst, mode):
    block = _block(dim, inst, mode).train()
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
