"""Option and input checks of the non-local block (:mod:`nlnet.layers.nonlocal_block`).

The block's constructor arguments (Sec. 3.3 of Wang et al., CVPR 2018: bottleneck width,
subsampling kernel, 3D ``mode`` of Table 2d) and the checks its ``forward`` runs on ``x`` before
any computation. Every check raises one line naming the argument and what was expected.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from nlnet.functional.instantiations import form
from nlnet.functional.nonlocal_op import check_instantiation, check_scale

Mode = Literal["spacetime", "space", "time"]
MODES: tuple[str, ...] = ("spacetime", "space", "time")
#: Position information of the block (``"none"``: the paper's block, Eq. 1 over a set).
POSITIONS: tuple[str, ...] = ("none", "sincos", "learned", "relative")
#: ``pos="relative"``: offsets beyond this many key cells along an axis share one bias.
RELATIVE_RADIUS: int = 7
#: How a new block is made the identity: the paper's zero BN scale (Sec. 4.1) or a zero ``W_z``.
INITS: tuple[str, ...] = ("bn_zero", "w_z")

_LAYOUT = {1: "(B, C, L)", 2: "(B, C, H, W)", 3: "(B, C, T, H, W)"}


def check_block_input(
    x: Tensor,
    weight: Tensor,
    dim: int,
    channels: int,
    kernel: tuple[int, ...],
    name: str,
    allow_empty: bool = True,
    hint: str = "",
) -> None:
    """The block's input checks (a leaf call under ``torch.fx``: it reads sizes).

    ``allow_empty=False`` (what a ``torch.fx`` trace records) refuses a grid with an axis of size
    0: the traced graph has no branch for it, only the eager block returns its empty output.
    ``hint`` ends the message of a channel mismatch (where the block's channels came from).
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != dim + 2:
        raise ValueError(
            f"{name} expects x of shape {_LAYOUT[dim]} ({dim + 2} dims), got shape {tuple(x.shape)}"
        )
    if x.shape[1] != channels:
        raise ValueError(
            f"{name} was built for in_channels={channels}, got x with {x.shape[1]} channels "
            f"(shape {tuple(x.shape)}){hint}"
        )
    if not x.is_floating_point():
        raise TypeError(f"{name} expects a floating-point x, got dtype {x.dtype}")
    if x.dtype != weight.dtype and not torch.is_autocast_enabled(x.device.type):
        raise TypeError(
            f"{name} has {weight.dtype} parameters but x is {x.dtype}: convert one of them "
            f"(block.to({x.dtype}) or x.to({weight.dtype})), or run under torch.autocast"
        )
    size = tuple(x.shape[2:])
    if 0 in size and not allow_empty:
        raise ValueError(
            f"{name} got an empty grid {size} (x of shape {tuple(x.shape)}) in a torch.fx-traced "
            "graph, which has no branch for it; the eager block returns an empty output"
        )
    for axis, (s, k) in enumerate(zip(size, kernel)):
        if k > 1 and 0 < s < k:  # size 0 is an empty grid (an empty output), not too small
            raise ValueError(
                f"input size {size} is too small for the sub_sample kernel {kernel}: "
                f"dimension {axis} has {s} < {k} positions"
            )


def check_choices(
    dim: int, in_channels: int, *, instantiation: str, scale, pool_position: str, bias,
    mode: str, impl: str, phi_init: str, pos: str, init: str, gate: str | None,
    gamma_init: float = 0.0,
) -> None:  # fmt: skip
    """The block's choices among named options (one line naming the argument on a bad one)."""
    check_instantiation(instantiation)
    check_scale(scale)
    if pool_position not in ("before", "after"):
        raise ValueError(f"pool_position must be 'before' or 'after', got {pool_position!r}")
    if not isinstance(bias, bool):
        raise TypeError(f"bias must be True or False, got {bias!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode != "spacetime" and dim != 3:
        raise ValueError(
            f"mode={mode!r} needs a 3D (video) block; a {dim}D block only has mode='spacetime'"
        )
    if impl not in ("auto", "fast", "reference"):
        raise ValueError(f"impl must be 'auto', 'fast' or 'reference', got {impl!r}")
    if phi_init not in ("he", "theta"):
        raise ValueError(f"phi_init must be 'he' or 'theta', got {phi_init!r}")
    if pos not in POSITIONS:
        raise ValueError(f"pos must be one of {POSITIONS}, got {pos!r}")
    if pos == "relative" and not form(instantiation).softmax:
        raise ValueError(
            f"pos='relative' adds a learned bias to the softmax logits; instantiation="
            f"{instantiation!r} has none (use gaussian, embedded_gaussian or euclidean)"
        )
    if pos in ("sincos", "learned") and in_channels < 2 * dim:
        raise ValueError(
            f"pos={pos!r} needs in_channels >= {2 * dim} (a sine/cosine pair per axis of a "
            f"{dim}D grid), got {in_channels}"
        )
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    if (
        isinstance(gamma_init, bool)
        or not isinstance(gamma_init, (int, float))
        or not (math.isfinite(gamma_init))
    ):
        raise ValueError(f"gamma_init must be a finite number, got {gamma_init!r}")
    if gamma_init and init == "w_z":
        raise ValueError(
            f"gamma_init={gamma_init} sets the norm's scale or the gate; init='w_z' starts "
            "W_z at zero instead (use init='bn_zero' or gate='scalar' with gamma_init)"
        )
    if init == "w_z" and gate is not None:
        raise ValueError(
            f"init='w_z' and gate={gate!r} are two initialisations of the identity; give one"
        )


def resolve_inter_channels(
    in_channels: int, inter_channels: int | None, reduction: int | None
) -> int:
    """The bottleneck width: ``inter_channels``, ``in_channels // reduction`` (the practitioner's
    guide) or ``in_channels // 2`` (Sec. 3.3), at least 1."""
    check_int("in_channels", in_channels)
    if inter_channels is not None and reduction is not None:
        raise ValueError("give either inter_channels or reduction, not both")
    if reduction is not None:
        check_int("reduction", reduction)
        inter_channels = max(in_channels // reduction, 1)
    elif inter_channels is None:
        inter_channels = max(in_channels // 2, 1)
    check_int("inter_channels", inter_channels)
    return inter_channels


def check_temporal_groups_option(
    temporal_groups: int | None, dim: int, kernel: tuple[int, ...]
) -> None:
    """``temporal_groups``: ``None``, or (3D only) a multiple of the temporal pooling kernel."""
    if temporal_groups is None:
        return
    if dim != 3:
        raise ValueError(f"temporal_groups needs a 3D (video) block, got a {dim}D block")
    check_int("temporal_groups", temporal_groups)
    if temporal_groups % kernel[0]:
        raise ValueError(
            f"temporal_groups={temporal_groups} must be a multiple of the temporal "
            f"sub_sample kernel {kernel[0]}"
        )


def check_temporal_groups(x: Tensor, groups: int) -> None:
    if x.shape[2] % groups:
        raise ValueError(
            f"temporal_groups={groups} must divide the number of frames T, got T = {x.shape[2]}"
        )


def positional_error(name: str, extra: tuple) -> TypeError:
    first = extra[0]
    return TypeError(
        f"{name} takes in_channels as its only positional argument; the others are "
        f"keyword-only, got {len(extra)} more positional ({', '.join(map(repr, extra))}). Write "
        f"inter_channels={first!r} for a bottleneck of width {first!r}, or reduction={first!r} "
        f"for in_channels // {first!r} (the practitioner's guide's NonLocalBlock(C, {first!r}) "
        f"means reduction={first!r})"
    )


def check_int(name: str, value, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def resolve_sub_sample(sub_sample: bool | int | Sequence[int] | None, dim: int) -> tuple[int, ...]:
    """Turn the ``sub_sample`` argument into a per-dimension max-pooling kernel.

    Args:
        sub_sample: ``True`` for the paper's default (2 in 1D, (2, 2) in 2D, (1, 2, 2) in 3D: space
            only); ``False``, ``None`` or 1 for none; an int ``k`` for a *spatial* factor as in the
            practitioner's guide ((k,), (k, k), (1, k, k)); or a tuple with one kernel per dimension.
        dim: 1, 2 or 3.

    Returns:
        A tuple of ``dim`` positive ints (all ones means no subsampling).
    """
    if sub_sample is None or sub_sample is False:
        return (1,) * dim
    if sub_sample is True:
        return (1, 2, 2) if dim == 3 else (2,) * dim
    if isinstance(sub_sample, int):
        if sub_sample < 1:
            raise ValueError(f"sub_sample must be >= 1, got {sub_sample}")
        return (1, sub_sample, sub_sample) if dim == 3 else (sub_sample,) * dim
    kernel = tuple(int(k) for k in sub_sample)
    if len(kernel) != dim or any(k < 1 for k in kernel):
        raise ValueError(
            f"sub_sample must be a bool, an int or {dim} positive ints for a {dim}D block, "
            f"got {sub_sample!r}"
        )
    return kernel


__all__ = [
    "INITS",
    "MODES",
    "POSITIONS",
    "RELATIVE_RADIUS",
    "Mode",
    "check_block_input",
    "check_int",
    "check_temporal_groups",
    "check_temporal_groups_option",
    "positional_error",
    "resolve_inter_channels",
    "resolve_sub_sample",
]
