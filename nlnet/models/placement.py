"""Where a model's non-local blocks go, and the two arguments every builder takes for them.

Every builder of the registry takes ``block=`` (the block's options: a
:class:`~nlnet.layers.block_spec.BlockOptions` record, or a mapping of changes over the family's
preset) and ``placement=`` (a :class:`Placement`, or anything :meth:`Placement.of` reads: a
preset of the paper, module paths, stage -> indices). ``create_model("c2d_r50_nl5",
block={"mode": "space"})`` is Table 2d's space-only model; ``create_model("c2d_r50",
placement="nl5")`` places Table 2c's five blocks in the baseline. ("Non-local Neural Networks",
Wang et al., CVPR 2018, arXiv:1711.07971, Sec. 3.3, Sec. 4 and Table 2.)

The keywords of earlier releases (``nl_at``, ``nl_location``, ``nonlocal_inds``,
``nl_options``, ``block_options``, ``nl_stage_options`` and block options given directly) are
read in one place, :func:`block_arguments`, with a ``DeprecationWarning`` naming the new
spelling.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from nlnet.layers.block_spec import BlockLike, BlockOptions, block_option_names
from nlnet.models.resnet_layout import BLOCK_CONFIG, STAGE_NAMES
from nlnet.models.surgery import PLACEMENTS, insert_non_local, non_local_paths

__all__ = ["BlockOptions", "Placement", "PlacementLike", "block_arguments", "check_no_block",
           "family_block", "merged_builder_options", "place_non_local"]  # fmt: skip

#: Stage keys a placement accepts: the paper's names, torchvision's, or the stage number.
_STAGE_KEYS: dict[Any, str] = {
    **{name: name for name in STAGE_NAMES},
    **{tv: name for name, tv in STAGE_NAMES.items()},
    **{int(name[-1]): name for name in STAGE_NAMES},
}


@dataclass(frozen=True)
class Placement:
    """Where the blocks go: a preset of the paper, or module paths; and per-stage changes of
    the block's options.

    Attributes:
        preset: ``"nl1"``, ``"nl5"``, ``"nl10"``, ``"res2"``..``"res5"`` (Tables 2b, 2c;
            :func:`nlnet.models.surgery.non_local_paths`), resolved with the model's stage
            lengths; or ``None``.
        paths: module paths after which a block goes (``"layer3.4"``, ``"bottleneck"``), when
            there is no preset.
        stage_options: per stage ``res2``..``res5``, changes of the block's options for the
            blocks of that stage (the released 128-frame I3D: ``{"res3": {"temporal_groups":
            4}}``).
    """

    preset: str | None = None
    paths: tuple[str, ...] = ()
    stage_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.preset is not None and self.preset not in PLACEMENTS:
            raise ValueError(f"placement: expected a preset of {PLACEMENTS}, got {self.preset!r}")
        if (self.preset is None) == (not self.paths):
            raise ValueError("placement: give a preset or module paths, one of the two")
        if len(set(self.paths)) != len(self.paths):
            raise ValueError(f"placement: duplicate paths in {list(self.paths)}")
        unknown = sorted(set(self.stage_options) - set(STAGE_NAMES))
        if unknown:
            raise ValueError(f"placement: stage_options of unknown stage(s) {unknown}; "
                             "expected res2..res5")  # fmt: skip
        for changes in self.stage_options.values():
            BlockOptions.of(changes)  # a typo is one line here, not at the build

    @classmethod
    def of(cls, value: PlacementLike) -> Placement | None:
        """A placement from a :class:`Placement`, a preset, a module path or a list of them,
        a mapping ``stage -> indices`` (``{"res3": [1, 3], "res4": [1, 3, 5]}``; stages
        ``res2``..``res5``, ``layer1``..``layer4`` or 2..5), four per-stage lists
        (``[[], [1, 3], [1, 3, 5], []]``, PySlowFast's ``NONLOCAL.LOCATION``), or a mapping
        ``{"at": <any of those>, "stage_options": {...}}``; ``None`` for none (no blocks).

        Raises:
            ValueError: one line starting ``placement:``.
        """
        if value is None or value is False or isinstance(value, Placement):
            return value or None
        if isinstance(value, (str, Sequence, Mapping)) and not _has_sites(value):
            return None  # "", [], {}, four empty stages: no blocks
        if value == "after_layer4":  # the guide's name for a block after stage 4
            value = "layer4"
        if isinstance(value, Mapping) and "at" in value:
            extra = sorted(set(value) - {"at", "stage_options"})
            if extra:
                raise ValueError(f"placement: unknown key(s) {extra}; expected at, stage_options")
            inner = cls.of(value["at"])
            if inner is None:
                raise ValueError("placement: stage_options without blocks (at is empty)")
            return cls(inner.preset, inner.paths, dict(value.get("stage_options") or {}))
        if isinstance(value, str):
            return cls(preset=value) if value in PLACEMENTS else cls(paths=(value,))
        if isinstance(value, Mapping):
            return cls(paths=_stage_paths(value))
        items = list(value) if isinstance(value, Sequence) else None
        if items is None:
            raise ValueError(f"placement: expected a preset, module paths or stage indices, "
                             f"got {type(value).__name__} {value!r}")  # fmt: skip
        if len(items) == 4 and all(isinstance(s, Sequence) and not isinstance(s, str)
                                   for s in items):  # fmt: skip
            return cls(paths=_stage_paths(dict(zip(STAGE_NAMES, items))))
        if not items or not all(isinstance(p, str) for p in items):
            raise ValueError(f"placement: expected module paths (str), got {value!r}")
        return cls(paths=tuple(items))

    def resolve(self, layers: Sequence[int] = BLOCK_CONFIG[50]) -> list[str]:
        """The module paths, a preset resolved for stage lengths ``layers`` (res2..res5)."""
        return non_local_paths(self.preset, layers) if self.preset else list(self.paths)

    def stage_indices(self, layers: Sequence[int]) -> list[list[int]] | None:
        """Per stage res2..res5 the residual blocks after which a block goes, or ``None`` when
        a path is not a residual block ``layer{1-4}.{i}`` (e.g. a whole stage)."""
        out: list[list[int]] = [[], [], [], []]
        for path in self.resolve(layers):
            stage, _, idx = path.partition(".")
            if stage not in STAGE_NAMES.values() or not idx.isdigit():
                return None
            out[int(stage[-1]) - 1].append(int(idx))
        return out

    def options_for(self, path: str, block: BlockOptions) -> BlockOptions:
        """``block`` with this placement's changes for the stage of ``path`` (if any)."""
        stage = path.split(".")[0]
        name = next((n for n, tv in STAGE_NAMES.items() if tv == stage), stage)
        changes = self.stage_options.get(name)
        return block.replace(**changes) if changes else block


#: What a ``placement=`` argument accepts (:meth:`Placement.of`).
PlacementLike = Placement | str | Sequence[Any] | Mapping[Any, Any] | None


def _has_sites(value: Any) -> bool:
    if isinstance(value, str):
        return bool(value)
    if isinstance(value, Mapping):
        return "at" in value or any(_has_sites_of(v) for v in value.values())
    return any(_has_sites_of(v) for v in value)


def _has_sites_of(item: Any) -> bool:
    if isinstance(item, (str, int)):
        return item != ""
    return bool(item) and (not isinstance(item, (Sequence, Mapping)) or _has_sites(item))


def _stage_paths(stages: Mapping[Any, Any]) -> tuple[str, ...]:
    paths = []
    for key, indices in stages.items():
        key = int(key) if isinstance(key, str) and key.isdigit() else key  # JSON's keys
        if key not in _STAGE_KEYS:
            raise ValueError(f"placement: unknown stage {key!r}; expected res2..res5")
        for i in [indices] if isinstance(indices, int) else list(indices):
            if isinstance(i, bool) or not isinstance(i, int) or i < 0:
                raise ValueError(f"placement: {key}: expected block indices >= 0, got {indices!r}")
            paths.append(f"{STAGE_NAMES[_STAGE_KEYS[key]]}.{i}")
    return tuple(paths)


def family_block(
    block: BlockLike, preset: BlockOptions | Mapping[str, Any] | None = None
) -> BlockOptions:
    """The options of a family's blocks: a whole :class:`BlockOptions` as given, or the family's
    ``preset`` (the block's defaults when ``None``) with a mapping's changes on top."""
    if isinstance(block, BlockOptions):
        return block
    return (
        BlockOptions.of(preset).replace(**dict(block or {})) if block else BlockOptions.of(preset)
    )


_UNSET: Any = object()  # ``placement=`` not given (``None`` given: no blocks)
#: Keywords of earlier releases -> the argument that replaces them.
_LEGACY_PLACEMENT = ("nl_at", "nl_location", "nonlocal_inds")
_LEGACY_BLOCK = ("nl_options", "block_options")


def block_arguments(
    kwargs: dict[str, Any], default_placement: PlacementLike = None
) -> tuple[dict[str, Any] | BlockOptions | None, Placement | None]:
    """Pop ``block`` and ``placement`` out of a builder's ``kwargs`` (in place); the one reader
    of the older keywords (each with a ``DeprecationWarning``).

    Returns:
        ``(block, placement)``: the ``block=`` argument (a record, a mapping of changes, or
        ``None``) and the placement (``default_placement`` unless one is given, ``None``
        included: no blocks).

    Raises:
        ValueError: a placement or block options given twice (new and old spelling).
    """
    block, placement = kwargs.pop("block", None), kwargs.pop("placement", _UNSET)
    old_at = {k: kwargs.pop(k) for k in _LEGACY_PLACEMENT if k in kwargs}
    old_block = {k: kwargs.pop(k) for k in _LEGACY_BLOCK if k in kwargs}
    direct = {k: kwargs.pop(k) for k in block_option_names() if k in kwargs}
    stage_options = kwargs.pop("nl_stage_options", None)
    if (old_block or direct) and block is not None:
        raise ValueError("block: given twice (block= and the older keywords "
                         f"{sorted({*old_block, *direct})}); give block= only")  # fmt: skip
    if old_at and (placement is not _UNSET or len(old_at) > 1):
        raise ValueError(f"placement: given twice ({['placement', *old_at]}); give one")
    for key in old_block:
        _deprecated(key, "block={...}")
    for key in direct:
        _deprecated(key, f"block={{{key!r}: ...}}")
    for key in old_at:
        _deprecated(key, "placement=...")
    if stage_options is not None:
        _deprecated("nl_stage_options", 'placement={"at": ..., "stage_options": {...}}')
    if old_block or direct:
        block = {k: v for opts in old_block.values() for k, v in (opts or {}).items()}
        block.update(direct)
    if old_at:
        placement = next(iter(old_at.values()))
    placement = Placement.of(default_placement if placement is _UNSET else placement)
    if stage_options:
        if placement is None:
            raise ValueError("nl_stage_options: given to a model without non-local blocks")
        placement = Placement(placement.preset, placement.paths, dict(stage_options))
    return block, placement


def _deprecated(old: str, new: str) -> None:
    warnings.warn(
        f"{old}= is deprecated; write {new} (nlnet.models.placement)",
        DeprecationWarning,
        stacklevel=5,
    )  # fmt: skip  (the caller of create_model)


def check_no_block(block: BlockLike) -> None:
    """The one refusal of block options for a model without blocks (they would be ignored)."""
    if block:
        raise ValueError(
            "block: options given to a model without non-local blocks; pass placement= to "
            "place blocks"
        )


def place_non_local(
    model: nn.Module,
    placement: Placement | None,
    block: BlockLike,
    preset: BlockOptions | Mapping[str, Any] | None = None,
    **where: Any,
) -> nn.Module:
    """Insert blocks where ``placement`` says (in place), with the options of
    :func:`family_block` (``block`` over the family's ``preset``); ``where``: ``in_channels``,
    ``dim`` or ``layers`` of :func:`~nlnet.models.surgery.insert_non_local`. Options given for
    a model without a placement are an error rather than silently ignored."""
    if placement is None:
        check_no_block(block)
        return model
    options = family_block(block, preset)
    layers = where.pop("layers", None)
    if placement.preset and layers is None:
        layers = getattr(model, "layers_cfg", None) or _stage_lengths(model, placement)
    groups: dict[BlockOptions, list[str]] = {}  # one insertion per option set: all paths
    for path in placement.resolve(layers) if placement.preset else placement.paths:
        groups.setdefault(placement.options_for(path, options), []).append(path)
    for opts, paths in groups.items():
        insert_non_local(model, paths, **where, **opts.kwargs())
    return model


def _stage_lengths(model: nn.Module, placement: Placement) -> list[int]:
    """The residual blocks of ``model``'s stages ``layer1``..``layer4`` (for a preset)."""
    try:
        stages = [model.get_submodule(f"layer{i}") for i in range(1, 5)]
    except AttributeError:
        raise ValueError(f"placement: the preset {placement.preset!r} needs stages "
                         f"layer1..layer4; {type(model).__name__} has none") from None  # fmt: skip
    return [len([n for n, _ in s.named_children() if n != "non_local"]) for s in stages]


def merged_builder_options(options: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Builder options ``over`` on top of ``options`` (a released model's, ``nlnet
    import-caffe2 --override``): block options (``impl=math`` or ``block={...}``) join
    ``options["block"]`` (e.g. ``{norm: null}`` of the affine files) instead of replacing it."""
    out, block = dict(options), dict(options.get("block") or {})
    for key, value in over.items():
        if key in block_option_names():
            block[key] = value
        elif key == "block":
            block.update(value or {})
        else:
            out[key] = value
    if block:
        out["block"] = block
    return out
