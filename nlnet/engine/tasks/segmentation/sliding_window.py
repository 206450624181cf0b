"""Sliding-window inference: logits of an image or volume larger than the training crop.

A segmentation network trained on crops (2D ``data.crop``, 3D ``data.patch``) is tested on the
whole image or volume by running it on overlapping windows of the crop's size and averaging the
logits where windows overlap (each output voxel is the mean of the windows that cover it). The
window positions are MONAI's (``monai.inferers.sliding_window_inference``, ``mode="constant"``):
along an axis of length ``n`` with window ``w``, the step is ``int(w * (1 - overlap))`` (at
least 1) and there are ``ceil((n - w) / step) + 1`` windows, the last one flush with the end; an
axis shorter than the window is padded with zeros at its end up to the window (and the logits
cropped back) -- MONAI splits that padding between both ends, so the two differ on such inputs.

Implemented with torch alone, not by importing MONAI: 2D segmentation (Cityscapes) needs it with
the core install, and MONAI is an optional extra here (``nlnet[medical]``). The test checks it
equals MONAI's function, where MONAI is installed, on inputs at least as large as the window.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

__all__ = ["sliding_window_inference", "window_starts"]


def window_starts(size: int, window: int, overlap: float) -> list[int]:
    """Start offsets of the windows along one axis (the module docstring's rule).

    Args:
        size: the axis length.
        window: the window length (an axis shorter than it gets one window at 0, padded).
        overlap: fraction of a window shared with the next one, in ``[0, 1)``.
    """
    if not 0 <= overlap < 1:
        raise ValueError(f"overlap: expected a fraction in [0, 1), got {overlap!r}")
    if size <= window:
        return [0]
    step = max(int(window * (1 - overlap)), 1)
    count = math.ceil((size - window) / step) + 1
    return [min(i * step, size - window) for i in range(count)]


@torch.no_grad()
def sliding_window_inference(
    inputs: torch.Tensor,
    window: Sequence[int],
    predictor: Callable[[torch.Tensor], torch.Tensor],
    overlap: float = 0.25,
    batch_size: int = 1,
) -> torch.Tensor:
    """Logits ``(B, K, *spatial)`` of ``inputs`` ``(B, C, *spatial)`` averaged over windows.

    Args:
        inputs: a batch of images ``(B, C, H, W)`` or volumes ``(B, C, D, H, W)``.
        window: the window size, one entry per spatial axis (the training crop or patch).
        predictor: ``f(windows) -> logits`` mapping ``(N, C, *window)`` to ``(N, K, *window)``
            (the network in eval mode).
        overlap: fraction of a window shared with its neighbour along each axis (MONAI's
            default 0.25; 0.5 is nnU-Net's step).
        batch_size: windows per call of ``predictor``.

    Returns:
        float logits of the input's spatial size, each the mean of the windows covering it.
    """
    spatial = tuple(inputs.shape[2:])
    window = tuple(int(w) for w in window)
    if len(window) != len(spatial):
        raise ValueError(f"window: expected {len(spatial)} sizes, got {window!r}")
    pad = [max(w - n, 0) for w, n in zip(window, spatial)]
    if any(pad):
        inputs = F.pad(inputs, [v for p in reversed(pad) for v in (0, p)])
    padded = tuple(inputs.shape[2:])
    starts = list(
        itertools.product(*(window_starts(n, w, overlap) for n, w in zip(padded, window)))
    )
    slices = [tuple(slice(s, s + w) for s, w in zip(start, window)) for start in starts]
    total: torch.Tensor | None = None
    count = torch.zeros((1, 1, *padded), dtype=torch.float32, device=inputs.device)
    for i in range(0, len(slices), batch_size):
        group = slices[i : i + batch_size]
        crops = torch.cat([inputs[(slice(None), slice(None), *s)] for s in group])
        logits = predictor(crops).float()
        if total is None:
            total = logits.new_zeros((inputs.shape[0], logits.shape[1], *padded))
        for j, s in enumerate(group):
            b = inputs.shape[0]
            total[(slice(None), slice(None), *s)] += logits[j * b : (j + 1) * b]
            count[(slice(None), slice(None), *s)] += 1
    assert total is not None
    out = total / count
    return out[(slice(None), slice(None), *(slice(0, n) for n in spatial))]
