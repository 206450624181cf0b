"""Which registered video models see the order of frames, computed (not hand-written).

A C2D network (Table 1 of "Non-local Neural Networks", Wang et al., CVPR 2018, arXiv:1711.07971)
convolves every frame alone, the non-local block of Eq. 1 is a weighted sum over a *set* of
positions (it has no notion of where a key lies), and the head averages over time: the logits of
a clip and of the same clip with its frames reversed are the same, so such a model can never
tell "moving left" from "moving right" or "appearing" from "vanishing". Temporal kernels
(I3D, Section 4), temporal pooling windows, learned temporal position embeddings or temporal
strides break that symmetry.

:func:`sees_frame_order` measures it on one model: a narrow copy (the model's ``test_overrides``)
in float64 and eval mode (BatchNorm uses its running statistics, dropout is off), with its random
initialisation plus seeded noise on every parameter (so that branches which start as the
identity, such as a non-local block with its BN scale at zero, count with what they can do), on a random clip of its ``test_input_size``; the model is *order-blind* when the
output of the clip, of the clip reversed in time and of the clip under a random permutation of
its frames agree to float64 round-off, and *sees order* otherwise. :func:`frame_order_table`
does it for every registered video model (``nlnet models`` shows it as a column; the table in
``docs/models.md`` is checked against it by a test).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache

import torch
from torch import nn

__all__ = [
    "frame_order_table",
    "frame_order_markdown",
    "is_video_model",
    "order_gap",
    "perturb_parameters",
    "probe_size",
    "sees_frame_order",
]

#: relative output change (float64) below which a model counts as order-blind: round-off of a
#: reordered sum is ~1e-15; a model that sees order changes its output by ~1e-3 or more
ORDER_TOL = 1e-9
#: the probe clip's largest length and side (a model's ``test_input_size`` or ``input_size``
#: capped): temporal kernels, strides and windows act the same on 8 frames as on 32
PROBE_FRAMES, PROBE_SIDE = 8, 64


def _tensors(out: object) -> list[torch.Tensor]:
    """Every tensor of a model output (a tensor, or a dict/tuple/list of them)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, Mapping):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return []


def order_gap(model: nn.Module, clip: torch.Tensor, seed: int = 0) -> float:
    """Largest relative change of ``model``'s output when the frames of ``clip`` are reversed or
    randomly permuted (0 for an order-blind model, up to round-off).

    Args:
        model: a video model in eval mode taking ``(B, C, T, H, W)``.
        clip: the input ``(B, C, T, H, W)`` (``T >= 2``).
        seed: seed of the random permutation.
    """
    t = clip.shape[2]
    if t < 2:
        raise ValueError(f"clip: expected at least 2 frames, got shape {tuple(clip.shape)}")
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(t, generator=gen)
    if torch.equal(perm, torch.arange(t)):
        perm = torch.arange(t).roll(1)
    orders = [torch.arange(t - 1, -1, -1), perm]
    with torch.no_grad():
        ref = _tensors(model(clip))
        gap = 0.0
        for order in orders:
            other = _tensors(model(clip[:, :, order]))
            for a, b in zip(ref, other, strict=True):
                scale = a.abs().max().item() or 1.0
                gap = max(gap, (a - b).abs().max().item() / scale)
    return gap


def probe_size(size: tuple[int, ...]) -> tuple[int, ...]:
    """The clip of the computation: at most 8 frames of at most 64 x 64 (``(C, T, H, W)``)."""
    c, t, h, w = size
    return (c, min(t, PROBE_FRAMES), min(h, PROBE_SIDE), min(w, PROBE_SIDE))


def is_video_model(name: str) -> bool:
    """Whether the registered model ``name`` takes clips ``(C, T, H, W)`` (``input_kind`` clip)."""
    from nlnet.models.registry import model_facts

    return model_facts(name).input_kind == "clip"


def perturb_parameters(model: nn.Module, seed: int = 0, scale: float = 0.1) -> None:
    """Add seeded noise to every parameter, in place: a branch that starts as the identity (a
    non-local block's zero BN scale, Sec. 4.1; a zero-initialised position table or residual
    branch) would hide, at initialisation, what the architecture can see once trained."""
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64)
            p.add_(scale * noise.to(p.dtype))


@cache
def sees_frame_order(name: str, seed: int = 0) -> bool:
    """Whether the registered video model ``name`` is *not* invariant to the order of frames.

    Computed on a narrow copy (``test_overrides``) in float64, eval mode, random initialisation
    (seeded), a random clip of :func:`probe_size`: see the module docstring.

    Raises:
        ValueError: ``name`` is not a registered video model.
    """
    from nlnet.models.registry import create_model, model_facts

    facts = model_facts(name)
    if facts.input_kind != "clip":
        raise ValueError(f"name: {name!r} is not a video model (input kind {facts.input_kind!r})")
    size = probe_size(facts.test_input_size or facts.input_size)
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
        torch.manual_seed(seed)
        model = create_model(name, **dict(facts.test_overrides)).double().eval()
    perturb_parameters(model, seed)
    gen = torch.Generator().manual_seed(seed)
    clip = torch.randn(1, *size, dtype=torch.float64, generator=gen)
    return order_gap(model, clip, seed) > ORDER_TOL


def frame_order_table(names: Iterable[str] | None = None) -> dict[str, bool]:
    """``{name: sees frame order}`` for the registered video models (all of them by default)."""
    from nlnet.models.registry import list_models

    names = list_models() if names is None else list(names)
    return {n: sees_frame_order(n) for n in names if is_video_model(n)}


def frame_order_markdown(table: Mapping[str, bool] | None = None) -> str:
    """The table of ``docs/models.md``: one row per registered video model."""
    table = frame_order_table() if table is None else table
    rows = ["| model | frame order |", "|---|---|"]
    rows += [f"| `{n}` | {'sees order' if s else 'order-blind'} |" for n, s in table.items()]
    return "\n".join(rows)


def _main() -> None:
    """Print the markdown table (``python -m nlnet.analysis.time_order``)."""
    print(frame_order_markdown())


if __name__ == "__main__":
    _main()
