"""The one partial load of the package: weights in a model's own names, some keys left fresh.

Every source of weights (an nlnet checkpoint for fine-tuning or a backbone, torchvision ImageNet
weights for a detector's ResNet, the released Caffe2 files, PySlowFast checkpoints, the demos'
pre-trained encoders) is first converted by its adapter into the model's own names; then
:func:`load_partial` checks that every other tensor is there with its shape and loads them in
one ``load_state_dict``. Keys under ``keep`` (a new classifier, a new non-local block, a layer the
source has no weight for) keep their initialisation: a block inserted into a pre-trained network
starts as the identity, so the network computes what it computed before ("Non-local Neural
Networks", Wang et al., CVPR 2018, arXiv:1711.07971, Sec. 4.1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

__all__ = ["LoadReport", "load_partial"]


@dataclass
class LoadReport:
    """What a load did with every key: one type for every source of weights.

    Attributes:
        source: where the weights came from (``"checkpoint"``, ``"torchvision 2D"``,
            ``"caffe2"``, ``"pyslowfast"``).
        loaded: model keys taken from the source as they are.
        converted: model keys taken after a conversion, by kind: ``"inflated"`` (a 2D kernel
            made 3D, Sec. 4.1), ``"reshaped"``, ``"affine_bn"`` (a BN from scale and shift
            only), ``"zero_bias"``, ``"folded"`` (a bias folded into a BN's running mean).
        kept: model keys left at their initialisation (a new block, a head of another size).
        unused: source keys nothing used.
        training_state: source keys of the training's state (momentum, iteration, rate), set
            aside.
    """

    source: str = "weights"
    loaded: list[str] = field(default_factory=list)
    converted: dict[str, list[str]] = field(default_factory=dict)
    kept: list[str] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)
    training_state: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every model tensor came from the source and every source tensor was used."""
        return not (self.kept or self.unused)

    def convert(self, kind: str, key: str) -> None:
        """Record that model key ``key`` was taken after a conversion of ``kind``."""
        self.converted.setdefault(kind, []).append(key)

    def converted_as(self, kind: str) -> list[str]:
        """The model keys converted as ``kind`` (``[]`` for none)."""
        return self.converted.get(kind, [])

    def __str__(self) -> str:
        parts = [f"loaded={len(self.loaded)}"]
        parts += [f"{kind}={len(keys)}" for kind, keys in self.converted.items()]
        parts += [f"kept={len(self.kept)}", f"unused={len(self.unused)}"]
        if self.training_state:
            parts.append(f"training_state={len(self.training_state)}")
        lines = [f"LoadReport[{self.source}]({', '.join(parts)})"]
        for what in ("kept", "unused"):
            keys = getattr(self, what)
            if keys:
                more = f" ... ({len(keys)} in all)" if len(keys) > 10 else ""
                lines.append(f"  {what}: {', '.join(keys[:10])}{more}")
        return "\n".join(lines)


def _under(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(p if p.endswith(".") else p + ".") for p in prefixes)


def load_partial(
    model: nn.Module,
    state: Mapping[str, torch.Tensor],
    keep: Iterable[str] = (),
    *,
    what: str = "weights",
    extra_ok: bool = False,
) -> LoadReport:
    """Load ``state`` (the model's own key names) into ``model`` in place.

    Args:
        model: the network.
        state: tensors by the model's state-dict names.
        keep: keys or key prefixes (``"fc"``, ``"layer3.4.non_local."``) that may be absent
            from ``state`` or of another shape there: they keep their initialisation. Every
            other key of the model must be in ``state`` with its shape.
        what: the argument or source named in an error (``weights``, ``caffe2``, ...).
        extra_ok: keys of ``state`` the model does not have are ignored (a checkpoint of a
            model with more layers initialising a backbone), not an error.

    Returns:
        A :class:`LoadReport` (``source=what``) of the keys loaded and kept at their
        initialisation.

    Raises:
        ValueError: one line naming ``what``: a key missing, of another shape, or a key of
            ``state`` the model does not have (the first three, and how many in all).
    """
    keep = tuple(keep)
    own = model.state_dict()
    take, kept, problems = {}, [], []
    for key, value in own.items():
        src = state.get(key)
        fits = src is not None and tuple(src.shape) == tuple(value.shape)
        if fits:
            take[key] = src
        elif _under(key, keep):
            kept.append(key)
        elif src is None:
            problems.append(f"missing {key}")
        else:
            problems.append(f"{key} has shape {tuple(src.shape)}, the model {tuple(value.shape)}")
    if not extra_ok:
        problems += [f"unexpected {k}" for k in state if k not in own and not _under(k, keep)]
    if problems:
        more = f"; ... ({len(problems)} in all)" if len(problems) > 3 else ""
        raise ValueError(
            f"{what}: the weights do not fit this model ({'; '.join(problems[:3])}{more})"
        )
    model.load_state_dict(take, strict=False)  # the package's one partial load
    return LoadReport(what, loaded=sorted(take), kept=sorted(kept))
