"""gate="scalar": SAGAN's learnable gamma (init 0) beside BN gamma = 0 and zero W_z."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from nlnet.layers import NonLocal2d, NonLocal3d
from nlnet.layers.gate import GatedNorm


@pytest.mark.parametrize("norm", ["bn", "gn", None])
@pytest.mark.parametrize("cls,shape", [(NonLocal2d, (2, 8, 6, 6)), (NonLocal3d, (2, 8, 2, 4, 4))])
def test_scalar_gate_new_block_is_identity_and_gamma_gets_the_gradient(norm, cls, shape):
    torch.manual_seed(0)
    block = cls(8, gate="scalar", norm=norm)
    assert isinstance(block.norm, GatedNorm) and block.norm.gamma.item() == 0.0
    if norm is not None:  # the inner norm keeps scale 1: only gamma holds the identity
        assert torch.equal(block.norm.weight, torch.ones(8))
    else:
        assert block.W_z.weight.abs().sum() > 0
    x = torch.randn(shape, requires_grad=True)
    z = block(x)
    torch.testing.assert_close(z, x, rtol=0, atol=0)
    (z * torch.randn_like(z)).sum().backward()
    assert block.norm.gamma.grad is not None and block.norm.gamma.grad.abs() > 0
    # with gamma = 0 the branch's other parameters get exactly no gradient yet (as with BN 0)
    assert block.theta.weight.grad.abs().sum() == 0
    with torch.no_grad():
        block.norm.gamma.sub_(0.1 * block.norm.gamma.grad)  # one SGD step on gamma
    assert not torch.allclose(block(x), x)


def test_scalar_gate_paths_agree_and_eval_matches_train_formula():
    torch.manual_seed(0)
    block = NonLocal2d(8, gate="scalar")
    with torch.no_grad():
        block.norm.gamma.fill_(0.7)
    x = torch.randn(2, 8, 10, 10)
    block.train()
    block(x)  # running statistics
    block.eval()
    ref = NonLocal2d(8, gate="scalar", impl="reference")
    ref.load_state_dict(block.state_dict())
    ref.eval()
    with torch.no_grad():
        z, z_ref = block(x), ref(x)
        # z = gamma * BN(W_z y) + x: compare against the ungated block scaled by hand
        plain = NonLocal2d(8, impl="reference").eval()
        sd = {k.replace("norm.inner.", "norm."): v for k, v in block.state_dict().items()}
        sd.pop("norm.gamma")
        plain.load_state_dict(sd)
        expected = 0.7 * (plain(x) - x) + x
    torch.testing.assert_close(z, z_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(z, expected, rtol=1e-5, atol=1e-5)
    assert "norm.gamma" in dict(block.named_parameters())


def test_scalar_gate_traces_and_bad_value_is_one_line():
    block = NonLocal2d(8, gate="scalar").eval()
    with torch.no_grad():
        block.norm.gamma.fill_(0.5)
    x = torch.randn(1, 8, 6, 6)
    gm = torch.fx.symbolic_trace(block)
    with torch.no_grad():
        torch.testing.assert_close(gm(x), block(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="gate must be one of"):
        NonLocal2d(8, gate="vector")


def test_gate_reaches_blocks_through_the_registry():
    from nlnet.models import create_model
    from nlnet.models.surgery import non_local_blocks

    with torch.device("meta"):
        model = create_model("c2d_r50_nl5", gate="scalar")
    blocks = [b for _, b in non_local_blocks(model)]
    assert len(blocks) == 5 and all(isinstance(b.norm, GatedNorm) for b in blocks)
    assert all(isinstance(b.norm.inner, nn.BatchNorm3d) for b in blocks)


@pytest.mark.parametrize("gate", [None, "scalar"])
def test_gamma_init_starts_the_scale_and_lets_theta_learn_at_once(gate):
    torch.manual_seed(0)
    block = NonLocal3d(8, gate=gate, gamma_init=0.1)
    scale = block.norm.gamma if gate else block.norm.weight
    assert torch.equal(scale, torch.full_like(scale, 0.1))
    x = torch.randn(2, 8, 2, 4, 4, requires_grad=True)
    z = block(x)
    assert not torch.allclose(z, x)  # no longer the identity
    (z * torch.randn_like(z)).sum().backward()
    assert block.theta.weight.grad.abs().sum() > 0  # the first step reaches theta
    torch.manual_seed(0)
    assert torch.equal(NonLocal3d(8, gamma_init=0.0)(x), x)  # 0: the paper's identity


def test_gamma_init_checks():
    for kw, match in ((dict(init="w_z"), "init='w_z'"), (dict(norm=None), "norm=None"),
                      (dict(gamma_init=float("inf")), "finite")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            NonLocal2d(8, **{"gamma_init": 0.1, **kw})
    assert "gamma_init=0.1" in repr(NonLocal2d(8, gamma_init=0.1))
