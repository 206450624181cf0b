"""COCO's uncompressed run-length encoding of a binary mask, written without pycocotools.

A COCO ``segmentation`` may be an uncompressed RLE: ``{"counts": [r0, r1, ...], "size": [h, w]}``
where the runs alternate zeros and ones over the mask read column by column (Fortran order),
starting with the run of zeros (``0`` when the first pixel is set). pycocotools reads it
(``mask.frPyObjects``, ``COCO.annToMask``), so a dataset can be written with numpy alone and still
be evaluated by ``COCOeval``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["mask_to_rle", "rle_to_mask", "mask_bbox"]


def _binary(mask: Any) -> np.ndarray:
    m = np.asarray(mask)
    if m.ndim != 2:
        raise ValueError(f"mask: expected a 2-D array (H, W), got shape {tuple(m.shape)}")
    return m != 0


def mask_to_rle(mask: Any) -> dict[str, list[int]]:
    """Uncompressed COCO RLE of a binary mask (non-zero pixels are set).

    Args:
        mask: array ``(H, W)``.

    Returns:
        ``{"counts": [...], "size": [H, W]}``: run lengths in column-major order, zeros first.
    """
    m = _binary(mask)
    h, w = m.shape
    flat = m.ravel(order="F")
    if flat.size == 0:
        return {"counts": [], "size": [h, w]}
    edges = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    runs = np.diff(np.concatenate([[0], edges, [flat.size]])).tolist()
    if flat[0]:
        runs.insert(0, 0)
    return {"counts": [int(r) for r in runs], "size": [int(h), int(w)]}


def rle_to_mask(rle: dict[str, Any]) -> np.ndarray:
    """The uint8 mask ``(H, W)`` of an uncompressed COCO RLE (inverse of :func:`mask_to_rle`)."""
    h, w = (int(v) for v in rle["size"])
    counts = np.asarray(rle["counts"], dtype=np.int64)
    if not isinstance(rle["counts"], list) or counts.sum() != h * w or (counts < 0).any():
        raise ValueError(
            f"rle: expected uncompressed counts (a list of non-negative runs summing to {h}*{w})"
        )
    values = np.arange(len(counts)) % 2
    flat = np.repeat(values, counts).astype(np.uint8)
    return flat.reshape((h, w), order="F")


def mask_bbox(mask: Any) -> list[float]:
    """COCO box ``[x, y, width, height]`` of the set pixels (all zeros for an empty mask)."""
    m = _binary(mask)
    ys, xs = np.nonzero(m)
    if xs.size == 0:
        return [0.0, 0.0, 0.0, 0.0]
    x0, y0 = int(xs.min()), int(ys.min())
    return [float(x0), float(y0), float(xs.max() - x0 + 1), float(ys.max() - y0 + 1)]
