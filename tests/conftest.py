"""Suite-wide fixtures."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: one intra-op thread is faster than two and keeps timings stable on 2 cores."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class MaxNumel(TorchDispatchMode):
    """Records the largest tensor any aten op produces (a fast path must not build N x N')."""

    def __init__(self):
        super().__init__()
        self.max_numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.max_numel = max(self.max_numel, t.numel())
        return out


@pytest.fixture
def max_numel():
    """The :class:`MaxNumel` dispatch mode: ``with max_numel() as rec: ...; rec.max_numel``."""
    return MaxNumel
