"""Block options: keyword-only arguments, bias=False, norm choices, BN eps/momentum, temporal
groups; each checked against the reference path and an independent straightforward block."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nlnet.functional.nonlocal_op import INSTANTIATIONS
from nlnet.layers.nonlocal_block import NORMS, NonLocal1d, NonLocal2d, NonLocal3d, NonLocalNd

BLOCKS = {1: NonLocal1d, 2: NonLocal2d, 3: NonLocal3d}
SIZES = {1: (8,), 2: (4, 6), 3: (4, 4, 6)}


class GuideBlock(nn.Module):
    """The practitioner's guide's embedded-Gaussian block, written out independently."""

    def __init__(self, c, reduction=2, sub_sample=1):
        super().__init__()
        d = max(c // reduction, 1)
        self.theta, self.phi, self.g = (nn.Conv2d(c, d, 1, bias=False) for _ in range(3))
        self.W_z = nn.Conv2d(d, c, 1, bias=False)
        self.bn = nn.BatchNorm2d(c)
        self.k = sub_sample

    def forward(self, x):
        B, _, H, W = x.shape
        xh = F.max_pool2d(x, self.k) if self.k > 1 else x
        theta = self.theta(x).flatten(2).transpose(1, 2)  # (B, N, d)
        phi = self.phi(xh).flatten(2)  # (B, d, N')
        g = self.g(xh).flatten(2).transpose(1, 2)  # (B, N', d)
        y = torch.bmm(torch.bmm(theta, phi).softmax(-1), g)  # (B, N, d)
        y = y.transpose(1, 2).reshape(B, -1, H, W)
        return self.bn(self.W_z(y)) + x


def test_arguments_after_in_channels_are_keyword_only():
    for call in (lambda: NonLocal2d(512, 2), lambda: NonLocal3d(8, 4, "dot_product")):
        with pytest.raises(TypeError, match=r"keyword-only.*reduction=") as err:
            call()
        assert "inter_channels=" in str(err.value)
    with pytest.raises(TypeError, match="NonLocalNd takes in_channels"):
        NonLocalNd(2, 8, 4)
    assert NonLocal2d(in_channels=512, reduction=2).inter_channels == 256
    assert NonLocal1d(8, inter_channels=2).inter_channels == 2


@pytest.mark.parametrize("sub_sample", [1, 2])
@pytest.mark.parametrize("training", [True, False])
def test_guide_block_with_mapped_weights_equals_nlnet(sub_sample, training):
    torch.manual_seed(0)
    guide = GuideBlock(8, reduction=2, sub_sample=sub_sample).double()
    with torch.no_grad():
        guide.W_z.weight.normal_()  # the guide zero-initialises W_z: make the path live
        guide.bn.weight.uniform_(0.5, 1.5)
        guide.bn.bias.normal_()
        guide.bn.running_mean.normal_()
        guide.bn.running_var.uniform_(0.5, 2)
    block = NonLocal2d(8, reduction=2, sub_sample=sub_sample, bias=False, scale=False).double()
    assert block.theta.bias is None and block.phi.bias is None and block.g.bias is None
    block.load_state_dict({k.replace("bn.", "norm."): v for k, v in guide.state_dict().items()})
    guide.train(training), block.train(training)
    x = torch.randn(2, 8, 6, 6, dtype=torch.float64)
    expected = guide(x)
    for impl in ("reference", "fast", "auto"):
        block.impl = impl
        torch.testing.assert_close(block(x), expected)


def _independent_norm(kind, z, norm):
    """The norms written out: GroupNorm, LayerNorm over channels, per-channel affine."""
    shape = (1, -1) + (1,) * (z.dim() - 2)
    w, b = norm.weight.view(shape), norm.bias.view(shape)
    if kind == "gn":
        zg = z.reshape(z.shape[0], norm.num_groups, -1)
        zn = (zg - zg.mean(-1, keepdim=True)) / (
            zg.var(-1, unbiased=False, keepdim=True) + norm.eps
        ).sqrt()
        return zn.reshape(z.shape) * w + b
    if kind == "ln":
        zn = (z - z.mean(1, keepdim=True)) / (
            z.var(1, unbiased=False, keepdim=True) + norm.eps
        ).sqrt()
        return zn * w + b
    return z * w + b  # affine


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("norm", NORMS)
def test_norm_choices_start_as_identity_and_match_reference(dim, norm):
    x = torch.randn(2, 8, *SIZES[dim], dtype=torch.float64)
    block = BLOCKS[dim](8, norm=norm, norm_eps=1e-3).double()
    assert torch.equal(block(x), x)  # identity at init, whatever the norm
    with torch.no_grad():
        for p in block.norm.parameters():
            p.normal_()
        if norm is None:
            block.W_z.weight.normal_()
    block.eval()
    block.impl = "reference"
    out = {"reference": block(x)}
    for impl in ("fast", "auto"):
        block.impl = impl
        torch.testing.assert_close(block(x), out["reference"])
    if norm in ("gn", "ln", "affine"):  # against the norms written out
        block.impl = "reference"
        z_pre = out["reference"] - x  # norm(W_z y)
        block.norm, saved = nn.Identity(), block.norm
        w_z_y = block(x) - x
        torch.testing.assert_close(z_pre, _independent_norm(norm, w_z_y, saved))


def test_norm_arguments_reach_the_norm():
    block = NonLocal3d(16, norm_eps=1e-3, norm_momentum=0.5)
    assert block.norm.eps == 1e-3 and block.norm.momentum == 0.5
    with torch.no_grad():
        block.W_z.weight.normal_()
    x = torch.randn(2, 16, 2, 4, 4)
    block.train()(x)
    # one step from running_mean = 0 with momentum 0.5: half the batch mean of norm's input
    assert torch.count_nonzero(block.norm.running_mean) > 0
    gn = NonLocal2d(16, norm="gn", norm_groups=4, norm_eps=1e-4)
    assert isinstance(gn.norm, nn.GroupNorm) and gn.norm.num_groups == 4 and gn.norm.eps == 1e-4
    assert NonLocal2d(24, norm="gn").norm.num_groups == 8  # gcd(32, 24)
    for kwargs, match in [
        ({"norm": "in"}, "norm must be one of"),
        ({"norm_eps": 0.0}, "norm_eps"),
        ({"norm_momentum": 2.0}, "norm_momentum"),
        ({"norm": "gn", "norm_groups": 5}, "norm_groups=5 must divide"),
        ({"norm_groups": 4}, "norm_groups applies to norm='gn' only"),
        ({"bias": 0}, "bias must be True or False"),
    ]:
        with pytest.raises((ValueError, TypeError), match=match):
            NonLocal2d(16, **kwargs)


def test_bn_momentum_is_pytorch_convention():
    block = NonLocal2d(4, norm_momentum=0.25, sub_sample=False)
    with torch.no_grad():
        block.W_z.weight.normal_()
    x = torch.randn(3, 4, 5, 5)
    block.train()
    z_in = {}
    block.norm.register_forward_hook(lambda m, a, o: z_in.setdefault("z", a[0].detach()))
    block(x)
    mean = z_in["z"].mean(dim=(0, 2, 3))
    torch.testing.assert_close(block.norm.running_mean, 0.25 * mean)


CASES = [
    (inst, mode, ss)
    for inst in INSTANTIATIONS
    for mode in ("spacetime", "space", "time")
    for ss in ((1, 2, 2), (2, 2, 2))
]


@pytest.mark.parametrize("instantiation,mode,sub_sample", CASES)
def test_temporal_groups_fast_equals_reference_and_per_group_blocks(
    instantiation, mode, sub_sample
):
    torch.manual_seed(0)
    kw = dict(instantiation=instantiation, mode=mode, sub_sample=sub_sample)
    block = NonLocal3d(4, temporal_groups=2, **kw).double()
    with torch.no_grad():
        block.norm.weight.normal_()
    block.eval()
    x = torch.randn(2, 4, 6, 4, 4, dtype=torch.float64, requires_grad=True)
    outs = {}
    for impl in ("reference", "fast", "auto"):
        block.impl = impl
        z = block(x)
        outs[impl] = (z, torch.autograd.grad(z.square().sum(), x)[0])
    for impl in ("fast", "auto"):
        torch.testing.assert_close(outs[impl][0], outs["reference"][0])
        torch.testing.assert_close(outs[impl][1], outs["reference"][1])
    # independent: the same block without groups on each group of 2 frames on its own
    plain = NonLocal3d(4, **kw).double().eval()
    plain.load_state_dict(block.state_dict())
    expected = torch.cat([plain(x[:, :, t : t + 2]) for t in range(0, 6, 2)], dim=2)
    torch.testing.assert_close(outs["reference"][0], expected)


def test_temporal_groups_attention_map_and_errors():
    block = NonLocal3d(4, temporal_groups=2, sub_sample=False)
    _, attn = block(torch.randn(1, 4, 4, 2, 2), return_attention=True)
    a = attn.view(4, 4, 4, 4)  # (t, hw, t', h'w')
    for t, t2 in itertools.product(range(4), range(4)):
        assert (torch.count_nonzero(a[t, :, t2]) > 0) == (t // 2 == t2 // 2)
    with pytest.raises(ValueError, match="temporal_groups=2 must divide the number of frames"):
        block(torch.randn(1, 4, 3, 2, 2))
    with pytest.raises(ValueError, match="3D"):
        NonLocal2d(4, temporal_groups=2)
    with pytest.raises(ValueError, match="multiple of the temporal sub_sample kernel"):
        NonLocal3d(4, temporal_groups=3, sub_sample=(2, 2, 2))


def test_new_options_reach_blocks_through_the_model_registry():
    from nlnet.models.registry import create_model

    with torch.device("meta"):
        model = create_model("c2d_tiny_nl1", bias=False, norm="gn", temporal_groups=2)
    blocks = [m for m in model.modules() if isinstance(m, NonLocalNd)]
    assert blocks and all(b.theta.bias is None for b in blocks)
    assert all(isinstance(b.norm, nn.GroupNorm) and b.temporal_groups == 2 for b in blocks)


@pytest.mark.parametrize("bias", [True, False])
def test_phi_init_theta_starts_phi_as_theta(bias):
    """phi_init="theta": phi is a copy of theta (a similarity score at the start), the other
    weights are those of the default block with the same seed, and phi trains on its own."""
    torch.manual_seed(0)
    ref = NonLocal2d(8, bias=bias)
    torch.manual_seed(0)
    block = NonLocal2d(8, bias=bias, phi_init="theta")
    assert torch.equal(block.phi.weight, block.theta.weight)
    assert not torch.equal(ref.phi.weight, ref.theta.weight)
    for name in ("theta", "g", "W_z"):  # the same random stream as the default block
        assert torch.equal(getattr(block, name).weight, getattr(ref, name).weight)
    assert block.phi.weight.data_ptr() != block.theta.weight.data_ptr()  # not shared
    # the initial score matrix theta(x)^T phi(x) is symmetric positive semi-definite
    x = torch.randn(2, 8, 4, 4)
    t = block.theta(x).flatten(2)
    p = block.phi(x).flatten(2)
    scores = t.transpose(1, 2) @ p
    torch.testing.assert_close(scores, scores.transpose(1, 2))
    if not bias:
        assert torch.linalg.eigvalsh(scores).min() > -1e-4
    block.norm.weight.data.fill_(1.0)
    block(x).sum().backward()
    torch.optim.SGD(block.parameters(), lr=0.1).step()
    assert not torch.equal(block.phi.weight, block.theta.weight)


def test_phi_init_checks():
    with pytest.raises(ValueError, match="phi_init"):
        NonLocal2d(8, phi_init="same")
    with pytest.raises(ValueError, match="phi_init='theta' needs theta and phi"):
        NonLocal2d(8, instantiation="gaussian", phi_init="theta")
