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


# --------------------------------------------------------------------------- fine-tuning
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


def load_matching(model: torch.nn.Module, state_dict: Mapping, classifier: tuple[str, ...],
                  *, what: str = "weights") -> dict[str, list[str]]:  # fmt: skip
    """Load every tensor of ``state_dict`` into ``model``; the classifier's tensors only when
    their shapes agree (fine-tuning to another class count keeps the fresh head).

    Returns:
        ``{"loaded": [...], "fresh": [...]}`` (the classifier keys left as initialised).

    Raises:
        ValueError: a tensor outside the classifier is missing, extra or of another shape.
    """
    own = model.state_dict()
    take, fresh, problems = {}, [], []
    for key, value in own.items():
        src = state_dict.get(key)
        if _under(key, classifier) and (src is None or tuple(src.shape) != tuple(value.shape)):
            fresh.append(key)
        elif src is None:
            problems.append(f"missing {key}")
        elif tuple(src.shape) != tuple(value.shape):
            problems.append(f"{key} has shape {tuple(src.shape)}, the model {tuple(value.shape)}")
        else:
            take[key] = src
    extra = [k for k in state_dict if k not in own and not _under(k, classifier)]
    problems += [f"unexpected {k}" for k in extra]
    if problems:
        shown = "; ".join(problems[:3]) + (
            f"; ... ({len(problems)} in all)" if len(problems) > 3 else ""
        )
        raise ValueError(f"{what}: the weights do not fit this model ({shown})")
    model.load_state_dict(take, strict=False)
    return {"loaded": sorted(take), "fresh": fresh}


def load_finetune_weights(model: torch.nn.Module, facts: Any, spec: Any) -> dict[str, list[str]]:
    """Initialise ``model`` (already built with its final class count) from ``spec``: every
    tensor loaded, the classifier (``facts.classifier``) kept fresh where its size differs.

    ``spec`` is a torchvision weights name/enum (models with ``facts.weights_arch``), a file or a
    state dict: torchvision layout for the ViT/Swin/ResNet families (renamed or inflated, Section
    4.1 of the paper), or this model's own layout (e.g. an ``nlnet train`` checkpoint).
    """
    from nlnet.models.inflate import load_pretrained_2d

    fmt, arch = facts.weights_format, facts.weights_arch
    named = not isinstance(spec, (Mapping, os.PathLike)) and not (
        isinstance(spec, str) and os.path.isfile(spec)
    )
    if named and fmt == "native":
        raise ValueError(
            f"weights: {facts.name!r} has no torchvision weights; give a state dict or a file "
            f"of this model (e.g. a checkpoint written by nlnet train), got {spec!r}"
        )
    sd = _unwrap(load_weights(spec, arch if named else None))
    own = model.state_dict()
    if fmt == "inflate" and not any("non_local." in k for k in sd):  # ImageNet 2D layout
        from nlnet.models.inflate import DEFAULT_NEW_KEYS

        head_keys = tuple(p + "." for p in facts.classifier)
        report = load_pretrained_2d(model, sd, arch=arch, head_keys=head_keys,
                                    new_keys=(*DEFAULT_NEW_KEYS, *facts.new_keys))  # fmt: skip
        return {"loaded": list(report.copied) + list(report.inflated), "fresh": list(report.kept)}
    if fmt == "vit" and any(k.startswith("encoder.") for k in sd):
        from nlnet.models.vit import vit_state_dict_from_torchvision

        sd = vit_state_dict_from_torchvision(sd)
    elif fmt == "swin" and any(k.startswith("features.") for k in sd):
        from nlnet.models.swin import swin_state_dict_from_torchvision

        sd = swin_state_dict_from_torchvision(sd, len(model.stages))
        sd = {k: v for k, v in sd.items() if k in own or not k.endswith("relative_position_index")}
    return load_matching(model, sd, facts.classifier)
