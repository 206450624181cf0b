"""Batches of the video datasets: :func:`collate_skip_bad`, and :class:`BadVideoWarning`.

An item is a dict ``{"clip", "target", "index", "clip_index"}`` (``clip_index``: the view number
within the video); a video that cannot be used yields ``None`` and :func:`collate_skip_bad` drops
it, counting it in the batch's ``skipped``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["BadVideoWarning", "collate_eval", "collate_skip_bad"]


class BadVideoWarning(UserWarning):
    """A video was skipped: corrupt, unreadable or too short."""


def collate_skip_bad(
    batch: Sequence[dict[str, Any] | None], ragged: bool = False
) -> dict[str, Any]:
    """Collates dataset items, dropping the ``None`` items of bad videos.

    Args:
        batch: items ``{"clip", "target", "index"[, "clip_index"]}`` or ``None``.
        ragged: clips of different shapes (full-frame testing of videos of several sizes)
            give ``"clip"`` as a list of ``(C, T, H, W)`` tensors instead of an error; what
            testing uses (:func:`collate_eval`).

    Returns:
        A dict with

        * ``"clip"``: float ``(B, C, T, H, W)``, or None when every item was bad (``B = 0``);
        * ``"target"``: long ``(B,)`` (single-label) or float ``(B, num_classes)`` (multi-label),
          or None when ``B = 0``;
        * ``"index"``: long ``(B,)`` video indices;
        * ``"clip_index"``: long ``(B,)`` view numbers within each video (0 in training);
        * ``"skipped"``: int, the number of ``None`` items dropped from this batch.

    Raises:
        ValueError: the clips have different shapes (full-frame testing of videos with different
            aspect ratios: use a batch size of 1 or set ``test_crop``).
    """
    good = [b for b in batch if b is not None]
    skipped = len(batch) - len(good)
    if not good:
        empty = torch.zeros(0, dtype=torch.long)
        return {"clip": None, "target": None, "index": empty, "clip_index": empty.clone(),
                "skipped": skipped}  # fmt: skip
    shapes = {tuple(b["clip"].shape) for b in good}
    if len(shapes) > 1 and not ragged:
        raise ValueError(
            f"clips in a batch have different shapes {sorted(shapes)}; for full-frame "
            "(fully-convolutional) testing of videos with different sizes use batch_size=1, "
            "or set test_crop to crop a fixed size"
        )
    if len(shapes) > 1:
        clips: Any = [b["clip"] for b in good]  # ragged: B tensors (C, T, H, W)
    else:
        clips = torch.stack([b["clip"] for b in good])  # (B, C, T, H, W)
    targets = [b["target"] for b in good]
    if isinstance(targets[0], torch.Tensor):
        target = torch.stack([torch.as_tensor(t) for t in targets]).float()  # (B, num_classes)
    else:
        target = torch.as_tensor([int(t) for t in targets], dtype=torch.long)  # (B,)
    index = torch.as_tensor([int(b["index"]) for b in good], dtype=torch.long)
    clip_index = torch.as_tensor([int(b.get("clip_index", 0)) for b in good], dtype=torch.long)
    return {
        "clip": clips,
        "target": target,
        "index": index,
        "clip_index": clip_index,
        "skipped": skipped,
    }


def collate_eval(batch: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """:func:`collate_skip_bad` for testing: clips of different sizes in one batch are kept as a
    list (the evaluation runs each shape as its own batch) instead of an error."""
    return collate_skip_bad(batch, ragged=True)
