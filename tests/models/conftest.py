"""Shared checks of the transformers built from nlnet layers against torchvision's (ViT, Swin)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
import torch
from torch import nn


def _randomise(model: nn.Module, scale: float) -> nn.Module:
    """Every parameter random: torchvision zero-initialises heads, class tokens and biases,
    which would hide a wrongly mapped one."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * scale)
    return model


@pytest.fixture
def torchvision_parity() -> Callable[..., None]:
    """``check(ours, ref, load, x, scale)``: randomise torchvision's ``ref``, map its state dict
    into ``ours`` with ``load`` and require equal outputs on ``x`` to float64 round-off."""

    def check(ours: nn.Module, ref: nn.Module, load: Callable, x: torch.Tensor, scale: float):
        torch.manual_seed(0)
        ref = _randomise(ref.double().eval(), scale)
        ours = ours.double().eval()
        load(ours, ref.state_dict())
        with torch.no_grad():
            torch.testing.assert_close(ours(x), ref(x), rtol=1e-12, atol=1e-12)

    return check


@pytest.fixture
def randomise() -> Callable[[nn.Module, float], nn.Module]:
    return _randomise


@pytest.fixture
def full_size_keys_match() -> Callable[..., None]:
    """``check(tv, ours, mapper, derived=())``: on the meta device, torchvision's full-size state
    dict maps onto ours key for key and shape for shape (``derived``: key suffixes torchvision
    stores but nlnet recomputes, e.g. Swin's relative position index)."""

    def check(tv: nn.Module, ours: nn.Module, mapper: Callable[[Mapping], Mapping], derived=()):
        mapped = mapper(tv.state_dict())
        mapped = {k: v for k, v in mapped.items() if not k.endswith(tuple(derived))}
        own = ours.state_dict()
        assert set(mapped) == set(own)
        assert all(mapped[k].shape == own[k].shape for k in own)

    return check
