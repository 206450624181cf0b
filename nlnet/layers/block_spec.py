"""The non-local block's options as one typed, frozen record.

:class:`BlockOptions` holds every keyword option of :class:`~nlnet.layers.nonlocal_block.NonLocalNd`
(Wang et al., "Non-local Neural Networks", CVPR 2018, arXiv:1711.07971: the instantiation of
Sec. 3.2, the bottleneck and subsampling of Sec. 3.3, the 3D ``mode`` of Table 2d, the
initialisation of Sec. 4.1) with the block's own defaults, which are the paper's video block.
The block keeps its keyword form (``NonLocal3d(C, **options.kwargs())``); model builders take
one ``block=`` argument (a record, or a mapping of changes over their family's preset), so a
typo or a bad choice is one line when the options are read, before any model is built::

    >>> BlockOptions.of({"instantiation": "dot_product", "mode": "space"}).mode
    'space'
    >>> BlockOptions.of({"instantation": "dot_product"})
    Traceback (most recent call last):
    ValueError: block: unknown option 'instantation' (did you mean 'instantiation'?) ...
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from nlnet.layers.block_norm import check_norm_args
from nlnet.layers.block_options import check_choices, check_int
from nlnet.layers.gate import GATES

__all__ = ["BlockOptions", "BlockLike", "block_option_names"]


@dataclass(frozen=True)
class BlockOptions:
    """Every option of the non-local block (:class:`~nlnet.layers.nonlocal_block.NonLocalNd`,
    whose docstring explains each); the defaults are the block's, i.e. the paper's video block
    (embedded Gaussian, ``C / 2`` bottleneck, (1, 2, 2) max-pool subsampling, BN with scale 0
    after ``W_z``: Sec. 3.2-4.1).

    Build one with :meth:`of` (from a mapping, e.g. a config's ``block:`` section), change one
    with :meth:`replace`; both check the options that do not depend on the block's channels or
    rank (those are checked when the block is built).
    """

    instantiation: str = "embedded_gaussian"
    inter_channels: int | None = None
    reduction: int | None = None
    sub_sample: bool | int | tuple[int, ...] | None = True
    pool_position: str = "before"
    bias: bool = True
    norm: str | None = "bn"
    norm_eps: float = 1e-5
    norm_momentum: float | None = 0.1
    norm_groups: int | None = None
    gate: str | None = None
    mode: str = "spacetime"
    temporal_groups: int | None = None
    scale: bool | float = True
    impl: str = "auto"
    phi_init: str = "he"
    pos: str = "none"
    init: str = "bn_zero"
    gamma_init: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.sub_sample, list):  # YAML gives lists; the record stays hashable
            object.__setattr__(self, "sub_sample", tuple(self.sub_sample))
        try:
            self._check()
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"block: {exc}") from None

    def _check(self) -> None:
        # rank and channels are not known yet: the checks that need them run in the block
        check_choices(
            3, 1 << 30, instantiation=self.instantiation, scale=self.scale,
            pool_position=self.pool_position, bias=self.bias, mode=self.mode, impl=self.impl,
            phi_init=self.phi_init, pos=self.pos, init=self.init, gate=self.gate,
            gamma_init=self.gamma_init,
        )  # fmt: skip
        groups = self.norm_groups
        check_norm_args(self.norm, groups or 1, self.norm_eps, self.norm_momentum, groups)
        if self.gate not in GATES:
            raise ValueError(f"gate must be one of {GATES}, got {self.gate!r}")
        for name in ("inter_channels", "reduction", "temporal_groups"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name))
        if self.inter_channels is not None and self.reduction is not None:
            raise ValueError("give either inter_channels or reduction, not both")

    @classmethod
    def of(cls, value: BlockLike = None, **changes: Any) -> BlockOptions:
        """A record from ``None`` (the block's defaults), a mapping of options or a record,
        with ``changes`` on top.

        Raises:
            ValueError: one line starting ``block:``: an unknown option (with the closest
                name), a value the block refuses, or ``value`` of another type.
        """
        if isinstance(value, BlockOptions):
            return value.replace(**changes) if changes else value
        if value is not None and not isinstance(value, Mapping):
            raise ValueError(
                f"block: expected a mapping of block options or a BlockOptions, got "
                f"{type(value).__name__} {value!r}"
            )
        given = {**dict(value or {}), **changes}
        _check_names(given)
        return cls(**given)

    def replace(self, **changes: Any) -> BlockOptions:
        """This record with ``changes`` (checked as by :meth:`of`)."""
        _check_names(changes)
        return replace(self, **changes)

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the block: ``NonLocal2d(C, **options.kwargs())``."""
        return asdict(self)

    def changes(self) -> dict[str, Any]:
        """The options that differ from the block's defaults (what a summary or a config
        needs to write)."""
        default = BlockOptions()
        return {k: v for k, v in asdict(self).items() if getattr(default, k) != v}


#: What a ``block=`` argument accepts: nothing (the family's preset), a mapping of changes, or
#: a whole record.
BlockLike = BlockOptions | Mapping[str, Any] | None


def block_option_names() -> tuple[str, ...]:
    """The names of the block's options, in the record's order."""
    return tuple(f.name for f in fields(BlockOptions))


def _check_names(given: Mapping[str, Any]) -> None:
    names = block_option_names()
    for key in given:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"block: unknown option {key!r}{hint}; the block's options are {', '.join(names)}"
            )
