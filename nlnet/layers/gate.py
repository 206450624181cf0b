"""A learnable scalar gate on the block's output: SAGAN's ``gamma``, initialised at 0.

Self-Attention GAN (Zhang et al., ICML 2019, Sec. 3) adds its attention branch as
``gamma * o + x`` with a learnable scalar ``gamma`` that starts at 0, so the network first relies
on local cues and learns how much non-local evidence to mix in. It is the third way to make a new
non-local block the identity ("Non-local Neural Networks", arXiv:1711.07971, Sec. 4.1), beside a
BatchNorm after ``W_z`` with its scale at 0 (the paper's choice) and ``W_z`` itself at 0.

:class:`GatedNorm` takes the place of the block's ``norm``: ``gamma * norm(W_z y)``. The norm
inside keeps its ordinary initialisation (scale 1), so only ``gamma`` holds the block at the
identity; unlike a zero BatchNorm scale, a zero ``gamma`` still passes a gradient to ``gamma``
on the first step (``dz/dgamma = norm(W_z y)``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["GATES", "GatedNorm"]

#: Accepted values of the block's ``gate`` option.
GATES: tuple[str | None, ...] = (None, "scalar")


class GatedNorm(nn.Module):
    """``gamma * inner(x)`` with one learnable scalar ``gamma`` (initialised to 0).

    Args:
        inner: The norm after ``W_z`` (``nn.Identity`` for none).

    ``weight`` / ``bias`` are the inner norm's (``None`` when it has none), so code that reads
    ``block.norm.weight`` keeps working.
    """

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.gamma = nn.Parameter(torch.zeros(()))

    @property
    def weight(self) -> Tensor | None:  # type: ignore[override]
        return getattr(self.inner, "weight", None)

    @property
    def bias(self) -> Tensor | None:  # type: ignore[override]
        return getattr(self.inner, "bias", None)

    def forward(self, x: Tensor) -> Tensor:
        return self.gamma * self.inner(x)
