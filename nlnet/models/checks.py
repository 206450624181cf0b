"""Input checks of the models, written so that every model stays deployable.

A check such as ``if not isinstance(x, Tensor) or x.dim() != 5: raise ...`` inside ``forward``
breaks ``torch.fx.symbolic_trace`` (``x`` is a ``Proxy`` there) and so torchvision's
``create_feature_extractor``. The functions here are called from ``forward`` and registered with
``torch.fx.wrap`` by each calling module: FX records them as one opaque ``call_function`` node
(so the traced ``GraphModule`` still runs the check on real tensors), while eager mode,
``torch.compile`` and ``torch.export`` simply execute them (static shapes: no graph break).

Usage in a model module (the ``wrap`` call must sit at the top level of the *calling* module)::

    import torch.fx
    from nlnet.models.checks import check_input
    torch.fx.wrap("check_input")
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["check_input", "model_in_channels"]

_LAYOUTS = {
    3: "a sequence batch (B, C, L)",
    4: "an image batch (B, C, H, W)",
    5: "a video tensor (B, C, T, H, W)",
}


def check_input(x: Tensor, ndim: int, channels: int | None = None, name: str = "x") -> None:
    """Raise a ``ValueError`` naming ``name`` unless ``x`` is a ``ndim``-D tensor with
    ``channels`` channels in dim 1 (``None``: any number of channels)."""
    layout = _LAYOUTS.get(ndim, f"a tensor with {ndim} dims")
    if not isinstance(x, torch.Tensor) or x.dim() != ndim:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{name}: expected {layout}, got {shape}")
    if channels is not None and x.shape[1] != channels:
        raise ValueError(
            f"{name}: expected {channels} channels in dim 1 of {layout[layout.index('(') :]}, got "
            f"shape "
            f"{tuple(x.shape)}"
        )


def model_in_channels(model: nn.Module) -> int | None:
    """Input channels of the network's first convolution (``None``: no convolution)."""
    conv = next((m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Conv3d))), None)
    return None if conv is None else int(conv.in_channels)
