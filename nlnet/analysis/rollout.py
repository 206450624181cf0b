"""Attention rollout across layers and whole-image attention maps of the transformers.

Abnar & Zuidema, "Quantifying Attention Flow in Transformers" (ACL 2020), Sec. 3: the attention
of one layer says how tokens mix *at that layer*; to follow information from the input to the
top, the residual connection is added to each layer's (head-averaged) weights,
``A~ = 0.5 A + 0.5 I`` (rows renormalised), and the layers are multiplied,
``R = A~_L ... A~_2 A~_1``. Row ``i`` of ``R`` says how much each *input* token contributes to
token ``i`` at the top.

* ViT / the video transformer: the class token's row of ``R`` over the patch (tubelet) grid.
* The divided space-time video transformer: each block's temporal and spatial weights are first
  placed into dense token x token matrices over the whole clip
  (:func:`divided_weights_to_tokens`), then rolled out like the joint model's.
* Swin: window weights ``(B, windows, heads, N, N)`` are first placed into a dense token x token
  matrix (:func:`window_weights_to_tokens`, undoing the cyclic shift and padding), patch merging
  is a matrix giving each merged token 1/4 of each of its 2x2 children
  (:func:`patch_merging_matrix`), and the classifier's global average pool reads the mean of the
  rows of ``R``.

Weights come from :func:`nlnet.analysis.attention_record.record_attention` (``kind="transformer"``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from nlnet.analysis.attention_record import record_attention
from nlnet.analysis.visualize import fit_titles
from nlnet.functional.windows import cyclic_shift, pad_to_window, window_partition

__all__ = [
    "HEAD_FUSIONS",
    "attention_rollout",
    "cls_attention_map",
    "divided_rollout",
    "divided_weights_to_tokens",
    "patch_merging_matrix",
    "rollout_figure",
    "save_rollout_picture",
    "swin_rollout",
    "transformer_attention_figure",
    "vit_rollout",
    "window_weights_to_tokens",
]

HEAD_FUSIONS = ("mean", "max", "min")


def _fuse(weights: Tensor, head_fusion: str) -> Tensor:
    if weights.dim() == 3:
        return weights
    if head_fusion == "mean":
        return weights.mean(dim=1)
    if head_fusion == "max":
        return weights.amax(dim=1)
    return weights.amin(dim=1)


def attention_rollout(
    maps: Sequence[Tensor],
    *,
    head_fusion: str = "mean",
    residual: bool = True,
    transitions: Sequence[Tensor | None] | None = None,
) -> Tensor:
    """Roll attention out over layers (Abnar & Zuidema 2020, Sec. 3).

    Args:
        maps: per layer, bottom first, ``(B, heads, n_l, n_l)`` or head-fused ``(B, n_l, n_l)``.
        head_fusion: ``"mean"`` (the paper), ``"max"`` or ``"min"`` over heads.
        residual: add the identity for the skip connection (``0.5 A + 0.5 I``).
        transitions: optional per layer ``(n_l, n_{l-1})`` matrix applied *before* layer ``l``
            when the token set changes (Swin's patch merging); ``None`` entries = same tokens.

    Returns:
        ``R`` of shape ``(B, n_L, n_0)``; with ``residual`` every row sums to 1.
    """
    if not maps:
        raise ValueError("maps: expected at least one attention map")
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(f"head_fusion: expected one of {HEAD_FUSIONS}, got {head_fusion!r}")
    result = None
    for i, w in enumerate(maps):
        if w.dim() not in (3, 4) or w.shape[-1] != w.shape[-2]:
            raise ValueError(
                f"maps[{i}]: expected (B, heads, n, n) or (B, n, n), got {tuple(w.shape)}"
            )
        a = _fuse(w, head_fusion)  # (B, n, n)
        if residual:
            eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
            a = 0.5 * a + 0.5 * eye
            a = a / a.sum(dim=-1, keepdim=True)
        move = transitions[i] if transitions is not None else None
        if result is not None and move is not None:
            result = move.to(result.dtype) @ result  # (n_l, n_{l-1}) @ (B, n_{l-1}, n_0)
        result = a if result is None else a @ result
    return result


def cls_attention_map(
    rollout: Tensor, grid_size: Sequence[int], num_prefix_tokens: int = 1
) -> Tensor:
    """The class token's row of a rollout, over the patch grid: ``(B, *grid_size)``, max 1."""
    n = 1
    for g in grid_size:
        n *= int(g)
    if rollout.shape[-1] != num_prefix_tokens + n:
        raise ValueError(
            f"grid_size: {tuple(grid_size)} plus {num_prefix_tokens} prefix tokens does not match "
            f"{rollout.shape[-1]} tokens"
        )
    row = rollout[:, 0, num_prefix_tokens:]  # (B, n)
    row = row / row.amax(dim=-1, keepdim=True).clamp_min(1e-12)
    return row.reshape(rollout.shape[0], *grid_size)


def vit_rollout(
    model: nn.Module, x: Tensor, grid_size: Sequence[int], *, head_fusion: str = "mean"
) -> tuple[Tensor, Tensor]:
    """Run ``model`` (ViT or the video transformer) on ``x`` and roll out its attention.

    Returns:
        ``(logits, heat)`` with ``heat`` the class token's rollout over ``grid_size``.
    """
    if getattr(model, "attention", "joint") == "divided":
        raise ValueError("model: divided space-time attention; use divided_rollout(model, x)")
    with record_attention(model, kind="transformer") as rec, torch.no_grad():
        logits = model(x)
    rollout = attention_rollout([rec.maps[n] for n in rec.names], head_fusion=head_fusion)
    return logits, cls_attention_map(rollout, grid_size)


def divided_weights_to_tokens(
    temporal: Tensor, spatial: Tensor, grid_size: Sequence[int]
) -> tuple[Tensor, Tensor]:
    """Place one divided block's weights into dense matrices over the clip's ``1 + T'S`` tokens.

    Args:
        temporal: ``(B * S, heads, T', T')``, the temporal attention of each spatial position.
        spatial: ``(B * T', heads, 1 + S, 1 + S)``, each frame's attention (class token first).
        grid_size: ``(T', H', W')`` with ``S = H'W'``.

    Returns:
        ``(A_time, A_space)``, each ``(B, heads, 1 + T'S, 1 + T'S)`` (class token first, then
        row-major ``(t, y, x)``), so that the block's two token mixings are ``A_time`` then
        ``A_space``. The class token does not take part in the temporal attention (its row of
        ``A_time`` is the identity's) and averages its ``T'`` spatial rows.
    """
    t, s = int(grid_size[0]), int(grid_size[1]) * int(grid_size[2])
    h = temporal.shape[1]
    if temporal.shape[-2:] != (t, t) or temporal.shape[0] % s:
        raise ValueError(
            f"temporal: expected (B * {s}, heads, {t}, {t}), got {tuple(temporal.shape)}"
        )
    if spatial.shape[-2:] != (1 + s, 1 + s) or spatial.shape[0] % t or spatial.shape[1] != h:
        raise ValueError(
            f"spatial: expected (B * {t}, {h}, {1 + s}, {1 + s}), got {tuple(spatial.shape)}"
        )
    b, n = temporal.shape[0] // s, 1 + t * s
    tw = temporal.reshape(b, s, h, t, t).permute(0, 2, 3, 1, 4)  # (B, h, T'q, S, T'k)
    eye_s = torch.eye(s, dtype=temporal.dtype, device=temporal.device)
    a_time = temporal.new_zeros(b, h, n, n)
    a_time[:, :, 0, 0] = 1.0
    # token (t, s) -> (t', s') weighs tw[t, s, t'] when s' = s
    a_time[:, :, 1:, 1:] = torch.einsum("bhtsu,sv->bhtsuv", tw, eye_s).reshape(b, h, t * s, t * s)
    sw = spatial.reshape(b, t, h, 1 + s, 1 + s).transpose(1, 2)  # (B, h, T', 1 + S, 1 + S)
    eye_t = torch.eye(t, dtype=spatial.dtype, device=spatial.device)
    a_space = spatial.new_zeros(b, h, n, n)
    a_space[:, :, 0, 0] = sw[..., 0, 0].mean(-1)  # the class token averages its frames
    a_space[:, :, 0, 1:] = sw[..., 0, 1:].reshape(b, h, t * s) / t
    a_space[:, :, 1:, 0] = sw[..., 1:, 0].reshape(b, h, t * s)
    blocks = torch.einsum("bhtsr,tu->bhtsur", sw[..., 1:, 1:], eye_t)  # same frame only
    a_space[:, :, 1:, 1:] = blocks.reshape(b, h, t * s, t * s)
    return a_time, a_space


def divided_rollout(
    model: nn.Module, x: Tensor, *, head_fusion: str = "mean"
) -> tuple[Tensor, Tensor]:
    """Run a divided space-time :class:`~nlnet.models.video.transformer.VideoTransformer` on
    ``x`` and roll its attention out over every temporal and spatial attention.

    Returns:
        ``(logits, heat)`` with ``heat`` ``(B, T', H', W')``, the class token's rollout.
    """
    with record_attention(model, kind="transformer") as rec, torch.no_grad():
        logits = model(x)
    names = rec.names  # temporal, spatial, temporal, spatial, ... (module order)
    maps = []
    for name_t, name_s in zip(names[0::2], names[1::2]):
        maps += divided_weights_to_tokens(rec.maps[name_t], rec.maps[name_s], model.grid)
    rollout = attention_rollout(maps, head_fusion=head_fusion)
    return logits, cls_attention_map(rollout, model.grid)


def _window_token_index(layer: nn.Module, grid: tuple[int, ...]) -> tuple[Tensor, int]:
    """For each (window, position) the flat index into the padded grid; and its size."""
    window, shift = layer.effective_window(grid)
    size = 1
    for g in grid:
        size *= g
    idx = torch.arange(size, dtype=torch.float64).reshape(1, *grid, 1) + 1  # 0 = padding
    idx, _ = pad_to_window(idx, window)
    idx = window_partition(cyclic_shift(idx, shift), window)[..., 0]  # (nW, N)
    return idx.long() - 1, size


def window_weights_to_tokens(weights: Tensor, layer: nn.Module, grid_size: Sequence[int]) -> Tensor:
    """Place Swin window weights into a dense token x token matrix.

    Args:
        weights: ``(B, windows, heads, N, N)`` as recorded for ``layer`` (a ``WindowAttention``).
        layer: the window attention layer (its window, shift and small-grid policy).
        grid_size: the layer's input grid ``(H, W)`` (or ``(T, H, W)``).

    Returns:
        ``(B, heads, G, G)`` with ``G = prod(grid_size)`` row-major tokens; padding tokens are
        dropped (their share of a row is lost) and tokens never share a window are 0.
    """
    index, size = _window_token_index(layer, tuple(int(g) for g in grid_size))
    b, nw, h, n, _ = weights.shape
    if index.shape != (nw, n):
        raise ValueError(
            f"weights: {nw} windows of {n} tokens do not match the layer on grid {tuple(grid_size)}"
        )
    real = index >= 0  # (nW, N)
    q = index[:, :, None].expand(nw, n, n)
    k = index[:, None, :].expand(nw, n, n)
    keep = real[:, :, None] & real[:, None, :]
    flat = (q * size + k)[keep]  # positions in the (G * G) matrix
    dense = weights.new_zeros(b, h, size * size)
    vals = weights.permute(0, 2, 1, 3, 4)[:, :, keep]  # (B, h, kept)
    dense[:, :, flat] = vals
    return dense.reshape(b, h, size, size)


def patch_merging_matrix(grid_size: Sequence[int], dtype: torch.dtype = torch.float32) -> Tensor:
    """``(G', G)`` matrix giving each merged token 1/4 of each of its 2x2 children (Swin)."""
    h, w = (int(g) for g in grid_size)
    hh, ww = -(-h // 2), -(-w // 2)
    rows = torch.arange(h)[:, None] // 2 * ww + torch.arange(w)[None, :] // 2  # parent of each
    m = torch.zeros(hh * ww, h * w, dtype=dtype)
    m[rows.flatten(), torch.arange(h * w)] = 0.25
    return m


def swin_rollout(
    model: nn.Module, x: Tensor, *, head_fusion: str = "mean"
) -> tuple[Tensor, Tensor]:
    """Run a :class:`~nlnet.models.swin.SwinTransformer` on ``x`` (one image batch) and roll
    its attention out over all blocks and patch mergings.

    Returns:
        ``(logits, heat)``; ``heat`` ``(B, H/P, W/P)`` is the mean row of the rollout (the
        global average pool reads all tokens equally), scaled to a maximum of 1.
    """
    with record_attention(model, kind="transformer") as rec, torch.no_grad():
        logits = model(x)
    maps, moves, prev = [], [], None
    for name in rec.names:
        grid = rec.feature_sizes[name]
        dense = window_weights_to_tokens(rec.maps[name], rec.blocks[name], grid)
        maps.append(dense)
        moves.append(patch_merging_matrix(prev) if prev is not None and prev != grid else None)
        prev = grid
    rollout = attention_rollout(maps, head_fusion=head_fusion, transitions=moves)
    heat = rollout.mean(dim=1)  # (B, G0)
    heat = heat / heat.amax(dim=-1, keepdim=True).clamp_min(1e-12)
    first = rec.feature_sizes[rec.names[0]]
    return logits, heat.reshape(x.shape[0], *first)


def rollout_figure(image, heat: Tensor, title: str = "attention rollout"):
    """A matplotlib figure: the image, and the rollout heat map over it.

    Args:
        image: ``(H, W, 3)`` array (uint8 or floats in [0, 1]) or ``(3, H, W)`` tensor.
        heat: ``(h, w)`` map (upsampled to the image by nearest patches).
        title: title of the overlay panel.
    """
    from nlnet.analysis.plotting import pyplot

    plt = pyplot()
    import numpy as np

    img = image.detach().cpu().permute(1, 2, 0).numpy() if isinstance(image, Tensor) else image
    img = np.asarray(img)
    if img.dtype != np.uint8:
        img = (img - img.min()) / max(float(img.max() - img.min()), 1e-12)
    h, w = img.shape[:2]
    fig, axes = plt.subplots(1, 2, figsize=(6.4, 3.4))
    axes[0].imshow(img)
    axes[0].set_title("input")
    axes[1].imshow(img)
    overlay = axes[1].imshow(
        heat.detach().cpu().numpy(), cmap="jet", alpha=0.5, extent=(-0.5, w - 0.5, h - 0.5, -0.5)
    )
    fig.colorbar(overlay, ax=axes[1], fraction=0.046, pad=0.04, label="attention (relative)")
    axes[1].set_title(title)
    for ax in axes:
        ax.axis("off")
    fig.tight_layout()
    return fit_titles(fig)


def transformer_attention_figure(model: nn.Module, x: Tensor, frames, title: str = ""):
    """Attention rollout of a ViT, Swin or video transformer on one input, drawn over it.

    Args:
        model: a :class:`~nlnet.models.vit.VisionTransformer`,
            :class:`~nlnet.models.swin.SwinTransformer` or
            :class:`~nlnet.models.video.transformer.VideoTransformer` (eval mode).
        x: its input, ``(1, 3, H, W)`` or ``(1, 3, T, H, W)``.
        frames: the picture(s) to draw on, ``(T, H, W, 3)`` uint8 (``T = 1`` for an image).
        title: figure title (e.g. the prediction).

    Returns:
        ``(logits, figure)``; a video gets one panel per token frame.
    """
    import numpy as np

    from nlnet.models.swin import SwinTransformer
    from nlnet.models.video.transformer import VideoTransformer
    from nlnet.models.vit import VisionTransformer

    frames = np.asarray(frames)
    if isinstance(model, SwinTransformer):
        logits, heat = swin_rollout(model, x)
    elif isinstance(model, VisionTransformer):
        logits, heat = vit_rollout(model, x, model.grid_size)
    elif isinstance(model, VideoTransformer):
        if model.attention == "divided":
            logits, heat = divided_rollout(model, x)
        else:
            logits, heat = vit_rollout(model, x, model.grid)
        return logits, _video_rollout_figure(frames, heat[0], title)
    else:
        raise ValueError(
            f"model: expected a ViT, Swin or video transformer, got {type(model).__name__}"
        )
    fig = rollout_figure(frames[0], heat[0], title or "attention rollout")
    return logits, fig


def _video_rollout_figure(frames, heat: Tensor, title: str):
    from nlnet.analysis.plotting import pyplot

    plt = pyplot()

    t_tokens = heat.shape[0]
    step = max(len(frames) // t_tokens, 1)
    h, w = frames.shape[1:3]
    fig, axes = plt.subplots(1, t_tokens, figsize=(2.4 * t_tokens, 2.8), squeeze=False)
    for t in range(t_tokens):
        ax = axes[0, t]
        ax.imshow(frames[min(t * step, len(frames) - 1)])
        overlay = ax.imshow(heat[t].cpu().numpy(), cmap="jet", alpha=0.5, vmin=0, vmax=1,
                            extent=(-0.5, w - 0.5, h - 0.5, -0.5))  # fmt: skip
        ax.set_title(f"frame {t * step}")
        ax.axis("off")
    fig.colorbar(overlay, ax=list(axes[0]), fraction=0.02, pad=0.02, label="attention (relative)")
    fig.suptitle(title or "attention rollout (class token)")
    fig.tight_layout()
    return fit_titles(fig)


def save_rollout_picture(
    model: nn.Module, x: Tensor, frames, class_names: Sequence[str], path, title: str = ""
) -> str:
    """:func:`transformer_attention_figure` titled with the prediction, saved to ``path`` (its
    folder made); returns the predicted class name (its index when unnamed)."""
    from pathlib import Path

    from nlnet.analysis.plotting import pyplot

    logits, fig = transformer_attention_figure(model, x, frames, title=title)
    pred = int(logits.argmax(1)[0])
    label = class_names[pred] if pred < len(class_names) else str(pred)
    fig.suptitle(f"{title}  prediction: {label}")
    fit_titles(fig)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    pyplot().close(fig)
    return label
