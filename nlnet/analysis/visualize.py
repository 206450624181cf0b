"""Draw what a non-local block attends to: Figure 1/3-style arrows and per-query heatmaps.

Figures 1 and 3 of "Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971) show, for one query position ``x_i`` of a trained
video model, arrows to the key positions ``x_j`` with the highest weights ``f(x_i, x_j) / C(x)``
(Eq. 1) across the frames of a clip ("only the highest weighted ones are shown"; Figure 3 draws
the 20 highest). This module draws both pictures for any model with non-local blocks, from the
weights recorded by :func:`nlnet.analysis.attention_record.record_attention`:

* :func:`draw_arrows` / :func:`arrows_figure`: the clip's frames side by side, the query marked,
  arrows to its ``top_k`` strongest keys (line width and opacity proportional to the weight);
* :func:`heatmap_figure`: the query's weights over the pooled key grid, upsampled onto every frame.

Images (2D models) are drawn as a one-frame clip.

Command line: ``nlnet visualize --checkpoint CKPT --video FILE [--query t,y,x] [--output DIR]``
(:mod:`nlnet.commands.visualize`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from torch import Tensor

from nlnet.analysis.attention_record import GridMapping
from nlnet.analysis.plotting import pyplot

__all__ = [
    "arrows_figure",
    "draw_arrows",
    "fit_titles",
    "title_boxes",
    "heatmap_figure",
    "strongest_query",
    "top_keys",
]


def title_boxes(fig: Any) -> list[Any]:
    """Display-space bounding boxes of a figure's titles (its texts, e.g. the suptitle, and every
    axis title that is set), measured with the figure's renderer."""
    renderer = fig.canvas.get_renderer()
    texts = [t for t in fig.texts if t.get_visible() and t.get_text()]
    texts += [ax.title for ax in fig.axes if ax.get_visible() and ax.get_title()]
    return [t.get_window_extent(renderer) for t in texts]


def _overlapping(boxes: list[Any]) -> list[tuple[Any, Any]]:
    return [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if a.overlaps(b)]


def fit_titles(fig: Any, min_fontsize: float = 5.0) -> Any:
    """Lay a figure out so that no two titles overlap (checked with the renderer).

    The figure's own texts (the suptitle) are wrapped to the figure's width; while a title
    overlaps an axis title below it, the axes move down; axis titles that overlap each other
    side by side get a smaller font (down to ``min_fontsize``).  Returns the figure.
    """
    for text in fig.texts:
        text.set_wrap(True)
    for _ in range(12):
        fig.canvas.draw()
        pairs = _overlapping(title_boxes(fig))
        if not pairs:
            break
        sup = [t.get_window_extent(fig.canvas.get_renderer()) for t in fig.texts if t.get_text()]
        lowest = min((b.y0 for b in sup), default=None)
        tops = [ax.title.get_window_extent(fig.canvas.get_renderer()).y1 for ax in fig.axes
                if ax.get_title()]  # fmt: skip
        if lowest is not None and tops and max(tops) > lowest:  # the axes go down
            shift = (max(tops) - lowest + 4.0) / fig.get_window_extent().height
            top = max(ax.get_position().y1 for ax in fig.axes)
            fig.subplots_adjust(top=max(top - shift, 0.3))
            continue
        for ax in fig.axes:  # side by side: smaller fonts
            ax.title.set_fontsize(max(ax.title.get_fontsize() - 1, min_fontsize))
    return fig


def _as_frames(frames: Tensor | np.ndarray) -> np.ndarray:
    """(T, H, W, 3) / (H, W, 3) / (T, H, W) array or tensor -> float (T, H, W, 3) in [0, 1]."""
    if isinstance(frames, Tensor):
        frames = frames.detach().cpu().numpy()
    a = np.asarray(frames)
    if a.ndim == 2 or (a.ndim == 3 and a.shape[-1] in (1, 3) and a.shape[-1] != a.shape[-2]):
        a = a[None]  # a single image
    if a.ndim == 3:
        a = a[..., None]
    if a.ndim != 4 or a.shape[-1] not in (1, 3):
        raise ValueError(f"frames: expected (T, H, W, 3) or (H, W, 3), got shape {a.shape}")
    if a.shape[-1] == 1:
        a = np.repeat(a, 3, axis=-1)
    a = a.astype(np.float32)
    if a.max(initial=0.0) > 1.0:
        a = a / 255.0
    return np.clip(a, 0.0, 1.0)


def _video_mapping(mapping: GridMapping) -> GridMapping:
    """Promote an image/sequence mapping to the (T, H, W) layout (one frame)."""
    n = len(mapping.feature_size)
    if n == 3:
        return mapping
    if n == 2:
        return GridMapping(
            (1, *mapping.feature_size),
            (1, *mapping.key_size),
            (1, *mapping.kernel),
            (1, *mapping.input_size),
        )
    raise ValueError(f"mapping: expected a 2D or 3D grid, got {mapping.feature_size}")


def top_keys(weights: Tensor, k: int = 20) -> tuple[Tensor, Tensor]:
    """The ``k`` largest weights of one query row ``(N',)`` and their key indices (descending)."""
    if weights.dim() != 1:
        raise ValueError(f"weights: expected one query row (N',), got shape {tuple(weights.shape)}")
    if k < 1:
        raise ValueError(f"k: expected a positive number of keys, got {k}")
    k = min(int(k), weights.numel())
    values, idx = weights.float().topk(k)
    return values, idx


def strongest_query(attn: Tensor) -> int:
    """The query index whose weights are most concentrated (largest maximum weight), ``(N, N')``."""
    if attn.dim() != 2:
        raise ValueError(f"attn: expected (N, N') for one sample, got shape {tuple(attn.shape)}")
    return int(attn.max(dim=1).values.argmax())


def draw_arrows(
    axes: Sequence[Any],
    frames: Tensor | np.ndarray,
    weights: Tensor,
    mapping: GridMapping,
    query: int,
    *,
    top_k: int = 20,
    color: str = "#ffcc00",
    query_color: str = "#ff2a2a",
) -> list[tuple[tuple[float, ...], float]]:
    """Draw the frames on ``axes`` (one per frame) and arrows from a query to its top keys.

    Args:
        axes: one matplotlib axis per frame.
        frames: the clip, (T, H, W, 3) (uint8 or float in [0, 1]); an image is one frame.
        weights: the query's row of the attention matrix, ``(N',)``.
        mapping: the block's :class:`GridMapping` (2D mappings are drawn as one frame).
        query: the flattened query index.
        top_k: number of strongest keys to draw (20 in Figure 3).
        color: arrow colour.
        query_color: colour of the query marker.

    Returns:
        The drawn keys as ``((t, y, x), weight)`` in decreasing weight.
    """
    from matplotlib.patches import ConnectionPatch

    video = _as_frames(frames)
    m = _video_mapping(mapping)
    if len(axes) != video.shape[0]:
        raise ValueError(f"axes: expected one axis per frame ({video.shape[0]}), got {len(axes)}")
    if video.shape[0] != m.input_size[0] or video.shape[1:3] != m.input_size[1:]:
        raise ValueError(
            f"frames: shape {video.shape[:3]} does not match the mapping's input {m.input_size}"
        )
    for t, ax in enumerate(axes):
        ax.imshow(video[t], interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"t={t}", fontsize=8)
    values, idx = top_keys(weights, top_k)
    tq, yq, xq = m.query_center(query)
    fq = int(round(tq))
    vmax = float(values[0]) if len(values) else 1.0
    drawn = []
    for v, j in zip(values.tolist(), idx.tolist()):
        tk, yk, xk = m.key_center(j)
        fk = int(round(tk))
        a = 0.25 + 0.75 * (v / vmax if vmax > 0 else 0.0)
        arrow = ConnectionPatch(
            xyA=(xq, yq), coordsA="data", axesA=axes[fq],
            xyB=(xk, yk), coordsB="data", axesB=axes[fk],
            arrowstyle="->", color=color, alpha=a, linewidth=0.6 + 1.8 * a,
        )  # fmt: skip
        axes[fk].add_artist(arrow)
        axes[fk].plot([xk], [yk], "o", ms=3, color=color, alpha=a)
        drawn.append(((tk, yk, xk), v))
    axes[fq].plot([xq], [yq], "o", ms=7, mfc="none", mec=query_color, mew=2)
    return drawn


def arrows_figure(
    frames: Tensor | np.ndarray,
    weights: Tensor,
    mapping: GridMapping,
    query: int,
    *,
    top_k: int = 20,
    title: str | None = None,
    panel_size: float = 1.6,
):
    """A one-row Figure 1/3-style picture; returns the matplotlib figure."""
    plt = pyplot()
    T = _as_frames(frames).shape[0]
    fig, axes = plt.subplots(1, T, figsize=(panel_size * T, panel_size + 0.5), squeeze=False)
    draw_arrows(list(axes[0]), frames, weights, mapping, query, top_k=top_k)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.02, top=0.8 if title else 0.88, wspace=0.05)
    return fit_titles(fig)


def heatmap_figure(
    frames: Tensor | np.ndarray,
    weights: Tensor,
    mapping: GridMapping,
    query: int,
    *,
    title: str | None = None,
    panel_size: float = 1.6,
    cmap: str = "inferno",
):
    """The query's weights over the key grid, upsampled onto every frame (one shared scale).

    Each key time step's total weight ("mass") is written once, above the first frame it
    covers (``t=a-b`` when a pooled key step spans frames ``a..b``), so that the masses in the
    titles add up to the row's total (1 for a softmax, Eq. 2).
    """
    plt = pyplot()
    video = _as_frames(frames)
    m = _video_mapping(mapping)
    T, H, W = video.shape[:3]
    grid = m.key_map(weights.detach().float().cpu()).reshape(m.key_size).numpy()  # (T', H', W')
    heat = np.zeros((T, H, W), dtype=np.float32)
    for j in range(m.num_keys):
        (t0, t1), (y0, y1), (x0, x1) = m.key_box(j)
        tk, hk, wk = m.key_cell(j)
        heat[
            int(round(t0)) : max(int(round(t1)), int(round(t0)) + 1),
            int(round(y0)) : int(round(y1)),
            int(round(x0)) : int(round(x1)),
        ] = grid[tk, hk, wk]
    vmax = float(heat.max()) or 1.0
    mass = grid.reshape(grid.shape[0], -1).sum(axis=1)  # total weight per key time step
    fig, axes = plt.subplots(1, T, figsize=(panel_size * T, panel_size + 0.5), squeeze=False)
    tq, yq, xq = m.query_center(query)
    cells = [m.key_cell(m.key_index((t, 0, 0)))[0] for t in range(T)]
    for t, ax in enumerate(axes[0]):
        ax.imshow(video[t].mean(-1), cmap="gray", interpolation="nearest")
        ax.imshow(heat[t], cmap=cmap, alpha=0.6, vmin=0.0, vmax=vmax, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        tk = cells[t]
        if t == 0 or cells[t - 1] != tk:  # a key time step's mass once, on its first frame
            last = max(i for i, c in enumerate(cells) if c == tk)
            span = f"t={t}" if last == t else f"t={t}-{last}"
            ax.set_title(f"{span}  mass {mass[tk]:.2f}", fontsize=7)
        else:
            ax.set_title(f"t={t}", fontsize=7)
        if t == int(round(tq)):
            ax.plot([xq], [yq], "o", ms=7, mfc="none", mec="#00e5ff", mew=2)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.02, top=0.8 if title else 0.88, wspace=0.05)
    return fit_titles(fig)
