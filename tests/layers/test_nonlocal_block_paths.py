"""The block's speed paths equal its reference path: the re-associated explicit path that
``impl="auto"`` takes where it saves multiply-adds, and the eval-mode BatchNorm folded into W_z."""

import pytest
import torch

from nlnet.layers.nonlocal_block import NonLocal1d, NonLocal2d, NonLocal3d


def _reassociates(block, x):
    """Whether the block's plan for ``x`` is the explicit matrix with re-associated projections."""
    return block.plan(x).path == "reassociated"


FORMS = ("gaussian", "embedded_gaussian", "dot_product")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("norm", ["bn", None])
@pytest.mark.parametrize("pool_position", ["before", "after"])
def test_block_auto_takes_it_and_equals_the_reference_path(form, norm, pool_position):
    torch.manual_seed(0)
    block = NonLocal2d(64, instantiation=form, norm=norm, pool_position=pool_position).double()
    with torch.no_grad():  # a live output path (and a W_z bias without a norm)
        for p in block.norm.parameters() if norm else block.W_z.parameters():
            p.normal_()
    x = torch.randn(2, 64, 8, 8, dtype=torch.float64, requires_grad=True)
    # N = 64, N' = 16, C = 64: 1024 < 64 * 48 (and dot_product's explicit path is the op's choice)
    assert _reassociates(block, x)
    for training in (True, False):
        block.train(training)
        outs, grads = [], []
        for impl in ("auto", "reference"):
            block.impl = impl
            block.zero_grad()
            x.grad = None
            z = block(x)
            z.square().sum().backward()
            outs.append(z.detach())
            grads.append([x.grad] + [p.grad for p in block.parameters()])
        torch.testing.assert_close(outs[0], outs[1], rtol=1e-10, atol=1e-10)
        for a, b in zip(*grads):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_block_keeps_its_paths_where_reassociation_does_not_pay_or_apply():
    x = torch.randn(1, 32, 8, 8)
    assert not _reassociates(NonLocal2d(32, sub_sample=False), x)  # N' = N: never cheaper
    assert not _reassociates(NonLocal2d(8), torch.randn(1, 8, 8, 8))  # C small: no saving
    assert not _reassociates(NonLocal2d(32, impl="fast"), x)  # fast: no N x N' matrix
    assert not _reassociates(NonLocal2d(32, instantiation="concatenation"), x)
    assert not _reassociates(NonLocal3d(32, mode="space"), torch.randn(1, 32, 2, 8, 8))
    assert _reassociates(NonLocal3d(32), torch.randn(1, 32, 2, 4, 4))
    assert _reassociates(NonLocal1d(32), torch.randn(1, 32, 16))  # N' = N/2: when N < C


@pytest.mark.parametrize("inst", ["embedded_gaussian", "gaussian", "dot_product", "concatenation"])
@pytest.mark.parametrize("channels", [64, 8], ids=["reassociated", "textbook-order"])
@pytest.mark.parametrize("impl", ["auto", "fast"])
def test_eval_batchnorm_folded_into_w_z_equals_the_unfolded_block(inst, channels, impl):
    torch.manual_seed(0)
    block = NonLocal2d(channels, instantiation=inst, impl=impl).double()
    with torch.no_grad():  # trained-looking statistics and affine parameters
        block.norm.weight.normal_()
        block.norm.bias.normal_()
        block.norm.running_mean.normal_()
        block.norm.running_var.uniform_(0.5, 2.0)
    block.eval()
    assert block._folded_output() is not None
    x = torch.randn(2, channels, 8, 8, dtype=torch.float64, requires_grad=True)
    folded = block(x)
    grads = torch.autograd.grad(folded.square().sum(), [x, *block.parameters()])
    block.impl = "reference"  # the textbook steps: BatchNorm after W_z
    plain = block(x)
    torch.testing.assert_close(folded, plain, rtol=1e-10, atol=1e-10)
    for a, b in zip(grads, torch.autograd.grad(plain.square().sum(), [x, *block.parameters()])):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    block.train()
    assert block._folded_output() is None  # training: batch statistics, nothing to fold


def test_dot_product_takes_the_explicit_matrix_where_it_beats_associativity():
    # 16x16 at 128 channels: the op alone would take theta (phi^T g) (fewer products than
    # (theta phi^T) g), but with W_theta and W_z moved to the pooled grid the explicit matrix
    # needs fewer multiply-adds for the whole block (5.2 M against 5.5 M per sample)
    torch.manual_seed(0)
    block = NonLocal2d(128, instantiation="dot_product").double()
    with torch.no_grad():
        block.norm.weight.normal_()
    x = torch.randn(2, 128, 16, 16, dtype=torch.float64, requires_grad=True)
    assert _reassociates(block, x)
    assert not _reassociates(block, torch.randn(2, 128, 32, 32, dtype=torch.float64))
    z = block(x)
    block.impl = "reference"
    torch.testing.assert_close(z, block(x), rtol=1e-10, atol=1e-10)
