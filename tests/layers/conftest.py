"""Cases shared by the non-local block tests: every instantiation in 1D/2D/3D, every 3D mode."""

import pytest
import torch

from nlnet.functional.nonlocal_op import INSTANTIATIONS
from nlnet.layers.nonlocal_block import NonLocal1d, NonLocal2d, NonLocal3d

NL_BLOCKS = {1: NonLocal1d, 2: NonLocal2d, 3: NonLocal3d}
NL_CONFIGS = [
    (dim, inst, mode)
    for dim in (1, 2, 3)
    for inst in INSTANTIATIONS
    for mode in (("spacetime", "space", "time") if dim == 3 else ("spacetime",))
]


@pytest.fixture(params=NL_CONFIGS, ids=[f"{d}d-{i}-{m}" for d, i, m in NL_CONFIGS])
def nl_config(request) -> tuple[int, str, str]:
    """``(dim, instantiation, mode)``: one test per block configuration."""
    return request.param


@pytest.fixture
def make_nl_block():
    """``make(dim, instantiation, mode, **kw)``: a seeded 4-channel block whose norm scale is
    random (a live output path, not the identity of a new block)."""

    def make(dim: int, inst: str, mode: str, **kw):
        torch.manual_seed(0)
        mode_kw = {"mode": mode} if dim == 3 else {}
        block = NL_BLOCKS[dim](4, instantiation=inst, **mode_kw, **kw)
        with torch.no_grad():
            block.norm.weight.normal_()
        return block

    return make
