"""The re-associated explicit path (W_theta moved to the keys, W_z to the values) equals the
textbook order; its plan is the multiply-add count."""

import itertools

import pytest
import torch

from nlnet.functional.nonlocal_op import non_local
from nlnet.functional.reassociated import reassociated_non_local, reassociation_plan

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
