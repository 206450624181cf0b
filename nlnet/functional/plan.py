"""How a non-local block evaluates one input shape: the plan, decided once, applied by the layer.

The block ``z = W_z y + x`` (Wang et al., CVPR 2018, arXiv 1711.07971, Eq. 6) can run its pairwise
part (Eq. 1) several exact ways: the textbook order on the explicit ``N x N'`` matrix, that order
with ``W_theta``/``W_z`` re-associated around the matrix (:mod:`nlnet.functional.reassociated`),
the token fast paths of :func:`nlnet.functional.non_local`, the concatenation form from folded
scores (Eq. 5), or attention inside groups (the ``space``/``time`` modes of Table 2d).
:func:`plan_non_local` picks one from the sizes and the block's options only -- a pure function,
cached per input shape -- and :class:`nlnet.layers.NonLocalNd` applies it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from nlnet.functional.instantiations import form
from nlnet.functional.nonlocal_op import choose_impl
from nlnet.functional.reassociated import associativity_macs, block_macs, reassociation_plan

__all__ = ["NonLocalPlan", "PATHS", "plan_non_local"]

Path = Literal["reference", "reassociated", "tokens", "scores", "grouped"]
#: ``reference``: the explicit matrix in the textbook order (also the only path with weights);
#: ``reassociated``: the explicit matrix with projections moved (exact by linearity);
#: ``tokens``: :func:`~nlnet.functional.non_local` on the token views;
#: ``scores``: the concatenation form from the folded scores ``a``, ``b`` (Eq. 5);
#: ``grouped``: ``space``/``time`` attention as batched groups of tokens.
PATHS: tuple[str, ...] = ("reference", "reassociated", "tokens", "scores", "grouped")


@dataclass(frozen=True)
class NonLocalPlan:
    """The path of one block call and what it needs.

    Attributes:
        path: one of :data:`PATHS`.
        op_impl: ``impl`` handed to the pairwise op(s) the path calls: ``"fast"`` or
            ``"reference"`` when the sizes were known, else the block's own ``impl`` (a
            ``torch.fx`` trace: the wrapped op decides at run time).
        reassociate: ``(query_side, value_side)`` of the ``reassociated`` path.
        n: query positions per attention call (``None``: sizes unknown).
        n_keys: key positions per attention call (``None``: sizes unknown).
    """

    path: Path
    op_impl: str
    reassociate: tuple[bool, bool] = (False, False)
    n: int | None = None
    n_keys: int | None = None


def _attention_sizes(
    grid: Sequence[int], kernel: Sequence[int], mode: str, temporal_groups: int | None
) -> tuple[int, int]:
    """Queries and keys of one attention call: the whole grid, a frame (``space``), a
    position across frames (``time``) or a group of frames (``temporal_groups``)."""
    keys = [s // k for s, k in zip(grid, kernel)]
    sizes = list(grid)
    if temporal_groups is not None:
        sizes[0], keys[0] = temporal_groups, temporal_groups // kernel[0]
    if mode == "space":
        sizes, keys = sizes[1:], keys[1:]
    elif mode == "time":
        sizes, keys = sizes[:1], keys[:1]
    n = n_keys = 1
    for s, k in zip(sizes, keys):
        n, n_keys = n * s, n_keys * k
    return n, n_keys


@functools.lru_cache(maxsize=1024)
def _plan(
    instantiation: str, grid: tuple[int, ...], kernel: tuple[int, ...], channels: int,
    inter_channels: int, mode: str, temporal_groups: int | None, pool_after: bool, impl: str,
    device_type: str, training: bool,
) -> NonLocalPlan:  # fmt: skip
    f = form(instantiation)
    d = inter_channels if f.embedded else channels  # gaussian: f on x itself (d = C)
    d_v = inter_channels
    n, n_keys = _attention_sizes(grid, kernel, mode, temporal_groups)
    device = torch.device(device_type)
    if impl == "auto" and f.reassociates and mode == "spacetime" and temporal_groups is None:
        op = choose_impl(instantiation, n, n_keys, d, d_v, device=device, training=training)
        order = reassociation_plan(instantiation, n, n_keys, channels, d, d_v)
        if op == "fast" and f.fast_path == "associativity":
            # the op's associativity path vs the explicit matrix in the cheaper association
            # (28x28 at 512 channels: 260 M against 321 M multiply-adds per sample)
            macs = block_macs(instantiation, n, n_keys, channels, d, d_v, order)
            if macs < associativity_macs(n, n_keys, channels, d, d_v):
                return NonLocalPlan("reassociated", "reference", order, n, n_keys)
        elif op == "reference" and any(order):
            return NonLocalPlan("reassociated", "reference", order, n, n_keys)
    if impl == "auto":
        impl = choose_impl(instantiation, n, n_keys, d, d_v, device=device, training=training)
    return NonLocalPlan(
        _structural_path(f.scores, mode, pool_after), impl, (False, False), n, n_keys
    )


def _structural_path(scores: str, mode: str, pool_after: bool) -> Path:
    if mode != "spacetime":
        return "grouped"
    # Eq. 5 from folded scores needs phi before any pooling of its output
    return "scores" if scores == "concat" and not pool_after else "tokens"


def plan_non_local(
    instantiation: str,
    grid: Sequence[int] | None,
    kernel: Sequence[int],
    channels: int,
    inter_channels: int,
    *,
    mode: str = "spacetime",
    temporal_groups: int | None = None,
    pool_position: str = "before",
    impl: str = "auto",
    device: torch.device | str = "cpu",
    training: bool = False,
) -> NonLocalPlan:
    """The evaluation plan of a non-local block for one input grid.

    Args:
        instantiation: one of :data:`~nlnet.functional.instantiations.INSTANTIATIONS`.
        grid: the input grid ``(T, H, W)`` / ``(H, W)`` / ``(L,)``; ``None`` when the sizes are
            not known (a ``torch.fx`` trace): the structural path with the block's ``impl``.
        kernel: the key/value pooling kernel (``sub_sample``), one entry per grid axis.
        channels: the block's input channels C.
        inter_channels: the bottleneck width d (= d_v).
        mode: ``"spacetime"``, ``"space"`` or ``"time"`` (Table 2d).
        temporal_groups: attention within groups of this many frames (``None``: off).
        pool_position: ``"before"`` or ``"after"`` the ``phi``/``g`` projections.
        impl: the block's ``impl``: ``"auto"`` chooses by size; ``"fast"``/``"reference"``
            are kept (``"reference"`` is the textbook path).
        device: where the tensors live (the CPU crossovers of :func:`choose_impl`).
        training: whether a backward pass will follow.

    Returns:
        A :class:`NonLocalPlan`; equal arguments give the same (cached) plan.
    """
    if impl == "reference":
        return NonLocalPlan("reference", "reference")
    f = form(instantiation)
    pool_after = pool_position == "after" and any(k > 1 for k in kernel)
    if grid is None:
        return NonLocalPlan(_structural_path(f.scores, mode, pool_after), impl)
    # a symbolic size (torch.export with a dynamic clip length) stays symbolic: int() would
    # specialise the exported graph to the example's size
    symbolic = any(isinstance(s, torch.SymInt) for s in grid)
    args = (
        instantiation, tuple(s if isinstance(s, torch.SymInt) else int(s) for s in grid),
        tuple(int(k) for k in kernel), int(channels), int(inter_channels), mode,
        temporal_groups, pool_after, impl, torch.device(device).type, bool(training),
    )  # fmt: skip
    # compiling or exporting: decide afresh (an export may forbid a path, e.g. ONNX sorting)
    fresh = symbolic or torch.compiler.is_compiling()
    return _plan.__wrapped__(*args) if fresh else _plan(*args)
