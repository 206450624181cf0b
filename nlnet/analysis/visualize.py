"""Draw what a non-local block attends to: Figure 1/3-style arrows and per-query heatmaps.

Figures 1 and 3 of "Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971) show, for one query position ``x_i`` of a trained
video model, arrows to the key positions ``x_j`` with the highest weights ``f(x_i, x_j) / C(x)``
(Eq. 1) across the frames of a clip ("only the highest weighted ones are shown"; Figure 3 draws
the 20 highest). This module draws both pictures for any model with non-local blocks, from the
weights recorded by :func:`nlnet.analysis.hooks.record_attention`:

* :func:`draw_arrows` / :func:`arrows_figure`: the clip's frames side by side, the query marked,
  arrows to its ``top_k`` strongest keys (line width and opacity proportional to the weight);
* :func:`heatmap_figure`: the query's weights over the pooled key grid, upsampled onto every frame.

Images (2D models) are drawn as a one-frame clip.

Command line: ``nlnet visualize --checkpoint CKPT --video FILE [--query t,y,x] [--output DIR]``
(see :data:`EXAMPLES`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from nlnet.analysis.hooks import GridMapping, record_attention

__all__ = [
    "arrows_figure",
    "configure_parser",
    "draw_arrows",
    "heatmap_figure",
    "main",
    "strongest_query",
    "top_keys",
    "EXAMPLES",
]

EXAMPLES = """examples:
  nlnet visualize --checkpoint runs/demo-*/c2d_tiny_nl1.pt --video clip.mp4
  nlnet visualize --checkpoint model.pt --video clip.mp4 --query 0,12,20 --output figs
  nlnet visualize --checkpoint image_model.pt --video photo.png --query 40,60
The query is "t,y,x" (frame, row, column of the model input) for video, "y,x" for an image;
without --query the position whose attention is most concentrated is used.
"""

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


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
    plt = _plt()
    T = _as_frames(frames).shape[0]
    fig, axes = plt.subplots(1, T, figsize=(panel_size * T, panel_size + 0.5), squeeze=False)
    draw_arrows(list(axes[0]), frames, weights, mapping, query, top_k=top_k)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.02, top=0.8 if title else 0.88, wspace=0.05)
    return fig


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
    """The query's weights over the key grid, upsampled onto every frame (one shared scale)."""
    plt = _plt()
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
    for t, ax in enumerate(axes[0]):
        ax.imshow(video[t].mean(-1), cmap="gray", interpolation="nearest")
        ax.imshow(heat[t], cmap=cmap, alpha=0.6, vmin=0.0, vmax=vmax, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        tk = m.key_cell(m.key_index((t, 0, 0)))[0]
        ax.set_title(f"t={t}  mass {mass[tk]:.2f}", fontsize=7)
        if t == int(round(tq)):
            ax.plot([xq], [yq], "o", ms=7, mfc="none", mec="#00e5ff", mew=2)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.02, top=0.8 if title else 0.88, wspace=0.05)
    return fig


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="a checkpoint written by nlnet")
    parser.add_argument("--video", required=True, help="a video file, or an image for 2D models")
    parser.add_argument(
        "--query",
        action="append",
        default=None,
        help="t,y,x (video) or y,x (image) in input pixels; repeatable (default: the strongest)",
    )
    parser.add_argument(
        "--output", default="visualize", help="output folder (default: %(default)s)"
    )
    parser.add_argument("--block", default=None, help="non-local block name (default: all)")
    parser.add_argument("--top-k", type=int, default=20, help="arrows per query (default: 20)")
    parser.add_argument("--frames", type=int, default=None, help="frames to sample (video)")
    parser.add_argument("--size", type=int, default=None, help="resize frames to this square size")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (default: cpu)")


def _parse_query(text: str, ndim: int) -> tuple[int, ...]:
    try:
        vals = tuple(int(v) for v in text.replace(" ", "").split(","))
    except ValueError as err:
        raise ValueError(f"--query: expected integers like 't,y,x', got {text!r}") from err
    if len(vals) != ndim:
        raise ValueError(f"--query: expected {ndim} numbers for this input, got {text!r}")
    return vals


def load_model_from_checkpoint(path: str | os.PathLike, device: str = "cpu"):
    """Build the registered model named in an nlnet checkpoint and load its weights.

    Returns:
        ``(model, ckpt)`` with the model in eval mode on ``device``.
    """
    from nlnet.engine.checkpoint import load_checkpoint
    from nlnet.models.registry import create_model

    ckpt = load_checkpoint(path)
    name = ckpt.get("model_name")
    if not name:
        raise ValueError(f"checkpoint: {str(path)!r} has no model_name (not written by nlnet)")
    cfg = ckpt.get("config") or {}
    overrides = dict((cfg.get("model") or {}).get("overrides") or {})
    extra = ckpt.get("extra") or {}
    overrides.update(extra.get("model_overrides") or {})
    model = create_model(name, num_classes=ckpt.get("num_classes"), **overrides)
    model.load_state_dict(ckpt["model"], strict=True)
    return model.to(device).eval(), ckpt


def _read_input(path: Path, frames: int | None, size: int | None) -> np.ndarray:
    """uint8 (T, H, W, 3) from a video, or (1, H, W, 3) from an image file."""
    if path.suffix.lower() in IMAGE_EXTENSIONS:
        from PIL import Image

        img = np.asarray(Image.open(path).convert("RGB"))
        out = img[None]
    else:
        from nlnet.data.video import open_video

        with open_video(path) as reader:
            n = reader.num_frames
            if frames is None or frames >= n:
                out = reader.read_all().numpy()
            else:
                idx = np.linspace(0, n - 1, frames).round().astype(int)
                out = reader.get_frames(idx.tolist()).numpy()
    if size is not None:
        x = torch.from_numpy(out).permute(0, 3, 1, 2).float()
        x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear")
        out = x.clamp(0, 255).round().byte().permute(0, 2, 3, 1).numpy()
    return out


def main(args: argparse.Namespace) -> int:
    plt = _plt()
    video_path = Path(args.video)
    if not video_path.is_file():
        raise SystemExit(f"nlnet visualize: --video: no such file {str(video_path)!r}")
    model, ckpt = load_model_from_checkpoint(args.checkpoint, args.device)
    extra = ckpt.get("extra") or {}
    data_cfg = (ckpt.get("config") or {}).get("data") or {}
    mean = extra.get("mean", data_cfg.get("mean", (0.45, 0.45, 0.45)))
    std = extra.get("std", data_cfg.get("std", (0.225, 0.225, 0.225)))
    frames_np = _read_input(video_path, args.frames or extra.get("num_frames"), args.size)
    x = torch.from_numpy(np.array(frames_np)).float().div(255.0)  # (T, H, W, 3)
    x = (x - torch.tensor(mean)) / torch.tensor(std)
    video_model = any(isinstance(m, torch.nn.Conv3d) for m in model.modules())
    if video_model:
        inp = x.permute(3, 0, 1, 2)[None]  # (1, 3, T, H, W); an image is a one-frame clip
    else:
        if frames_np.shape[0] != 1:
            raise ValueError(
                f"--video: {str(video_path)!r} has {frames_np.shape[0]} frames but the model is "
                "an image model; pass an image file or use --frames 1"
            )
        inp = x[0].permute(2, 0, 1)[None]  # (1, 3, H, W)
    inp = inp.to(args.device)
    with record_attention(model, args.block, to_cpu=True) as rec, torch.no_grad():
        logits = model(inp)
    out_dir = Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    names = ckpt.get("class_names")
    pred = int(logits.argmax(1)[0])
    label = names[pred] if names and pred < len(names) else str(pred)
    written = []
    for bname in rec.names:
        attn = rec.maps[bname][0]  # (N, N')
        mapping = rec.mapping(bname, inp.shape[2:])
        if args.query:
            queries = [
                mapping.query_index(_parse_query(q, len(mapping.input_size))) for q in args.query
            ]
        else:
            queries = [strongest_query(attn)]
        safe = bname.replace(".", "_")
        for q in queries:
            center = mapping.query_center(q)
            where = ",".join(str(int(round(c))) for c in center)
            title = f"{ckpt.get('model_name')}  {bname}  query ({where})  prediction: {label}"
            fig = arrows_figure(frames_np, attn[q], mapping, q, top_k=args.top_k, title=title)
            p = out_dir / f"{safe}_q{q}_arrows.png"
            fig.savefig(p, dpi=120)
            plt.close(fig)
            fig = heatmap_figure(frames_np, attn[q], mapping, q, title=title)
            p2 = out_dir / f"{safe}_q{q}_heatmap.png"
            fig.savefig(p2, dpi=120)
            plt.close(fig)
            written += [p, p2]
    print(f"prediction: {label}")
    for p in written:
        print(f"wrote {p}")
    return 0
