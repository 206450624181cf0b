"""Pictures for dense models: predictions drawn on images, and a block's attention from a pixel.

* :func:`overlay_segmentation` colours a class map over an image;
* :func:`draw_detections` draws boxes, labels and instance masks with torchvision's
  ``draw_bounding_boxes`` / ``draw_segmentation_masks``;
* :func:`pixel_attention` records the non-local block's weights ("Non-local Neural Networks", arXiv:1711.07971,
  Eq. 1 / Sec. 3.2: the softmax over positions ``j`` for one query ``i``) for the query cell that
  contains a chosen input pixel, as a map over the image (:func:`nlnet.analysis.attention_record.
  record_attention` and its :class:`~nlnet.analysis.attention_record.GridMapping`);
* :func:`save_segmentation_figure` puts image, ground truth, predictions of several models and
  the attention map of a chosen pixel in one PNG.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from nlnet.analysis.attention_record import record_attention
from nlnet.analysis.visualize import fit_titles

__all__ = [
    "PALETTE",
    "draw_detections",
    "overlay_segmentation",
    "pixel_attention",
    "save_segmentation_figure",
]

#: Class colours (RGB, uint8); class 0 (background) is transparent in overlays.
PALETTE = np.array(
    [
        [0, 0, 0],
        [255, 215, 0],
        [40, 220, 60],
        [230, 40, 40],
        [50, 110, 255],
        [255, 60, 255],
        [40, 230, 230],
        [255, 140, 0],
    ],
    dtype=np.uint8,
)


def overlay_segmentation(image: np.ndarray, classes: np.ndarray, alpha: float = 0.6) -> np.ndarray:
    """Blend class colours over ``image`` (``(H, W, 3)`` uint8); class 0 stays unchanged."""
    if image.shape[:2] != classes.shape:
        raise ValueError(f"classes: shape {classes.shape} differs from the image {image.shape[:2]}")
    colours = PALETTE[np.asarray(classes) % len(PALETTE)].astype(np.float32)
    out = image.astype(np.float32)
    fg = (np.asarray(classes) > 0)[..., None]
    out = np.where(fg, (1 - alpha) * out + alpha * colours, out)
    return out.clip(0, 255).astype(np.uint8)


def draw_detections(
    image: np.ndarray,
    output: Mapping[str, torch.Tensor],
    class_names: Sequence[str] | None = None,
    *,
    score_threshold: float = 0.5,
    mask_threshold: float = 0.5,
) -> np.ndarray:
    """Boxes, ``name score`` labels and masks of one detector output drawn on ``image``.

    Args:
        image: ``(H, W, 3)`` uint8.
        output: torchvision detector output (``boxes``, ``labels``, ``scores``, optional
            ``masks`` ``(N, 1, H, W)`` probabilities).
        class_names: names of labels ``1..K`` (label ``k`` -> ``class_names[k - 1]``).
        score_threshold: detections below it are not drawn.
        mask_threshold: binarisation threshold of the masks.

    Returns:
        ``(H, W, 3)`` uint8.
    """
    from torchvision.utils import draw_bounding_boxes, draw_segmentation_masks

    keep = output["scores"].detach().cpu() >= score_threshold
    labels = output["labels"].detach().cpu()[keep].tolist()
    scores = output["scores"].detach().cpu()[keep].tolist()
    colours = [tuple(int(c) for c in PALETTE[lab % len(PALETTE)]) for lab in labels]
    img = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)
    if "masks" in output and keep.any():
        masks = output["masks"].detach().cpu()[keep][:, 0] > mask_threshold
        img = draw_segmentation_masks(img, masks, alpha=0.5, colors=colours)
    names = [
        f"{class_names[lab - 1] if class_names else lab} {s:.2f}" for lab, s in zip(labels, scores)
    ]
    if labels:
        img = draw_bounding_boxes(img, output["boxes"].detach().cpu()[keep], names, colours)
    return img.permute(1, 2, 0).numpy()


@torch.no_grad()
def pixel_attention(
    model: nn.Module,
    image: torch.Tensor,
    pixel: Sequence[int],
    block: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The attention of the query cell containing ``pixel`` over the image.

    Args:
        model: a model with a 2D non-local block.
        image: ``(3, H, W)`` (normalised as the model expects).
        pixel: ``(row, column)`` in the image.
        block: the block's qualified name (default: the first block).

    Returns:
        ``(weights, upsampled)``: the weights on the block's key grid ``(H', W')`` (they sum to
        1) and the same weights spread over the image ``(H, W)`` (nearest, each key cell's
        weight on the pixels it covers).
    """
    was_training = model.training
    model.eval()
    try:
        with record_attention(model, blocks=block, to_cpu=True) as rec:
            model(image[None])
    finally:
        model.train(was_training)
    name = block or rec.names[0]
    mapping = rec.mapping(name, tuple(image.shape[-2:]))
    q = mapping.query_index(tuple(pixel))
    weights = mapping.key_map(rec.maps[name][0, q])  # (H', W')
    # each key cell covers kernel * stride input pixels (floor pooling: the rest gets the edge)
    cover = [int(round(k * s)) for k, s in zip(mapping.kernel, mapping.stride)]
    up = weights.repeat_interleave(cover[0], 0).repeat_interleave(cover[1], 1)
    up = F.pad(
        up[None, None],
        (0, max(image.shape[-1] - up.shape[1], 0), 0, max(image.shape[-2] - up.shape[0], 0)),
        mode="replicate",
    )[0, 0, : image.shape[-2], : image.shape[-1]]
    return weights.numpy(), up.numpy()


def save_segmentation_figure(
    path: str | os.PathLike,
    image: np.ndarray,
    truth: np.ndarray,
    predictions: Mapping[str, np.ndarray],
    attention: np.ndarray | None = None,
    pixel: Sequence[int] | None = None,
    class_names: Sequence[str] | None = None,
) -> Path:
    """One row: image, ground truth, each model's prediction, and optionally an attention map.

    Args:
        path: output PNG.
        image: ``(H, W, 3)`` uint8.
        truth: ``(H, W)`` class ids.
        predictions: title -> ``(H, W)`` predicted class ids.
        attention: ``(H, W)`` weights of one query pixel (from :func:`pixel_attention`).
        pixel: the query ``(row, column)``, marked with a cross.
        class_names: legend names of classes ``0..K-1``.
    """
    from nlnet.analysis.plotting import pyplot

    plt = pyplot()
    from matplotlib.patches import Patch

    panels = [("image", image), ("ground truth", overlay_segmentation(image, truth))]
    panels += [(t, overlay_segmentation(image, p)) for t, p in predictions.items()]
    n = len(panels) + (attention is not None)
    fig, axes = plt.subplots(1, n, figsize=(2.6 * n, 2.9))
    for ax, (title, im) in zip(axes, panels):
        ax.imshow(im, interpolation="nearest")
        ax.set_title(title, fontsize=9)
    if attention is not None:
        ax = axes[-1]
        ax.imshow(image, interpolation="nearest")
        ax.imshow(attention, cmap="inferno", alpha=0.6, interpolation="nearest")
        ax.set_title("attention from x", fontsize=9)
        if pixel is not None:
            for a in axes[1:]:
                a.plot([pixel[1]], [pixel[0]], "x", color="cyan", ms=9, mew=2)
    for ax in axes:
        ax.axis("off")
    if class_names:
        handles = [
            Patch(color=PALETTE[i % len(PALETTE)] / 255.0, label=name)
            for i, name in enumerate(class_names)
            if i > 0
        ]
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8)
    fig.tight_layout(rect=(0, 0.08 if class_names else 0, 1, 1))
    fit_titles(fig)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
