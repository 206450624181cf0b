"""The non-local block: identity at init, fast == reference, modes, subsampling, autocast, errors."""

import itertools

import pytest
import torch

from nlnet.functional.nonlocal_op import INSTANTIATIONS
from nlnet.layers.nonlocal_block import NonLocal1d, NonLocal2d, NonLocal3d, NonLocalNd


@pytest.fixture(autouse=True)
def _seeded():
    """Each test starts from the same random state (whatever ran before it)."""
    torch.manual_seed(0)


BLOCKS = {1: NonLocal1d, 2: NonLocal2d, 3: NonLocal3d}
SIZES = {1: (11,), 2: (7, 9), 3: (3, 5, 7)}  # odd sizes on purpose


def _activated(block):
    """A block whose output path is live (BN scale / W_z no longer zero), in float64."""
    block = block.double()
    with torch.no_grad():
        if isinstance(
            block.norm, torch.nn.BatchNorm1d | torch.nn.BatchNorm2d | torch.nn.BatchNorm3d
        ):
            block.norm.weight.normal_()
            block.norm.bias.normal_()
        else:
            block.W_z.weight.normal_()
    return block


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("instantiation", INSTANTIATIONS)
@pytest.mark.parametrize("norm", ["bn", None])
def test_new_block_is_exactly_identity(dim, instantiation, norm):
    block = BLOCKS[dim](4, instantiation=instantiation, norm=norm)
    x = torch.randn(2, 4, *SIZES[dim])
    block.train()
    assert torch.equal(block(x), x)
    block.eval()
    assert torch.equal(block(x), x)


CASES = [
    (dim, inst, mode, ss, pos)
    for dim in (1, 2, 3)
    for inst in INSTANTIATIONS
    for mode in (("spacetime", "space", "time") if dim == 3 else ("spacetime",))
    for ss, pos in ((False, "before"), (True, "before"), (True, "after"))
]


@pytest.mark.parametrize("dim,instantiation,mode,sub_sample,pool_position", CASES)
def test_fast_equals_reference(dim, instantiation, mode, sub_sample, pool_position):
    kw = dict(instantiation=instantiation, sub_sample=sub_sample, pool_position=pool_position)
    if dim == 3:
        kw["mode"] = mode
    block = _activated(BLOCKS[dim](4, inter_channels=3, **kw)).train()
    x = torch.randn(2, 4, *SIZES[dim], dtype=torch.float64, requires_grad=True)
    results = {}
    for impl in ("fast", "reference"):
        block.impl = impl
        z = block(x)
        loss = (z * torch.cos(torch.arange(z.numel(), dtype=torch.float64)).view_as(z)).sum()
        grads = torch.autograd.grad(loss, [x, *block.parameters()])
        results[impl] = (z, grads)
    torch.testing.assert_close(results["fast"][0], results["reference"][0], rtol=1e-10, atol=1e-10)
    for gf, gr in zip(results["fast"][1], results["reference"][1]):
        torch.testing.assert_close(gf, gr, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("instantiation", INSTANTIATIONS)
@pytest.mark.parametrize("mode", ["spacetime", "space", "time"])
def test_gradcheck_block(instantiation, mode):
    block = _activated(
        NonLocal3d(3, inter_channels=2, instantiation=instantiation, mode=mode, impl="fast")
    ).eval()
    x = torch.randn(1, 3, 2, 4, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(block, (x,), fast_mode=True)


def test_space_and_time_maps_are_zero_outside_frame_and_position():
    T, H, W = 3, 4, 6
    x = torch.randn(1, 4, T, H, W)
    # space: query (t, h, w) only sees keys of pooled frame t (kernel (1, 2, 2))
    block = NonLocal3d(4, mode="space")
    _, attn = block(x, return_attention=True)
    Hk, Wk = H // 2, W // 2
    a = attn.view(T, H * W, T, Hk * Wk)
    for t, t2 in itertools.product(range(T), range(T)):
        if t != t2:
            assert torch.count_nonzero(a[t, :, t2]) == 0
    torch.testing.assert_close(attn.sum(-1), torch.ones(1, T * H * W))
    # time: query (t, h, w) only sees keys at the pooled cell (h // 2, w // 2), every frame
    block = NonLocal3d(4, mode="time")
    _, attn = block(x, return_attention=True)
    a = attn.view(T, H, W, T, Hk, Wk)
    for h, w, h2, w2 in itertools.product(range(H), range(W), range(Hk), range(Wk)):
        nz = torch.count_nonzero(a[:, h, w, :, h2, w2])
        assert (nz > 0) == (h // 2 == h2 and w // 2 == w2)
    torch.testing.assert_close(attn.sum(-1), torch.ones(1, T * H * W))


def test_attention_map_shape_and_return():
    block = NonLocal3d(8, sub_sample=True)
    x = torch.randn(2, 8, 4, 6, 10)
    z, attn = block(x, return_attention=True)
    assert z.shape == x.shape
    assert attn.shape == (2, 4 * 6 * 10, 4 * 3 * 5)
    assert block.key_grid((4, 6, 10)) == (4, 3, 5)


def test_odd_sizes_with_pooling_floor():
    block = NonLocal2d(4, sub_sample=2)
    x = torch.randn(1, 4, 5, 7)
    z, attn = block(x, return_attention=True)
    assert attn.shape == (1, 35, 2 * 3)
    assert block.key_grid((5, 7)) == (2, 3)


def test_parameter_names_follow_the_paper_and_state_dict_round_trip():
    block = _activated(NonLocal3d(8, instantiation="concatenation"))
    names = {n.split(".")[0] for n, _ in block.named_parameters()}
    assert names == {"theta", "phi", "g", "W_z", "norm", "w_f"}
    gauss = NonLocal2d(8, instantiation="gaussian")
    assert gauss.theta is None and gauss.phi is None
    copy = _activated(NonLocal3d(8, instantiation="concatenation"))
    copy.load_state_dict(block.state_dict())
    x = torch.randn(1, 8, 2, 4, 4, dtype=torch.float64)
    block.eval(), copy.eval()
    torch.testing.assert_close(copy(x), block(x))


def test_channels_and_subsample_arguments():
    assert NonLocal2d(64).inter_channels == 32
    assert NonLocal2d(64, reduction=4).inter_channels == 16
    assert NonLocal2d(64, inter_channels=8).inter_channels == 8
    assert NonLocal3d(8).kernel == (1, 2, 2)
    assert NonLocal3d(8, sub_sample=2).kernel == (1, 2, 2)
    assert NonLocal3d(8, sub_sample=(2, 2, 2)).kernel == (2, 2, 2)
    assert NonLocal2d(8, sub_sample=False).kernel == (1, 1)
    assert NonLocal1d(8).kernel == (2,)


def test_norm_none_zero_initialises_W_z():
    block = NonLocal2d(4, norm=None)
    assert isinstance(block.norm, torch.nn.Identity)
    assert torch.count_nonzero(block.W_z.weight) == 0


@pytest.mark.parametrize("instantiation", INSTANTIATIONS)
def test_bf16_autocast_finite_for_large_logits_and_close_to_fp32(instantiation):
    block = NonLocal2d(16, instantiation=instantiation, sub_sample=False)
    with torch.no_grad():
        block.norm.weight.fill_(1.0)
    block.eval()
    # Logits in the thousands (unscaled): bf16 must not overflow to inf/nan.
    block.scale = False
    x = 30 * torch.randn(1, 16, 8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.isfinite(block(x)).all()
    # Ordinary activations with the default scale: close to the fp32 result.
    block.scale = True
    x = 3 * torch.randn(1, 16, 8, 8)
    ref = block(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = block(x)
    assert torch.isfinite(out).all()
    err = (out.float() - ref).norm() / ref.norm()
    assert err < 0.05, err


@pytest.mark.parametrize(
    "make,x,match",
    [
        (lambda: NonLocal3d(4), torch.randn(1, 4, 8, 8), "5 dims"),
        (lambda: NonLocal2d(4), torch.randn(1, 4, 2, 8, 8), "4 dims"),
        (lambda: NonLocal2d(4), torch.randn(1, 5, 8, 8), "in_channels=4"),
        (lambda: NonLocal2d(4), torch.randn(1, 4, 1, 8), "too small"),
        (lambda: NonLocal3d(4, sub_sample=(2, 2, 2)), torch.randn(1, 4, 1, 8, 8), "too small"),
        (lambda: NonLocal2d(4), torch.ones(1, 4, 8, 8, dtype=torch.long), "floating"),
    ],
)
def test_bad_input_errors(make, x, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()(x)


def test_bad_construction_errors():
    with pytest.raises(ValueError, match="mode"):
        NonLocal2d(4, mode="time")
    with pytest.raises(ValueError, match="mode"):
        NonLocal3d(4, mode="channel")
    with pytest.raises(ValueError, match="instantiation"):
        NonLocal3d(4, instantiation="cosine")
    with pytest.raises(ValueError, match="reduction"):
        NonLocal3d(4, inter_channels=2, reduction=2)
    with pytest.raises(ValueError, match="sub_sample"):
        NonLocal3d(4, sub_sample=(2, 2))
    with pytest.raises(ValueError, match="pool_position"):
        NonLocal3d(4, pool_position="middle")
    with pytest.raises(ValueError, match="dim"):
        NonLocalNd(4, 8)


@pytest.mark.parametrize("instantiation", INSTANTIATIONS)
@pytest.mark.parametrize("mode", ["spacetime", "space", "time"])
def test_block_fast_path_never_builds_the_pairwise_matrix(instantiation, mode, max_numel):
    block = NonLocal3d(
        8, inter_channels=4, instantiation=instantiation, mode=mode, sub_sample=False, impl="fast"
    )
    x = torch.randn(1, 8, 4, 16, 16, requires_grad=True)  # N = N' = 1024
    with max_numel() as rec:
        block(x).sum().backward()
    # the largest tensors are the feature maps (8 x 1024); N x N' would be 1,048,576
    assert rec.max_numel <= 16 * 1024, rec.max_numel
