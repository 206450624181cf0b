"""How the model builders take non-local block options and place the blocks.

A builder of the registry (``create_model("c2d_r50_nl5", mode="space")``) accepts the options
of the non-local block ("Non-local Neural Networks", Wang et al., CVPR 2018, arXiv:1711.07971,
Section 3.3 and Table 2) among its own keyword arguments: :func:`split_block_options` takes
them out (names in :data:`BLOCK_OPTIONS`, plus an ``nl_options`` dict), and
:func:`place_non_local` inserts blocks with them where a placement (``nl_at``) says.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from nlnet.layers.nonlocal_block import BLOCK_OPTIONS
from nlnet.models.surgery import insert_non_local

__all__ = ["BLOCK_OPTIONS", "split_block_options", "place_non_local"]


def split_block_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Pop the block options out of a builder's ``kwargs`` (in place): ``nl_options`` merged
    with any :data:`BLOCK_OPTIONS` given directly (those win)."""
    opts = dict(kwargs.pop("nl_options", None) or {})
    for k in BLOCK_OPTIONS:
        if k in kwargs:
            opts[k] = kwargs.pop(k)
    return opts


def place_non_local(model: nn.Module, at: Any, opts: dict[str, Any]) -> nn.Module:
    """Insert blocks with ``opts`` at ``at`` (a preset or module paths); options without a
    placement are an error rather than silently ignored."""
    if at:
        insert_non_local(model, at, **opts)
    elif opts:
        raise ValueError(
            f"block options {sorted(opts)} given to a model without non-local blocks; "
            "pass nl_at= to place blocks"
        )
    return model
