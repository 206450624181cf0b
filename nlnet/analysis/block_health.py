"""Block health: has a non-local block opened, and does it attend to anything in particular?

A new non-local block is the identity (the BN scale after ``W_z`` starts at zero, Sec. 4.1 of
Wang et al., "Non-local Neural Networks", CVPR 2018, arXiv:1711.07971), and no gradient reaches
``theta``, ``phi`` and ``g`` until that scale moves. On small data the block can stay (nearly)
the identity for a whole run, and the model then trains as the network without it. Three
numbers per block tell it:

* ``output_ratio``: ``||z - x|| / ||x||`` over the recorded inputs, how far the block's output
  ``z = norm(W_z y) + x`` (Eq. 6) is from its input: 0 for the identity;
* ``scale``: the mean ``|gamma|`` of the norm after ``W_z`` (times ``|gate|`` with SAGAN's scalar
  gate); ``None`` without a norm scale;
* ``entropy`` and ``max_weight``: the attention weights ``f / C`` (Eq. 1) of a softmax form, per
  query, as the entropy relative to a uniform row (1: uniform, 0: one key) and the largest
  weight; ``None`` for the dot-product and concatenation forms (no distribution) or when the
  weight matrix would be too large to form.

:class:`HealthRecorder` records them during a model's own forward passes (forward hooks; the
attention is re-evaluated on the same input in eval mode without gradients, so the model's
outputs and state are unchanged); :func:`measure_health` runs one batch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from nlnet.analysis.attention_record import attention_of, find_non_local_blocks
from nlnet.layers.gate import GatedNorm
from nlnet.layers.nonlocal_block import NonLocalNd

__all__ = [
    "IDENTITY_BELOW",
    "UNIFORM_ABOVE",
    "BlockHealth",
    "HealthRecorder",
    "health_table",
    "measure_health",
    "norm_scale",
]

#: A block whose output differs from its input by less than this fraction is "(nearly) the
#: identity". Set on the demo's screening seeds (docs/demo.md): with the paper's zero start the
#: runs that stayed at chance ended at 3-7%, those that learned at about 15-25%.
IDENTITY_BELOW = 0.1
#: A block whose attention entropy is above this fraction of a uniform row's "attends uniformly".
UNIFORM_ABOVE = 0.99
#: Largest attention matrix (entries per sample) re-evaluated for the entropy.
MAX_ATTENTION_ENTRIES = 1 << 24


@dataclasses.dataclass(frozen=True)
class BlockHealth:
    """The health of one block (see the module docstring for the fields)."""

    name: str
    output_ratio: float | None
    scale: float | None
    entropy: float | None = None
    max_weight: float | None = None
    keys: int | None = None

    def problems(
        self, identity_below: float = IDENTITY_BELOW, uniform_above: float = UNIFORM_ABOVE
    ) -> list[str]:
        """What is wrong, as phrases ("(nearly) the identity", "attends uniformly"); ``[]``."""
        out = []
        if self.output_ratio is not None and self.output_ratio < identity_below:
            out.append("is (nearly) the identity")
        if self.entropy is not None and self.entropy > uniform_above:
            out.append("attends uniformly")
        return out

    def describe(self) -> str:
        """One line: the figures that are known."""
        parts = []
        if self.output_ratio is not None:
            parts.append(f"output {100 * self.output_ratio:.1f}% of its input")
        if self.scale is not None:
            parts.append(f"norm scale {self.scale:.3f}")
        if self.entropy is not None:
            parts.append(f"attention entropy {self.entropy:.2f} of uniform")
        if self.max_weight is not None and self.keys:
            parts.append(f"largest weight {self.max_weight:.3f} (uniform {1 / self.keys:.3f})")
        return ", ".join(parts)

    def metrics(self) -> dict[str, float]:
        """The known figures as ``{"health.<name>.<field>": value}`` (a metrics record)."""
        fields = ("output_ratio", "scale", "entropy", "max_weight")
        values = {f: getattr(self, f) for f in fields}
        return {f"health.{self.name}.{f}": float(v) for f, v in values.items() if v is not None}


def norm_scale(block: NonLocalNd) -> float | None:
    """Mean ``|gamma|`` of the norm after ``W_z`` (times ``|gate|`` for a gated norm); ``None``
    for a block without a norm scale."""
    norm, gate = block.norm, None
    if isinstance(norm, GatedNorm):
        norm, gate = norm.inner, float(norm.gamma.detach().abs())
    weight = getattr(norm, "weight", None)
    scale = float(weight.detach().abs().mean()) if isinstance(weight, Tensor) else None
    if gate is None:
        return scale
    return gate * (scale if scale is not None else 1.0)


def _keys_per_query(block: NonLocalNd, grid: tuple[int, ...]) -> int:
    """How many keys one query can attend to (the pooled grid, or its frame / position)."""
    keys = block.key_grid(grid)
    if block.mode == "space":
        return math.prod(keys[1:])
    if block.mode == "time":
        return keys[0]
    if block.temporal_groups:
        return block.temporal_groups // block.kernel[0] * math.prod(keys[1:])
    return math.prod(keys)


class _Sums:
    """Running sums of one block's figures over the recorded forward passes."""

    def __init__(self) -> None:
        self.diff2 = self.in2 = 0.0
        self.entropy = self.max_weight = 0.0
        self.rows = 0
        self.keys: int | None = None

    def add_output(self, x: Tensor, z: Tensor) -> None:
        self.diff2 += float((z.float() - x.float()).square().sum())
        self.in2 += float(x.float().square().sum())

    def add_attention(self, attn: Tensor, keys: int) -> None:
        a = attn.float().flatten(0, -2)  # (rows, N')
        plogp = torch.where(a > 0, a * a.clamp_min(1e-30).log(), torch.zeros_like(a))
        h = -plogp.sum(-1) / math.log(keys) if keys > 1 else torch.ones(len(a))
        self.entropy += float(h.sum())
        self.max_weight += float(a.amax(-1).sum())
        self.rows += len(a)
        self.keys = keys


class HealthRecorder:
    """Records the health of a model's non-local blocks during its forward passes.

    Use as a context manager; the first ``max_calls`` forward calls of each block are
    measured (the attention on the first ``attention_samples`` samples of each), later ones
    pass untouched. :meth:`results` gives one :class:`BlockHealth` per block.

    Args:
        model: any module; its :class:`~nlnet.layers.NonLocalNd` blocks are watched.
        max_calls: forward calls measured per block.
        attention_samples: samples whose attention weights are re-evaluated per call.
    """

    def __init__(self, model: nn.Module, max_calls: int = 1, attention_samples: int = 4) -> None:
        self.blocks = dict(find_non_local_blocks(model))
        self.max_calls, self.attention_samples = max_calls, attention_samples
        self.sums = {name: _Sums() for name in self.blocks}
        self.calls = dict.fromkeys(self.blocks, 0)
        self._handles: list[Any] = []

    def _hook(self, name: str):
        def hook(module: NonLocalNd, args: tuple, kwargs: dict, output: Any) -> None:
            if self.calls[name] >= self.max_calls or not args:
                return
            self.calls[name] += 1
            x = args[0].detach()
            z = (output[0] if isinstance(output, tuple) else output).detach()
            sums = self.sums[name]
            sums.add_output(x, z)
            grid = tuple(x.shape[2:])
            keys = _keys_per_query(module, grid)
            entries = math.prod(grid) * math.prod(module.key_grid(grid))
            if module.form.softmax and 0 < entries <= MAX_ATTENTION_ENTRIES and keys > 0:
                sub = x[: self.attention_samples]
                sums.add_attention(attention_of(module, (sub,), kwargs), keys)

        return hook

    def __enter__(self) -> HealthRecorder:
        for name, block in self.blocks.items():
            self._handles.append(block.register_forward_hook(self._hook(name), with_kwargs=True))
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def results(self) -> list[BlockHealth]:
        """One :class:`BlockHealth` per watched block, in module order."""
        out = []
        for name, block in self.blocks.items():
            s = self.sums[name]
            ratio = math.sqrt(s.diff2 / s.in2) if s.in2 > 0 else None
            out.append(BlockHealth(
                name, ratio, norm_scale(block),
                s.entropy / s.rows if s.rows else None,
                s.max_weight / s.rows if s.rows else None, s.keys,
            ))  # fmt: skip
        return out


@torch.no_grad()
def measure_health(model: nn.Module, inputs: Tensor, **kwargs: Any) -> list[BlockHealth]:
    """The health of ``model``'s blocks on one batch ``inputs`` (eval mode, no gradient; the
    model's mode is restored). ``kwargs`` go to :class:`HealthRecorder`."""
    was_training = model.training
    model.eval()
    try:
        with HealthRecorder(model, **kwargs) as rec:
            model(inputs)
    finally:
        model.train(was_training)
    return rec.results()


def health_table(results: Iterable[BlockHealth], **thresholds: float) -> str:
    """A plain-text table, one line per block, with what is wrong (``problems``)."""
    rows = [("block", "output/input", "norm scale", "entropy", "max weight", "verdict")]
    for r in results:
        cells = [r.name]
        for value, fmt in ((r.output_ratio, "{:.2%}"), (r.scale, "{:.3f}"),
                           (r.entropy, "{:.3f}"), (r.max_weight, "{:.3f}")):  # fmt: skip
            cells.append("-" if value is None else fmt.format(value))
        measured = r.output_ratio is not None or r.entropy is not None
        cells.append(", ".join(r.problems(**thresholds)) or "ok" if measured else "-")
        rows.append(tuple(cells))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)
