"""Fine-tuning: initialise a registered model from weights of another class count.

A fresh classifier of ``num_classes`` outputs, every other tensor loaded: from torchvision's
ImageNet weights by name (``"IMAGENET1K_V1"``, read through :mod:`nlnet.models.weights` from
``$TORCH_HOME``; 2D ResNets copied or inflated to 3D as in Section 4.1 of "Non-local Neural
Networks", Wang et al., CVPR 2018; ViT/Swin renamed), or from a file/state dict of the model's
own layout (e.g. a checkpoint). What the classifier is comes from the model's facts
(:class:`nlnet.models.model_cfg.ModelCfg`), never from a config default.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any

import torch

from nlnet.models.inflate import (
    DEFAULT_HEAD_KEYS,
    DEFAULT_NEW_KEYS,
    load_pretrained_2d,
    read_state_dict,
)
from nlnet.models.loading import LoadReport, load_partial
from nlnet.models.weights import load_weights

__all__ = ["CONVERTERS", "adapt_first_conv", "load_finetune_weights"]

#: ``weights_format`` -> ``"module:function"`` renaming a torchvision state dict to nlnet's keys
#: (by name: those modules import the registry, which imports this one lazily).
CONVERTERS: dict[str, str] = {
    "vit": "nlnet.models.vit:vit_state_dict_from_torchvision",
    "swin": "nlnet.models.swin:swin_state_dict_from_torchvision",
    "r3d": "nlnet.models.video.torchvision_r3d:r3d_state_from_torchvision",
}


def _unwrap(sd: Mapping) -> dict:
    """A flat ``name -> tensor`` dict: ``model``/``state_dict`` wrappers (an ``nlnet train``
    checkpoint, common training scripts) and a ``module.`` prefix removed."""
    for wrapper in ("model", "state_dict"):
        inner = sd.get(wrapper)
        if isinstance(inner, Mapping) and not any(isinstance(v, torch.Tensor) for v in sd.values()):
            sd = inner
            break
    out = {}
    for k, v in sd.items():
        if isinstance(v, torch.Tensor):
            out[k[len("module.") :] if k.startswith("module.") else k] = v
    return out


def _under(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def load_finetune_weights(model: torch.nn.Module, facts: Any, spec: Any) -> LoadReport:
    """Initialise ``model`` (already built with its final class count) from ``spec``: every
    tensor loaded, the classifier (``facts.classifier``) kept fresh where its size differs.

    ``spec`` is a torchvision weights name/enum (models with ``facts.weights_arch``), a file or a
    state dict: torchvision layout for the ViT/Swin/ResNet families (renamed or inflated, Section
    4.1 of the paper), or this model's own layout (e.g. an ``nlnet train`` checkpoint).

    Returns:
        The :class:`~nlnet.models.loading.LoadReport` (``kept``: the fresh classifier).
    """
    fmt, arch = facts.weights_format, facts.weights_arch
    named = not isinstance(spec, (Mapping, os.PathLike)) and not (
        isinstance(spec, str) and os.path.isfile(spec)
    )
    if named and fmt == "native":
        raise ValueError(
            f"weights: {facts.name!r} has no torchvision weights; give a state dict or a file "
            f"of this model (e.g. a checkpoint written by nlnet train), got {spec!r}"
        )
    if named and arch is None:  # vit_tiny/swin_tiny: torchvision says it has no such weights
        arch = facts.name
    if fmt == "inflate":  # ImageNet ResNets, the released Caffe2 .pkl too (models.inflate)
        sd = read_state_dict(spec, arch if named else None)
    else:
        sd = _unwrap(load_weights(spec, arch if named else None))
    own = model.state_dict()
    sd = adapt_first_conv(sd, own, facts.first_conv)
    covers = all(k in sd and sd[k].shape == own[k].shape  # this model's own layout
                 for k in own if not _under(k, facts.classifier))  # fmt: skip
    if fmt == "inflate" and not covers:  # ImageNet 2D layout: copied or inflated
        head_keys = (*DEFAULT_HEAD_KEYS, *(p + "." for p in facts.classifier))
        return load_pretrained_2d(model, sd, arch=arch, head_keys=head_keys,
                                  new_keys=(*DEFAULT_NEW_KEYS, *facts.new_keys))  # fmt: skip
    if fmt in CONVERTERS and any(k.startswith(("encoder.", "features.", "stem.")) for k in sd):
        module, attr = CONVERTERS[fmt].split(":")  # by name: these modules register models
        convert = getattr(importlib.import_module(module), attr)
        sd = convert(sd, len(model.stages)) if fmt == "swin" else convert(sd)
        sd = {k: v for k, v in sd.items() if k in own or not k.endswith("relative_position_index")}
        sd = adapt_first_conv(sd, own, facts.first_conv)
    return load_partial(model, sd, facts.classifier)


def adapt_first_conv(
    sd: dict[str, torch.Tensor], own: Mapping[str, torch.Tensor], first_conv: str
) -> dict[str, torch.Tensor]:
    """``sd`` with its first convolution's weight fitted to the model's input channels, as timm's
    ``adapt_input_conv`` does: summed over the RGB channels for one channel (a grey video, a
    one-channel volume), repeated and scaled by ``3 / C`` for ``C`` channels: an input equal on
    every channel gives the RGB model's response (exactly for one channel and for multiples of
    3). Other weights unchanged."""
    key = f"{first_conv}.weight"
    if not first_conv or key not in sd or key not in own:
        return sd
    w, want = sd[key], own[key].shape[1]
    have = w.shape[1]
    if have == want or have != 3:
        return sd
    if want == 1:
        adapted = w.sum(1, keepdim=True)
    else:
        reps = -(-want // 3)
        adapted = w.repeat(1, reps, *[1] * (w.dim() - 2))[:, :want] * (3 / want)
    return {**sd, key: adapted}
