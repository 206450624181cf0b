"""Suite-wide fixtures."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: one intra-op thread is faster than two and keeps timings stable on 2 cores."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
