"""``torch.hub`` entry points: every registered nlnet model, by its registry name.

From a clone (nothing is downloaded; weights follow the model's own options)::

    import torch

    model = torch.hub.load("path/to/nlnet", "c2d_r50_nl5", source="local", num_classes=400)

The entry points are the names ``nlnet models`` lists (``torch.hub.list``/``help`` read GitHub
repositories only).
Keyword arguments go to :func:`nlnet.models.create_model` (``num_classes``, ``pretrained_2d``
for ImageNet-initialised ResNets, ``weights`` for torchvision's ViT/Swin weights, block options
such as ``instantiation="dot_product"``).  ``torch.hub.load(..., "load_model", "final.pt")``
loads a checkpoint written by ``nlnet train``.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from nlnet.inference import load_model
from nlnet.models.registry import create_model, get_model_entry, list_models

dependencies = ["torch", "torchvision", "av", "numpy", "yaml"]

__all__ = ["load_model", *list_models()]


def _entry_point(name: str) -> Any:
    def build(**kwargs: Any) -> nn.Module:
        return create_model(name, **kwargs)

    build.__name__ = build.__qualname__ = name
    build.__doc__ = (
        f"{get_model_entry(name).description}.\n\n"
        f"``nlnet.models.create_model({name!r}, **kwargs)``: keyword arguments such as "
        "``num_classes``, ``pretrained_2d`` or block options."
    )
    return build


for _name in list_models():
    globals()[_name] = _entry_point(_name)
del _name
