"""Every block configuration under mixed precision (issue: ``train.amp=bf16`` with a
concatenation model died on ``w_f``'s dtype check): 4 instantiations (Eqs. 2-5) x 3 modes x
3 impls x pooling, forward + backward in fp32, bf16 autocast and fp16 autocast on the CPU (and
on CUDA where a GPU exists)."""

from __future__ import annotations

import itertools

import pytest
import torch

from nlnet.layers import NonLocal3d

INSTANTIATIONS = ("gaussian", "embedded_gaussian", "dot_product", "concatenation")
MODES = ("spacetime", "space", "time")
IMPLS = ("auto", "fast", "reference")
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _cases() -> list:
    """Every (instantiation, mode, impl); the default suite runs the concatenation block (the
    one that failed) on every path and the others on ``auto``; the rest is marked slow."""
    out = []
    for inst, mode, impl in itertools.product(INSTANTIATIONS, MODES, IMPLS):
        slow = inst != "concatenation" and impl != "auto"
        out.append(pytest.param(inst, mode, impl, marks=[pytest.mark.slow] if slow else []))
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("instantiation,mode,impl", _cases())
def test_forward_backward_under_autocast(instantiation, mode, impl, device):
    torch.manual_seed(0)
    x0 = torch.randn(2, 8, 2, 4, 4, device=device)
    for sub_sample in (True, False):
        block = NonLocal3d(8, instantiation=instantiation, mode=mode, impl=impl,
                           sub_sample=sub_sample).to(device)  # fmt: skip
        with torch.no_grad():  # a non-zero W_z BN scale: the block is not the identity
            block.norm.weight.fill_(0.5)
        ref = block(x0)
        for dtype in (None, torch.bfloat16, torch.float16):
            x = x0.clone().requires_grad_(True)
            block.zero_grad()
            with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
                z = block(x)
            z.float().square().mean().backward()
            where = f"{impl} sub_sample={sub_sample} {dtype}"
            assert z.shape == x.shape, where
            assert torch.isfinite(x.grad).all(), where
            grads = [p.grad for p in block.parameters() if p.requires_grad]
            assert all(g is not None and torch.isfinite(g).all() for g in grads), where
            # the same function: fp32 to round-off (auto may pick another path with autograd
            # on), half precision to a few percent of the output's norm (bf16: 8-bit mantissa)
            rel = ((z.float() - ref).norm() / ref.norm()).item()
            assert rel < (1e-5 if dtype is None else 0.05), (where, rel)


def test_dtype_mismatch_outside_autocast_is_still_an_error():
    from nlnet.functional.nonlocal_op import non_local

    theta = torch.randn(1, 4, 2, dtype=torch.bfloat16)
    w_f = torch.randn(4)
    with pytest.raises(TypeError, match="w_f must have the dtype of theta"):
        non_local(theta, theta, theta, "concatenation", w_f=w_f)
