"""Optional position information of the block (``pos``) and of multi-head self-attention.

The paper's block has none: Eq. 1 of Wang et al. (CVPR 2018) is a sum over a set of positions, so
permuting the frames of a clip permutes the block's output. With ``pos="sincos"``/``"learned"``
the encoding enters the inputs of theta and phi only, so a new block is still the identity.
"""

import math

import pytest
import torch

from nlnet.functional.nonlocal_op import INSTANTIATIONS
from nlnet.functional.pos_embed import sinusoidal_grid_encoding
from nlnet.layers.attention import MultiheadSelfAttention
from nlnet.layers.block_spec import block_option_names
from nlnet.layers.nonlocal_block import (
    NonLocal1d,
    NonLocal2d,
    NonLocal3d,
    NonLocalNd,
)

BLOCKS = {1: NonLocal1d, 2: NonLocal2d, 3: NonLocal3d}
GRIDS = {1: (8,), 2: (4, 6), 3: (4, 4, 4)}
POS = ("none", "sincos", "learned")


def _live(block):
    with torch.no_grad():
        block.norm.weight.normal_()  # a trained-looking block, not the identity
    return block.eval()


def _independent_sincos(grid, channels, base=10000.0):
    """PE written per entry: pairs dealt to the axes in turn, sin/cos of coordinate * frequency."""
    k, pairs = len(grid), channels // 2
    counts = [pairs // k + (1 if a < pairs % k else 0) for a in range(k)]
    pe = torch.zeros(channels, *grid, dtype=torch.float64)
    c = 0
    for a, p in enumerate(counts):
        for i in range(p):
            for idx in torch.cartesian_prod(*[torch.arange(s) for s in grid]).reshape(-1, k):
                t = float(idx[a])
                angle = t / base ** (i / p)
                pe[(c, *idx.tolist())] = math.sin(angle)
                pe[(c + 1, *idx.tolist())] = math.cos(angle)
            c += 2
    return pe


@pytest.mark.parametrize("grid,channels", [((5,), 6), ((3, 4), 8), ((2, 3, 4), 13), ((3, 2, 2), 6)])
def test_sincos_equals_an_independent_formula(grid, channels):
    x = torch.zeros(1, channels, *grid, dtype=torch.float64)
    torch.testing.assert_close(
        sinusoidal_grid_encoding(x, channels), _independent_sincos(grid, channels)
    )


@pytest.mark.parametrize("pos", POS)
@pytest.mark.parametrize("init", ["bn_zero", "w_z"])
@pytest.mark.parametrize("dim", [1, 2, 3])
def test_identity_at_insertion_with_every_setting(pos, init, dim):
    for inst in INSTANTIATIONS:
        for norm in ("bn", "gn", "ln", "affine", None):
            torch.manual_seed(0)
            block = BLOCKS[dim](8, instantiation=inst, pos=pos, init=init, norm=norm)
            x = torch.randn(2, 8, *GRIDS[dim])
            assert torch.equal(block(x), x), (inst, norm)
            assert torch.equal(block.eval()(x), x), (inst, norm)


@pytest.mark.parametrize("inst", INSTANTIATIONS)
@pytest.mark.parametrize("mode", ["spacetime", "space", "time"])
def test_order_blind_without_position_order_sensitive_with_it(inst, mode):
    x = torch.randn(2, 8, 4, 4, 4)
    perm = torch.tensor([2, 0, 3, 1])  # reorder the frames
    outs = {}
    for pos in POS:
        torch.manual_seed(0)
        block = _live(NonLocal3d(8, instantiation=inst, mode=mode, pos=pos))
        with torch.no_grad():
            outs[pos] = (block(x[:, :, perm]), block(x)[:, :, perm])
    torch.testing.assert_close(*outs["none"])  # the paper's block: a function of the set
    if mode == "space" and inst == "euclidean":
        # each frame attends to itself only and every token of a frame carries the same time
        # code p_t: ||(x_i + p_t + p_i) - (x_j + p_t + p_j)|| has no p_t, so frame order is
        # exactly invisible (the spatial position still counts)
        torch.testing.assert_close(*outs["sincos"])
        return
    for pos in ("sincos", "learned"):
        assert not torch.allclose(*outs[pos], atol=1e-4), pos


def test_default_is_the_papers_block_bit_for_bit():
    x = torch.randn(2, 8, 4, 4, 4)
    torch.manual_seed(0)
    default = _live(NonLocal3d(8))
    torch.manual_seed(0)
    explicit = _live(NonLocal3d(8, pos="none", init="bn_zero"))
    assert torch.equal(default(x), explicit(x))
    assert default.state_dict().keys() == explicit.state_dict().keys()
    assert "pos_proj" not in dict(default.named_parameters())


@pytest.mark.parametrize("impl", ["reference", "fast", "auto"])
@pytest.mark.parametrize("pos", ["sincos", "learned"])
def test_paths_agree_with_position(nl_config, impl, pos):
    dim, inst, mode = nl_config
    torch.manual_seed(0)
    kw = {"mode": mode} if dim == 3 else {}
    block = BLOCKS[dim](8, instantiation=inst, pos=pos, **kw).double()
    with torch.no_grad():
        block.norm.weight.normal_()
        if block.pos_proj is not None:
            block.pos_proj.add_(0.1 * torch.randn_like(block.pos_proj))
    x = torch.randn(2, 8, *GRIDS[dim], dtype=torch.float64)
    block.impl = "reference"
    ref = block(x)
    block.impl = impl
    torch.testing.assert_close(block(x), ref)
    with torch.no_grad():
        torch.testing.assert_close(block.eval()(x), block.train().eval()(x))


def test_position_enters_theta_and_phi_only():
    torch.manual_seed(0)
    block = _live(NonLocal2d(8, pos="sincos", sub_sample=False))
    x = torch.randn(1, 8, 3, 5)
    z, attn = block(x, return_attention=True)
    q = x + sinusoidal_grid_encoding(x, 8)
    conv = torch.nn.functional.conv2d
    theta = conv(q, block.theta.weight, block.theta.bias).flatten(2)
    phi = conv(q, block.phi.weight, block.phi.bias).flatten(2)
    weights = (theta.transpose(1, 2) @ phi / math.sqrt(4)).softmax(-1)
    torch.testing.assert_close(attn, weights)
    g = conv(x, block.g.weight, block.g.bias).flatten(2)  # the values: x without position
    y = (g @ weights.transpose(1, 2)).unflatten(2, (3, 5))
    torch.testing.assert_close(z, block.norm(block.W_z(y)) + x)


def test_learned_position_is_trained():
    torch.manual_seed(0)
    block = _live(NonLocal1d(6, pos="learned")).train()
    assert torch.equal(block.pos_proj, torch.eye(6))  # starts as the fixed encoding
    block(torch.randn(2, 6, 8)).square().sum().backward()
    assert block.pos_proj.grad is not None and block.pos_proj.grad.abs().sum() > 0


def test_init_w_z_and_bn_zero_start_the_gradient_in_different_places():
    x = torch.randn(2, 8, 4, 4)
    grads = {}
    for init in ("bn_zero", "w_z"):
        torch.manual_seed(0)
        block = NonLocal2d(8, init=init)
        assert torch.equal(block(x), x)
        block(x).sin().sum().backward()
        grads[init] = {n: p.grad.abs().sum().item() for n, p in block.named_parameters()}
    # the paper's: only the norm's scale and shift move first; W_z and the embeddings wait
    paper = grads["bn_zero"]
    assert paper["norm.weight"] > 0 and paper["W_z.weight"] == 0 and paper["theta.weight"] == 0
    # the guide's: W_z moves first (through a norm of scale 1); the embeddings still wait
    guide = grads["w_z"]
    assert guide["W_z.weight"] > 0 and guide["theta.weight"] == 0 and guide["g.weight"] == 0
    torch.manual_seed(0)
    block = NonLocal2d(8, init="w_z")
    assert torch.equal(block.norm.weight, torch.ones(8)) and not block.W_z.weight.any()
    with pytest.raises(ValueError, match="init='w_z' and gate='scalar'"):
        NonLocal2d(8, init="w_z", gate="scalar")
    with pytest.raises(ValueError, match="init must be one of"):
        NonLocal2d(8, init="zero")


def test_options_and_errors():
    assert {"pos", "init"} <= set(block_option_names())
    with pytest.raises(ValueError, match="pos must be one of"):
        NonLocal2d(8, pos="rope")
    with pytest.raises(ValueError, match="needs in_channels >= 6"):
        NonLocal3d(4, pos="sincos")
    assert "pos='sincos'" in repr(NonLocal2d(8, pos="sincos"))


@pytest.mark.parametrize("pos", ["sincos", "learned"])
def test_deploy_with_position(pos):
    torch.manual_seed(0)
    block = _live(NonLocal3d(8, pos=pos))
    x = torch.randn(2, 8, 2, 4, 4)
    traced = torch.fx.symbolic_trace(block)
    torch.testing.assert_close(traced(x), block(x))
    y = torch.randn(1, 8, 4, 6, 4)  # the encoding is computed for each input's grid
    torch.testing.assert_close(traced(y), block(y))
    exported = torch.export.export(block, (x,))
    torch.testing.assert_close(exported.module()(x), block(x))


@pytest.mark.parametrize(
    "kw", [{"pos": "learned"}, {"instantiation": "euclidean"}], ids=["learned", "euclidean"]
)
def test_onnx_with_position_and_euclidean(kw, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    block = _live(NonLocal3d(8, **kw))
    x = torch.randn(2, 8, 2, 4, 4)
    with torch.no_grad():
        program = torch.onnx.export(block, (x,), dynamo=True, opset_version=18, verbose=False)
        ref = block(x)
    program.save(str(tmp_path / "block.onnx"))
    session = ort.InferenceSession(str(tmp_path / "block.onnx"), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    torch.testing.assert_close(torch.from_numpy(out), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pos", POS)
def test_self_attention_position(pos):
    torch.manual_seed(0)
    mha = MultiheadSelfAttention(8, 2, pos=pos).eval()
    x = torch.randn(2, 5, 8)
    perm = torch.tensor([3, 0, 4, 1, 2])
    a, b = mha(x[:, perm]), mha(x)[:, perm]
    if pos == "none":
        torch.testing.assert_close(a, b)  # permutation equivariant
    else:
        assert not torch.allclose(a, b, atol=1e-4)
        # only the queries and keys see the position: the values are those of x
        q = x + sinusoidal_grid_encoding(x.transpose(1, 2), 8).t()
        _, w = mha(x, return_weights=True)
        qh = (
            (q @ mha.in_proj_weight[:8].t() + mha.in_proj_bias[:8]).view(2, 5, 2, 4).transpose(1, 2)
        )
        kh = (
            (q @ mha.in_proj_weight[8:16].t() + mha.in_proj_bias[8:16])
            .view(2, 5, 2, 4)
            .transpose(1, 2)
        )
        torch.testing.assert_close(w, (qh @ kh.transpose(-1, -2) / 2.0).softmax(-1))


def test_create_model_passes_position_and_init_to_the_blocks():
    from nlnet.models import create_model

    with torch.device("meta"):
        model = create_model("c2d_r50_nl5", pos="relative", init="w_z", instantiation="euclidean")
    blocks = [m for m in model.modules() if isinstance(m, NonLocalNd)]
    assert len(blocks) == 5
    assert all(
        b.pos == "relative" and b.init == "w_z" and b.instantiation == "euclidean" for b in blocks
    )


SOFTMAX_FORMS = ("gaussian", "embedded_gaussian", "euclidean")


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_relative_bias_identity_at_insertion_and_only_for_softmax_forms(dim):
    for inst in SOFTMAX_FORMS:
        for init in ("bn_zero", "w_z"):
            torch.manual_seed(0)
            block = BLOCKS[dim](4, instantiation=inst, pos="relative", init=init)
            assert block.rel_bias.shape == (15,) * dim and not block.rel_bias.any()
            x = torch.randn(2, 4, *GRIDS[dim])
            assert torch.equal(block(x), x)
            assert torch.equal(block.eval()(x), x)
    for inst in ("dot_product", "concatenation"):
        with pytest.raises(ValueError, match="pos='relative' adds a learned bias"):
            BLOCKS[dim](4, instantiation=inst, pos="relative")


def test_relative_bias_equals_a_formula_per_pair():
    torch.manual_seed(1)
    block = NonLocal2d(4, pos="relative").double()  # keys on the 2x2-pooled grid
    with torch.no_grad():
        block.norm.weight.normal_()
        block.rel_bias.normal_()
    x = torch.randn(1, 4, 5, 6, dtype=torch.float64)
    _, attn = block(x, return_attention=True)
    conv = torch.nn.functional.conv2d
    keys_in = torch.nn.functional.max_pool2d(x, 2)  # (1, 4, 2, 3)
    theta = conv(x, block.theta.weight, block.theta.bias).flatten(2)[0].t()
    phi = conv(keys_in, block.phi.weight, block.phi.bias).flatten(2)[0].t()
    bias = torch.empty(30, 6, dtype=torch.float64)
    for i, (h, w) in enumerate((h, w) for h in range(5) for w in range(6)):
        ch, cw = min(h // 2, 1), min(w // 2, 2)  # the key cell holding the query (floor pooling)
        for j, (kh, kw) in enumerate((a, b) for a in range(2) for b in range(3)):
            bias[i, j] = block.rel_bias[ch - kh + 7, cw - kw + 7]
    torch.testing.assert_close(attn[0], (theta @ phi.t() / math.sqrt(2) + bias).softmax(-1))


@pytest.mark.parametrize("mode", ["spacetime", "space", "time"])
def test_relative_bias_makes_the_block_order_sensitive(mode):
    x = torch.randn(2, 8, 4, 4, 4)
    perm = torch.tensor([2, 0, 3, 1])
    torch.manual_seed(0)
    block = _live(NonLocal3d(8, pos="relative", mode=mode))
    with torch.no_grad():  # a zero table (a new block) is order-blind
        torch.testing.assert_close(block(x[:, :, perm]), block(x)[:, :, perm])
        block.rel_bias.normal_()
        moved = block(x[:, :, perm]), block(x)[:, :, perm]
    if mode == "space":  # a frame attends to itself only: no offset in time is ever seen
        torch.testing.assert_close(*moved)
    else:
        assert not torch.allclose(*moved, atol=1e-4)
    # the bias needs the explicit matrix: every impl gives the reference path's output
    outs = []
    for impl in ("reference", "fast", "auto"):
        block.impl = impl
        outs.append(block(x))
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=0)
    torch.testing.assert_close(outs[2], outs[0], rtol=0, atol=0)


def test_relative_bias_deploys_and_trains():
    torch.manual_seed(0)
    block = _live(NonLocal3d(8, pos="relative", instantiation="euclidean"))
    with torch.no_grad():
        block.rel_bias.normal_()
    x = torch.randn(2, 8, 2, 4, 4)
    traced = torch.fx.symbolic_trace(block)
    torch.testing.assert_close(traced(x), block(x))
    y = torch.randn(1, 8, 4, 6, 4)
    torch.testing.assert_close(traced(y), block(y))
    exported = torch.export.export(block, (x,))
    torch.testing.assert_close(exported.module()(x), block(x))
    block.train()(x).square().sum().backward()
    assert block.rel_bias.grad.abs().sum() > 0
