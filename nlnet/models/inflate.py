"""Build video models from 2D ImageNet ResNet weights by inflation ("Non-local Neural Networks",
Wang, Girshick, Gupta, He, CVPR 2018, arXiv:1711.07971, Section 4, "Inflated 3D ConvNet").

A 2D ``k x k`` kernel becomes a ``t x k x k`` kernel whose ``t`` temporal planes are each the 2D
kernel rescaled by ``1/t``. On a video that repeats one frame, every inflated convolution then
computes the 2D convolution of that frame (away from the temporal borders, see below), so the
inflated network reproduces the 2D network's output. C2D (``t = 1`` everywhere) is exact at every
frame. For I3D, zero temporal padding means that at the first and last ``t // 2`` frames some of
the ``t`` planes see padding instead of the repeated frame: those frames get only ``(t - p) / t``
of the 2D response, so only the interior frames match the 2D network.

The source is a state dict in torchvision's ResNet layout (``conv1.weight``, ``bn1.*``,
``layerX.Y.convZ.weight``, ``layerX.Y.downsample.0.weight``, ``fc.*``), given as a dict, a
path loaded with ``torch.load(..., weights_only=True)``, or torchvision weights
(``"IMAGENET1K_V1"``, ``ResNet50_Weights.IMAGENET1K_V2``) loaded by torchvision's own
``weights.get_state_dict`` (see :mod:`nlnet.models.weights`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from nlnet.models.loading import LoadReport

__all__ = [
    "inflate_conv_weight",
    "inflate_state_dict",
    "inflate_temporal_kernels",
    "load_pretrained_2d",
    "read_state_dict",
]

#: Keys of the target model that are never taken from a 2D checkpoint (new layers).
DEFAULT_NEW_KEYS: tuple[str, ...] = ("non_local.",)
#: Key prefixes of the classifier: loaded only if the shapes agree, otherwise left as initialised.
DEFAULT_HEAD_KEYS: tuple[str, ...] = ("fc.",)


def inflate_conv_weight(weight_2d: torch.Tensor, time_dim: int) -> torch.Tensor:
    """Inflate a 2D convolution kernel ``(O, I, kh, kw)`` to ``(O, I, t, kh, kw)``.

    Every temporal plane is ``weight_2d / t`` (Section 4), so the planes sum to ``weight_2d``.

    Args:
        weight_2d: the 2D kernel.
        time_dim: the temporal size ``t >= 1``.
    """
    if not isinstance(weight_2d, torch.Tensor) or weight_2d.dim() != 4:
        shape = tuple(weight_2d.shape) if isinstance(weight_2d, torch.Tensor) else weight_2d
        raise ValueError(f"weight_2d: expected a 4D kernel (O, I, kh, kw), got {shape!r}")
    if not isinstance(time_dim, int) or time_dim < 1:
        raise ValueError(f"time_dim: expected a positive int, got {time_dim!r}")
    w = weight_2d.unsqueeze(2).expand(-1, -1, time_dim, -1, -1)  # (O, I, t, kh, kw)
    return w / time_dim


def read_state_dict(source: Any, arch: str | None = None) -> dict:
    """Return a flat ``name -> tensor`` dict from a path, a mapping or torchvision weights.

    ``source`` is resolved by :func:`nlnet.models.weights.load_weights` (a path is read with
    ``torch.load(path, map_location="cpu", weights_only=True)``; ``"IMAGENET1K_V1"`` or
    ``ResNet50_Weights.IMAGENET1K_V2`` through torchvision, ``arch`` naming the torchvision model
    for bare names). Checkpoints that wrap the weights under ``"state_dict"`` or ``"model"`` are
    unwrapped, and a ``"module."`` prefix (DataParallel) is stripped.
    """
    from nlnet.models.weights import load_weights

    if isinstance(source, (str, os.PathLike)) and str(source).endswith(".pkl"):
        # the released Caffe2 ImageNet ResNet (restricted unpickler, no code runs)
        from nlnet.models.caffe2 import caffe2_state_dict

        if not os.path.isfile(source):
            raise ValueError(f"pretrained_2d: no such file {str(source)!r}")
        return caffe2_state_dict(source)
    source = load_weights(source, arch, what="pretrained_2d")
    if not isinstance(source, Mapping):
        raise TypeError(
            f"pretrained_2d: expected a state dict (mapping) or a path, got {type(source).__name__}"
        )
    for wrapper in ("state_dict", "model"):
        inner = source.get(wrapper)
        if isinstance(inner, Mapping) and not any(
            isinstance(v, torch.Tensor) for v in source.values()
        ):
            source = inner
            break
    out = {}
    for k, v in source.items():
        if not isinstance(v, torch.Tensor):
            raise TypeError(
                f"pretrained_2d: value of key {k!r} is {type(v).__name__}, not a tensor"
            )
        out[k[len("module.") :] if k.startswith("module.") else k] = v
    return out


def _starts(key: str, prefixes: Iterable[str]) -> bool:
    return any(key.startswith(p) or f".{p}" in key for p in prefixes)


def _fmt(keys: list[str], limit: int = 8) -> str:
    more = f", ... ({len(keys)} in all)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def _inflatable(weight: torch.Tensor, target: torch.Tensor) -> torch.Tensor | None:
    """The 2D kernel ``(O, I, kh, kw)`` of ``weight`` (a 2D kernel, or a C2D's temporally
    1-wide one) when ``target`` is that kernel with a temporal size ``(O, I, t, kh, kw)``."""
    kernel = weight[:, :, 0] if weight.dim() == 5 and weight.shape[2] == 1 else weight
    fits = (
        kernel.dim() == 4
        and target.dim() == 5
        and kernel.shape == (*target.shape[:2], *target.shape[3:])
    )
    return kernel if fits else None


def inflate_temporal_kernels(
    state: Mapping[str, torch.Tensor], model: nn.Module
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """``state`` (the model's own key names) with each temporally 1-wide kernel
    ``(O, I, 1, kh, kw)`` whose ``model`` counterpart is ``(O, I, t, kh, kw)`` inflated with
    :func:`inflate_conv_weight`: a trained C2D starts an I3D of the same layout (Section 4).

    Returns:
        ``(state, inflated keys)``; every other tensor as it was.
    """
    target = model.state_dict()
    out, inflated = dict(state), []
    for key, value in state.items():
        want = target.get(key)
        if want is None or value.dim() != 5 or value.shape == want.shape:
            continue
        if (kernel := _inflatable(value, want)) is not None:
            out[key] = inflate_conv_weight(kernel.to(want.dtype), int(want.shape[2]))
            inflated.append(key)
    return out, inflated


def inflate_state_dict(
    state_dict_2d: Mapping[str, torch.Tensor],
    model: nn.Module,
    *,
    new_keys: Iterable[str] = DEFAULT_NEW_KEYS,
    head_keys: Iterable[str] = DEFAULT_HEAD_KEYS,
    strict: bool = True,
) -> tuple[dict[str, torch.Tensor], LoadReport]:
    """Map a 2D ResNet state dict onto ``model``'s state dict, inflating kernels where needed.

    For every key of ``model.state_dict()``: a source tensor of the same shape is copied; a 4D
    source kernel (or a C2D's ``(O, I, 1, kh, kw)`` one) whose target is 5D ``(O, I, t, kh, kw)``
    is inflated with :func:`inflate_conv_weight`; keys under ``new_keys`` (non-local blocks) keep their
    initialisation; keys under ``head_keys`` (the classifier) are copied when the shapes agree and
    kept otherwise (e.g. 1000 ImageNet classes vs 400 Kinetics classes).

    Args:
        state_dict_2d: the source weights in torchvision's ResNet layout.
        model: the target (C2D/I3D video model, or a 2D model with the same layout).
        new_keys: key fragments of layers that do not exist in the 2D network.
        head_keys: key prefixes of the classifier.
        strict: raise on missing keys, unexpected keys or shape mismatches.

    Returns:
        ``(state_dict, report)`` where ``state_dict`` is complete for ``model`` (kept keys carry
        the model's current values).

    Raises:
        ValueError: with the offending key names, when ``strict`` and the source is not the
            same architecture (missing or unexpected keys, or a shape that cannot be inflated).
    """
    new_keys, head_keys = tuple(new_keys), tuple(head_keys)
    target = model.state_dict()
    src = dict(state_dict_2d)
    report = LoadReport("torchvision 2D")
    out: dict[str, torch.Tensor] = {}
    missing, mismatched = [], []
    for key, tgt in target.items():
        if _starts(key, new_keys):
            report.kept.append(key)
            out[key] = tgt
            continue
        is_head = any(key.startswith(p) for p in head_keys)
        if key not in src:
            if is_head:
                report.kept.append(key)
                out[key] = tgt
            else:
                missing.append(key)
            continue
        s = src[key]
        if tuple(s.shape) == tuple(tgt.shape):
            out[key] = s.to(dtype=tgt.dtype)
            report.loaded.append(key)
        elif (kernel := _inflatable(s, tgt)) is not None:  # 2D, or a C2D's 1 x k x k (to I3D)
            out[key] = inflate_conv_weight(kernel.to(dtype=tgt.dtype), int(tgt.shape[2]))
            report.convert("inflated", key)
        elif is_head:
            report.kept.append(key)
            report.unused.append(key)
            out[key] = tgt
        else:
            mismatched.append(f"{key}: source {tuple(s.shape)} vs model {tuple(tgt.shape)}")
    unexpected = [k for k in src if k not in target]
    report.unused += [k for k in unexpected if any(k.startswith(p) for p in head_keys)]
    unexpected = [k for k in unexpected if not any(k.startswith(p) for p in head_keys)]
    if strict and (missing or unexpected or mismatched):
        parts = []
        if missing:
            parts.append(f"missing keys (in the model, not in the 2D state dict): {_fmt(missing)}")
        if unexpected:
            parts.append(
                f"unexpected keys (in the 2D state dict, not in the model): {_fmt(unexpected)}"
            )
        if mismatched:
            parts.append(f"shape mismatch: {_fmt(mismatched)}")
        raise ValueError(
            "pretrained_2d: the 2D state dict does not match this model's architecture "
            "(expected a torchvision ResNet of the same depth); " + "; ".join(parts)
        )
    for key in missing + [m.split(":")[0] for m in mismatched]:
        out[key] = target[key]
        report.kept.append(key)
    return out, report


def load_pretrained_2d(
    model: nn.Module,
    source: Any,
    *,
    arch: str | None = None,
    strict: bool = True,
    new_keys: Iterable[str] = DEFAULT_NEW_KEYS,
    head_keys: Iterable[str] = DEFAULT_HEAD_KEYS,
) -> LoadReport:
    """Initialise ``model`` in place from 2D ResNet weights.

    ``source`` is a state dict, a path, or torchvision weights (an enum member, its full name, or
    a bare name such as ``"IMAGENET1K_V1"`` looked up in the weights of ``arch``, e.g.
    ``"resnet50"``; see :mod:`nlnet.models.weights`). See :func:`inflate_state_dict` for the rules; the result is loaded with
    ``model.load_state_dict(..., strict=True)``.

    Returns:
        The :class:`~nlnet.models.loading.LoadReport` of the keys copied (``loaded``),
        inflated (``converted["inflated"]``) and kept.
    """
    sd, report = inflate_state_dict(
        read_state_dict(source, arch), model, new_keys=new_keys, head_keys=head_keys, strict=strict
    )
    model.load_state_dict(sd, strict=True)
    return report
