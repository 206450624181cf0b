"""Record the attention maps of non-local blocks during a forward pass, and map their indices.

The non-local operation ("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971), Sec. 3.1, Eq. 1) computes at each query
position ``i`` a weighted sum over key positions ``j``; for the embedded Gaussian form (Eq. 3) the
weights ``f(x_i, x_j) / C(x)`` are a softmax over ``j`` (Sec. 3.2), the quantity drawn as arrows in
the paper's Figures 1 and 3. This module makes those weights observable for any model:

* :func:`record_attention` is a context manager that hooks chosen non-local blocks of a model and
  stores each block's weights ``(B, N, N')`` (N queries on the block's input grid, N' keys on its
  subsampled grid, both flattened row-major) without changing what the model computes;
* :class:`GridMapping` converts between flattened query/key indices and frames, rows and columns
  of the model's input (subsampling included), so a weight can be drawn at the pixels it refers to.

The same recorder watches the transformers' attention layers (``kind="transformer"``, the
default for a model without non-local blocks): :class:`~nlnet.layers.MultiheadSelfAttention`
maps ``(B, heads, n, m)`` (ViT, the video transformers) and
:class:`~nlnet.layers.WindowAttention` maps ``(B, windows, heads, N, N)`` (Swin), which
:mod:`nlnet.analysis.rollout` turns into whole-image maps and attention rollout.

Example::

    with record_attention(model) as rec:
        logits = model(clip)                     # (B, classes), unchanged
    name = rec.names[0]
    attn = rec.maps[name]                        # (B, N, N')
    m = rec.mapping(name, clip.shape[2:])        # input grid (T, H, W)
    q = m.query_index((0, 20, 13))               # frame 0, row 20, column 13
    top = attn[0, q].topk(20).indices            # 20 strongest keys
    centers = [m.key_center(int(j)) for j in top]  # (t, y, x) in frame/pixel coordinates
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor, nn

from nlnet.layers.attention import MultiheadSelfAttention
from nlnet.layers.nonlocal_block import NonLocalNd
from nlnet.layers.window_attention import WindowAttention

__all__ = [
    "AttentionRecorder",
    "GridMapping",
    "KINDS",
    "attention_of",
    "find_attention_layers",
    "find_non_local_blocks",
    "record_attention",
]

#: What :func:`record_attention` can watch.
KINDS = ("auto", "non_local", "transformer")


def find_non_local_blocks(model: nn.Module) -> list[tuple[str, NonLocalNd]]:
    """All non-local blocks of ``model`` as ``(qualified name, block)``, in module order."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    return [(n, m) for n, m in model.named_modules() if isinstance(m, NonLocalNd)]


def find_attention_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """All transformer attention layers (``MultiheadSelfAttention``, ``WindowAttention``) of
    ``model`` as ``(qualified name, layer)``, in module order."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    kinds = (MultiheadSelfAttention, WindowAttention)
    return [(n, m) for n, m in model.named_modules() if isinstance(m, kinds)]


@dataclasses.dataclass(frozen=True)
class GridMapping:
    """Index arithmetic between a block's query/key grids and the model input.

    All sizes are per grid axis: ``(T, H, W)`` for video, ``(H, W)`` for images, ``(L,)`` for
    sequences. A query index enumerates the block's input grid ``feature_size`` row-major; a key
    index enumerates the pooled grid ``key_size`` (floor max-pooling with ``kernel``, Sec. 3.3
    "subsampling"). A feature cell covers ``input_size / feature_size`` input positions per axis
    (the network's cumulative stride; 1 in time for a C2D model without temporal pooling).

    Coordinates returned by the ``*_center`` methods are in *index* units of the input (frame
    index, pixel row, pixel column), i.e. the convention of ``matplotlib.imshow`` where pixel ``i``
    is centred at ``i``. Boxes are half-open ``[start, stop)`` edges in the same units plus 0.5.

    Attributes:
        feature_size: the block's input grid (queries).
        key_size: the pooled grid (keys and values).
        kernel: subsampling kernel per axis (1 = no pooling).
        input_size: the model input grid (frames, rows, columns).
    """

    feature_size: tuple[int, ...]
    key_size: tuple[int, ...]
    kernel: tuple[int, ...]
    input_size: tuple[int, ...]

    def __post_init__(self) -> None:
        n = len(self.feature_size)
        for name in ("key_size", "kernel", "input_size"):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"{name}: expected {n} entries like feature_size={self.feature_size}, "
                    f"got {getattr(self, name)}"
                )
        for f, k, kk in zip(self.feature_size, self.key_size, self.kernel):
            if kk < 1 or f < 1 or k != f // kk:
                raise ValueError(
                    f"key_size {self.key_size} is not feature_size {self.feature_size} "
                    f"floor-pooled by kernel {self.kernel}"
                )

    @classmethod
    def for_block(
        cls,
        block: NonLocalNd,
        feature_size: Sequence[int],
        input_size: Sequence[int] | None = None,
    ) -> GridMapping:
        """The mapping of ``block`` applied to a ``feature_size`` grid of an ``input_size`` input."""
        feature_size = tuple(int(s) for s in feature_size)
        input_size = feature_size if input_size is None else tuple(int(s) for s in input_size)
        return cls(feature_size, block.key_grid(feature_size), tuple(block.kernel), input_size)

    # -- sizes ---------------------------------------------------------------------------------
    @property
    def num_queries(self) -> int:
        return math.prod(self.feature_size)

    @property
    def num_keys(self) -> int:
        return math.prod(self.key_size)

    @property
    def stride(self) -> tuple[float, ...]:
        """Input positions per feature cell along each axis."""
        return tuple(i / f for i, f in zip(self.input_size, self.feature_size))

    # -- queries -------------------------------------------------------------------------------
    def query_index(self, position: Sequence[float]) -> int:
        """Flattened query index of the feature cell containing an input ``position`` (t, y, x).

        Raises:
            ValueError: wrong length or a position outside the input.
        """
        pos = tuple(position)
        if len(pos) != len(self.input_size):
            raise ValueError(
                f"position: expected {len(self.input_size)} coordinates for an input grid "
                f"{self.input_size}, got {position!r}"
            )
        cell = []
        for p, size, s, f in zip(pos, self.input_size, self.stride, self.feature_size):
            if not 0 <= p < size:
                raise ValueError(f"position: {position!r} lies outside the input {self.input_size}")
            cell.append(min(int(p // s), f - 1))
        return _ravel(cell, self.feature_size)

    def query_cell(self, index: int) -> tuple[int, ...]:
        """Feature-grid cell ``(t, h, w)`` of a flattened query index."""
        return _unravel(index, self.feature_size, "query index")

    def query_box(self, index: int) -> tuple[tuple[float, float], ...]:
        """Per-axis ``(start, stop)`` input extent of a query cell."""
        cell = self.query_cell(index)
        return tuple((c * s, (c + 1) * s) for c, s in zip(cell, self.stride))

    def query_center(self, index: int) -> tuple[float, ...]:
        """Input coordinates (frame, row, column index units) of a query cell's centre."""
        return tuple((a + b) / 2 - 0.5 for a, b in self.query_box(index))

    # -- keys ----------------------------------------------------------------------------------
    def key_cell(self, index: int) -> tuple[int, ...]:
        """Pooled-grid cell ``(t', h', w')`` of a flattened key index."""
        return _unravel(index, self.key_size, "key index")

    def key_feature_box(self, index: int) -> tuple[tuple[int, int], ...]:
        """Per-axis ``[start, stop)`` range of feature cells pooled into key ``index``."""
        return tuple((c * k, (c + 1) * k) for c, k in zip(self.key_cell(index), self.kernel))

    def key_box(self, index: int) -> tuple[tuple[float, float], ...]:
        """Per-axis ``(start, stop)`` input extent of a key cell (subsampling included)."""
        return tuple((a * s, b * s) for (a, b), s in zip(self.key_feature_box(index), self.stride))

    def key_center(self, index: int) -> tuple[float, ...]:
        """Input coordinates (frame, row, column index units) of a key cell's centre."""
        return tuple((a + b) / 2 - 0.5 for a, b in self.key_box(index))

    def key_index(self, position: Sequence[float]) -> int:
        """Flattened key index of the pooled cell containing an input ``position``.

        Positions in a remainder row/column dropped by floor pooling map to the last cell.
        """
        pos = tuple(position)
        if len(pos) != len(self.input_size):
            raise ValueError(
                f"position: expected {len(self.input_size)} coordinates, got {position!r}"
            )
        cell = []
        for p, size, s, k, n in zip(pos, self.input_size, self.stride, self.kernel, self.key_size):
            if not 0 <= p < size:
                raise ValueError(f"position: {position!r} lies outside the input {self.input_size}")
            cell.append(min(int(p // s) // k, n - 1))
        return _ravel(cell, self.key_size)

    def key_map(self, weights: Tensor) -> Tensor:
        """Reshape one query's weights ``(N',)`` to the pooled grid ``key_size``."""
        if weights.shape[-1] != self.num_keys:
            raise ValueError(
                f"weights: expected a last dimension of {self.num_keys} keys (grid "
                f"{self.key_size}), got shape {tuple(weights.shape)}"
            )
        return weights.reshape(*weights.shape[:-1], *self.key_size)


def _ravel(cell: Sequence[int], size: Sequence[int]) -> int:
    index = 0
    for c, s in zip(cell, size):
        index = index * s + int(c)
    return index


def _unravel(index: int, size: Sequence[int], what: str) -> tuple[int, ...]:
    index = int(index)
    total = math.prod(size)
    if not 0 <= index < total:
        raise ValueError(f"{what}: {index} out of range for a grid {tuple(size)} ({total} cells)")
    out = []
    for s in reversed(size):
        out.append(index % s)
        index //= s
    return tuple(reversed(out))


class AttentionRecorder:
    """What :func:`record_attention` collects.

    Attributes:
        blocks: the watched blocks by name.
        maps: name -> weights ``(B, N, N')`` of the latest forward pass.
        feature_sizes: name -> the block's input grid of the latest pass.
        history: name -> list of the weights of every pass (only with ``keep_history=True``).
    """

    def __init__(self, blocks: dict[str, nn.Module]) -> None:
        self.blocks = blocks
        self.maps: dict[str, Tensor] = {}
        self.feature_sizes: dict[str, tuple[int, ...]] = {}
        self.history: dict[str, list[Tensor]] = {name: [] for name in blocks}

    @property
    def names(self) -> list[str]:
        """Names of the watched blocks, in module order."""
        return list(self.blocks)

    def mapping(self, name: str, input_size: Sequence[int] | None = None) -> GridMapping:
        """The :class:`GridMapping` of block ``name`` for the last recorded pass.

        Args:
            name: a watched block.
            input_size: the model input grid (e.g. ``clip.shape[2:]``); default: the block grid.
        """
        if name not in self.feature_sizes:
            raise KeyError(f"name: no attention recorded for block {name!r} (have {self.names})")
        if not isinstance(self.blocks[name], NonLocalNd):
            raise ValueError(
                f"name: {name!r} is a transformer attention layer; its maps are drawn with "
                "nlnet.analysis.rollout"
            )
        return GridMapping.for_block(self.blocks[name], self.feature_sizes[name], input_size)

    def clear(self) -> None:
        self.maps.clear()
        self.feature_sizes.clear()
        for v in self.history.values():
            v.clear()


def _watched(model: nn.Module, kind: str) -> dict[str, nn.Module]:
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")
    if kind in ("auto", "non_local"):
        found = dict(find_non_local_blocks(model))
        if found or kind == "non_local":
            if not found:
                raise ValueError(f"model: {type(model).__name__} contains no non-local block")
            return found
    found = dict(find_attention_layers(model))
    if not found:
        raise ValueError(
            f"model: {type(model).__name__} contains no non-local block or attention layer"
        )
    return found


def _is_non_local(found: dict[str, nn.Module]) -> bool:
    return all(isinstance(m, NonLocalNd) for m in found.values())


def attention_of(module: nn.Module, args: tuple, kwargs: dict) -> Tensor:
    """Re-evaluate ``module`` on the same input with weights requested (eval mode, no grad)."""
    was_training = module.training
    module.eval()  # BN statistics and attention dropout untouched by the second evaluation
    try:
        with torch.no_grad():
            if isinstance(module, NonLocalNd):
                _, attn = type(module).forward(module, args[0], return_attention=True)
            else:
                kwargs = {**kwargs, "return_weights": True}
                _, attn = type(module).forward(module, *args, **kwargs)
    finally:
        module.train(was_training)
    return attn


@contextlib.contextmanager
def record_attention(
    model: nn.Module,
    blocks: str | Sequence[str] | None = None,
    *,
    to_cpu: bool = False,
    keep_history: bool = False,
    kind: str = "auto",
) -> Iterator[AttentionRecorder]:
    """Record the attention weights of non-local blocks (or attention layers) while open.

    The model's outputs are unchanged bit for bit: each watched module runs its normal forward,
    and a forward hook then evaluates the module's weights-returning path on the same input
    (no gradient; the module is put in eval mode for that second evaluation so that
    training-mode BatchNorm statistics are not updated twice and no dropout is drawn).

    Args:
        model: any module containing :class:`~nlnet.layers.nonlocal_block.NonLocalNd` blocks
            or transformer attention layers (or such a module itself).
        blocks: None (all), one qualified name, or a list of names (see
            :func:`find_non_local_blocks` / :func:`find_attention_layers`).
        to_cpu: move the weights to the CPU as they are recorded.
        keep_history: also append the weights of every pass to ``recorder.history``.
        kind: ``"non_local"`` (blocks), ``"transformer"`` (``MultiheadSelfAttention``:
            ``(B, heads, n, m)``; ``WindowAttention``: ``(B, windows, heads, N, N)``) or
            ``"auto"`` (the blocks if there are any, else the attention layers).

    Yields:
        An :class:`AttentionRecorder`; ``recorder.maps[name]`` holds the detached weights, a
        non-local block's ``(B, N, N')``; ``recorder.feature_sizes[name]`` the module's input
        grid (``(n,)`` tokens for ``MultiheadSelfAttention``).

    Raises:
        ValueError: nothing to watch, or an unknown name.
    """
    found = _watched(model, kind)
    if blocks is None:
        chosen = found
    else:
        names = [blocks] if isinstance(blocks, str) else list(blocks)
        unknown = [n for n in names if n not in found]
        if unknown:
            what = "non-local block" if _is_non_local(found) else "attention layer"
            raise ValueError(f"blocks: unknown {what}(s) {unknown}; have {list(found)}")
        chosen = {n: found[n] for n in names}
    rec = AttentionRecorder(chosen)
    handles = []

    def make_hook(name: str):
        def hook(module: nn.Module, args: tuple, kwargs: dict, output: Tensor) -> None:
            attn = attention_of(module, args, kwargs)
            if to_cpu:
                attn = attn.cpu()
            x = args[0]
            rec.maps[name] = attn
            if isinstance(module, NonLocalNd):
                rec.feature_sizes[name] = tuple(int(s) for s in x.shape[2:])
            elif isinstance(module, WindowAttention):
                rec.feature_sizes[name] = tuple(int(s) for s in x.shape[1:-1])
            else:
                rec.feature_sizes[name] = (int(x.shape[-2]),)
            if keep_history:
                rec.history[name].append(attn)

        return hook

    try:
        for name, module in chosen.items():
            handles.append(module.register_forward_hook(make_hook(name), with_kwargs=True))
        yield rec
    finally:
        for h in handles:
            h.remove()
