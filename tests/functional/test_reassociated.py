"""The re-associated explicit path (W_theta moved to the keys, W_z to the values) equals the
textbook order, and ``impl="auto"`` takes it exactly where the multiply-add count says so."""

import itertools

import pytest
import torch

from nlnet.functional.nonlocal_op import non_local
from nlnet.functional.reassociated import reassociated_non_local, reassociation_plan
from nlnet.layers.nonlocal_block import NonLocal1d, NonLocal2d, NonLocal3d

FORMS = ("gaussian", "embedded_gaussian", "dot_product")
PLANS = list(itertools.product((False, True), repeat=2))


def _operands(form, bias, z_bias, c=6, d=3, n=10, n_keys=4, requires_grad=False):
    gen = torch.Generator().manual_seed(0)
    make = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    d_q = c if form == "gaussian" else d
    ops = {
        "x": make(2, c, n),
        "phi": make(2, d_q, n_keys),
        "g": make(2, d, n_keys),
        "w_theta": None if form == "gaussian" else make(d, c, 1, 1),
        "b_theta": make(d) if bias and form != "gaussian" else None,
        "w_z": make(c, d, 1, 1),
        "b_z": make(c) if z_bias else None,
    }
    for t in ops.values():
        if t is not None:
            t.requires_grad_(requires_grad)
    return ops


def _textbook(ops, form):
    """theta = W_theta x + b_theta, y = A g (the reference op), then W_z y + b_z."""
    x, w_theta = ops["x"], ops["w_theta"]
    if w_theta is None:
        theta = x
    else:
        theta = torch.einsum("dc,bcn->bdn", w_theta.flatten(1), x)
        if ops["b_theta"] is not None:
            theta = theta + ops["b_theta"].view(1, -1, 1)
    y = non_local(
        theta.transpose(1, 2), ops["phi"].transpose(1, 2), ops["g"].transpose(1, 2), form,
        impl="reference",
    )  # (B, N, d_v)  # fmt: skip
    out = torch.einsum("cd,bnd->bcn", ops["w_z"].flatten(1), y)
    return out if ops["b_z"] is None else out + ops["b_z"].view(1, -1, 1)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("plan", PLANS, ids=lambda p: f"query{int(p[0])}-value{int(p[1])}")
@pytest.mark.parametrize("bias,z_bias", [(True, True), (False, False), (True, False)])
def test_every_association_equals_the_textbook_order_in_float64(form, plan, bias, z_bias):
    ops = _operands(form, bias, z_bias)
    out = reassociated_non_local(*ops.values(), form, plan=plan)
    torch.testing.assert_close(out, _textbook(ops, form), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("form", FORMS)
def test_gradients_of_the_reassociated_path(form):
    ops = _operands(form, True, True, c=4, d=2, n=6, n_keys=3, requires_grad=True)
    names = [k for k, v in ops.items() if v is not None]

    def f(*tensors):
        kw = dict(ops, **dict(zip(names, tensors)))
        return reassociated_non_local(*kw.values(), form, plan=(True, True))

    assert torch.autograd.gradcheck(f, [ops[k] for k in names], fast_mode=True)


def test_plan_is_the_multiply_add_count():
    # d = d_v = C/2 and N' = N/4: cheaper exactly when N' < 3C/4 (N N' < C (N - N'))
    assert reassociation_plan("embedded_gaussian", 196, 49, 512, 256, 256) == (True, True)
    assert reassociation_plan("embedded_gaussian", 784, 196, 512, 256, 256) == (True, True)
    assert reassociation_plan("embedded_gaussian", 3136, 784, 512, 256, 256) == (False, False)
    assert reassociation_plan("embedded_gaussian", 1532, 383, 512, 256, 256) == (True, True)
    assert reassociation_plan("embedded_gaussian", 1536, 384, 512, 256, 256) == (False, False)
    # keys on the full grid never gain; gaussian has no W_theta (query side)
    assert reassociation_plan("embedded_gaussian", 196, 196, 512, 256, 256) == (False, False)
    assert reassociation_plan("gaussian", 196, 49, 512, 512, 256) == (False, True)
    assert reassociation_plan("concatenation", 196, 49, 512, 256, 256)[0] is False


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
    assert block._reassociates(x)
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
    assert not NonLocal2d(32, sub_sample=False)._reassociates(x)  # N' = N: never cheaper
    assert not NonLocal2d(8)._reassociates(torch.randn(1, 8, 8, 8))  # C small: no saving
    assert not NonLocal2d(32, impl="fast")._reassociates(x)  # fast: no N x N' matrix
    assert not NonLocal2d(32, instantiation="concatenation")._reassociates(x)
    assert not NonLocal3d(32, mode="space")._reassociates(torch.randn(1, 32, 2, 8, 8))
    assert NonLocal3d(32)._reassociates(torch.randn(1, 32, 2, 4, 4))
    assert NonLocal1d(32)._reassociates(torch.randn(1, 32, 16))  # N' = N/2: when N < C
