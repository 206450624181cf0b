"""Image-classification items: an unreadable file is skipped, counted and named once."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from PIL import Image


def test_an_unreadable_image_is_named_once_and_skipped(tmp_path):
    from nlnet.data.images.dataset import ImageItems
    from nlnet.data.video.batches import collate_skip_bad

    good, bad = tmp_path / "good.png", tmp_path / "bad.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(good)
    bad.write_bytes(b"not a png")
    items = ImageItems([good, bad], [0, 1], ["a", "b"], transform=lambda im: torch.zeros(3, 8, 8))
    with pytest.warns(UserWarning, match=f"skipping image '{bad}'"):
        batch = collate_skip_bad([items[0], items[1]])
    assert batch["skipped"] == 1 and batch["index"].tolist() == [0] and 1 in items.bad
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # named already: silent the next time
        assert items[1] is None
