"""Pre-trained weights given by torchvision name, torchvision enum or file path, in one place.

"Our models are pre-trained on ImageNet" ("Non-local Neural Networks", Wang, Girshick, Gupta,
He, CVPR 2018, arXiv:1711.07971, Section 4.1). torchvision publishes those weights as enums
(``ResNet50_Weights.IMAGENET1K_V1``); this module turns whatever the user wrote into a state dict
through torchvision's own loader (``weights.get_state_dict``, i.e. ``torch.hub``'s cache under
``$TORCH_HOME/hub/checkpoints/<file name of the url>``), so every model family (the video ResNets
here, image backbones elsewhere) accepts the same spellings:

* a ``Mapping`` (a state dict): returned as is;
* a path (``str`` / ``os.PathLike``) of an existing file: ``torch.load(..., weights_only=True)``;
* a torchvision enum member (``ResNet50_Weights.IMAGENET1K_V2``);
* a fully qualified name (``"ResNet50_Weights.IMAGENET1K_V2"``);
* a bare name (``"IMAGENET1K_V1"``, ``"DEFAULT"``) looked up in the weights of ``arch``
  (``"resnet50"``: :func:`torchvision.models.get_model_weights`).

Without network access a file that is not in the cache is a :class:`WeightsUnavailableError`
whose one-line message says which file to put where.
"""

from __future__ import annotations

import os
import urllib.error
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch

__all__ = [
    "WeightsUnavailableError",
    "resolve_weights",
    "load_weights",
    "hub_cache_path",
]


class WeightsUnavailableError(ValueError):
    """The weights are neither in the torch hub cache nor downloadable."""


def _weights_enum_type() -> type:
    from torchvision.models import WeightsEnum

    return WeightsEnum


def hub_cache_path(weights: Any) -> Path:
    """Where ``torch.hub`` keeps (and looks for) the file of a torchvision weights enum member."""
    name = os.path.basename(urlparse(weights.url).path)
    return Path(torch.hub.get_dir()) / "checkpoints" / name


def _by_name(name: str, arch: str | None, what: str) -> Any:
    from torchvision.models import get_model_weights, get_weight

    if "." in name:
        try:
            return get_weight(name)
        except (ValueError, KeyError, AttributeError) as err:
            raise ValueError(
                f"{what}: {name!r} is not a torchvision weights name ({err})"
            ) from None
    if arch is None:
        raise ValueError(
            f"{what}: a bare weights name {name!r} needs the architecture; give the full name, "
            "e.g. 'ResNet50_Weights.IMAGENET1K_V1'"
        )
    try:
        enum = get_model_weights(arch)
    except (ValueError, KeyError) as err:
        raise ValueError(f"{what}: torchvision has no weights for {arch!r} ({err})") from None
    if name == "DEFAULT":
        return enum.DEFAULT
    if name not in enum.__members__:
        raise ValueError(
            f"{what}: {name!r} is not a file and not one of the {arch} weights "
            f"{', '.join(list(enum.__members__))}"
        )
    return enum[name]


def resolve_weights(spec: Any, arch: str | None = None, *, what: str = "weights") -> Any:
    """Turn a weights specification into a state dict, a :class:`~pathlib.Path` or an enum member.

    Args:
        spec: a state dict, a file path, a torchvision ``WeightsEnum`` member or its name
            (see the module docstring).
        arch: torchvision model name (``"resnet50"``) for bare names and for the architecture
            check of enum members; ``None`` skips the check.
        what: the argument name used in error messages (e.g. ``"pretrained_2d"``).

    Returns:
        ``spec`` itself for a mapping, a ``Path`` for a file, a ``WeightsEnum`` member otherwise.

    Raises:
        ValueError: a missing file that is no weights name, an unknown name, or weights of
            another architecture than ``arch``.
    """
    weights_enum = _weights_enum_type()
    if isinstance(spec, Mapping):
        return spec
    if isinstance(spec, os.PathLike) or (isinstance(spec, str) and os.path.isfile(spec)):
        path = Path(spec)
        if not path.is_file():
            raise ValueError(f"{what}: no such file {str(path)!r}")
        return path
    if isinstance(spec, str):
        looks_like_path = os.sep in spec or spec.endswith((".pth", ".pt", ".pkl", ".bin"))
        if looks_like_path:
            raise ValueError(f"{what}: no such file {spec!r}")
        spec = _by_name(spec, arch, what)
    if not isinstance(spec, weights_enum):
        raise TypeError(
            f"{what}: expected a state dict, a file path or torchvision weights "
            f"(e.g. 'IMAGENET1K_V1'), got {type(spec).__name__}"
        )
    if arch is not None:
        from torchvision.models import get_model_weights

        try:
            expected = get_model_weights(arch)
        except (ValueError, KeyError):
            expected = None
        if expected is not None and type(spec) is not expected:
            raise ValueError(
                f"{what}: {type(spec).__name__}.{spec.name} are weights of another architecture; "
                f"this model takes {expected.__name__}"
            )
    return spec


def load_weights(spec: Any, arch: str | None = None, *, what: str = "weights") -> Mapping:
    """Resolve ``spec`` (:func:`resolve_weights`) and return its state dict on the CPU.

    Enum members are loaded with ``weights.get_state_dict(weights_only=True)`` (torchvision's
    own loader, which reads ``$TORCH_HOME/hub/checkpoints/`` first and downloads only when the
    file is not there); files with ``torch.load(weights_only=True)``: no pickled code runs.

    Raises:
        WeightsUnavailableError: the file is not cached and cannot be downloaded.
    """
    spec = resolve_weights(spec, arch, what=what)
    if isinstance(spec, Mapping):
        return spec
    if isinstance(spec, Path):
        return torch.load(spec, map_location="cpu", weights_only=True)
    target = hub_cache_path(spec)
    try:
        return spec.get_state_dict(progress=False, weights_only=True, map_location="cpu")
    except (urllib.error.URLError, OSError, TimeoutError) as err:
        if target.is_file():
            raise
        reason = getattr(err, "reason", None) or err
        raise WeightsUnavailableError(
            f"{what}: {type(spec).__name__}.{spec.name} is not in the torch hub cache and could "
            f"not be downloaded ({reason}); download {spec.url} and put it at {target}"
        ) from None
