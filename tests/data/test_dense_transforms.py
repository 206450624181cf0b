"""2D segmentation training augmentation: random scale, crop (padded with ignore) and flip, image
and mask transformed together (nearest for the mask)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nlnet.data.segmentation.transforms import (
    SegmentationAugment,
    random_crop_pad,
    random_hflip,
    random_scale,
)


def _pair(h: int = 12, w: int = 16, block: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """A mask of ``block``-sized constant squares (labels 0..3) and an image whose channel 0 is
    the label, channel 1 the column index (to see flips), channel 2 the row index."""
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    mask = ((rows // block) + (cols // block)) % 4
    image = torch.stack([mask.float(), cols.float(), rows.float()])
    return image, mask


def _interior(m: torch.Tensor) -> torch.Tensor:
    """Labelled pixels whose 5x5 neighbourhood holds their label only."""
    x = m.float()[None, None]
    hi, lo = F.max_pool2d(x, 5, 1, 2), -F.max_pool2d(-x, 5, 1, 2)
    return ((hi == lo)[0, 0]) & (m != 255)


def test_scale_resizes_image_bilinear_and_mask_nearest():
    image, mask = _pair()
    g = torch.Generator().manual_seed(0)
    big_i, big_m = random_scale(image, mask, (2.0, 2.0), g)
    assert big_i.shape == (3, 24, 32) and big_m.shape == (24, 32) and big_m.dtype == torch.int64
    # factor 2 nearest neighbour = each label repeated twice along both axes, never blended
    assert torch.equal(big_m, mask.repeat_interleave(2, 0).repeat_interleave(2, 1))
    small_i, small_m = random_scale(image, mask, (0.5, 0.5), g)
    assert small_m.shape == (6, 8) and set(small_m.unique().tolist()) <= {0, 1, 2, 3}
    # the bilinear image agrees with the nearest mask inside each constant square
    assert (small_i[0].round() == small_m.float()).float().mean() > 0.9
    for _ in range(20):  # factors drawn in the range, one factor for both axes
        i, m = random_scale(image, mask, (0.5, 2.0), g)
        assert 6 <= m.shape[0] <= 24 and i.shape[1:] == m.shape
        h, w = m.shape  # both rounded from one factor s: |h - 12 s| <= 0.5 and |w - 16 s| <= 0.5
        assert max((h - 0.5) / 12, (w - 0.5) / 16) <= min((h + 0.5) / 12, (w + 0.5) / 16)


def test_crop_larger_than_the_image_pads_the_mask_with_ignore():
    image, mask = _pair(10, 10)
    g = torch.Generator().manual_seed(1)
    i, m = random_crop_pad(image, mask, (16, 20), ignore_index=255, generator=g)
    assert i.shape == (3, 16, 20) and m.shape == (16, 20)
    assert int((m == 255).sum()) == 16 * 20 - 100
    assert torch.equal(m[:10, :10], mask) and torch.all(i[:, 10:, :] == 0)
    assert torch.all(i[:, :, 10:] == 0)


def test_crop_inside_keeps_image_and_mask_aligned_and_covers_every_position():
    image, mask = _pair(12, 16)
    g = torch.Generator().manual_seed(2)
    corners = set()
    for _ in range(600):
        i, m = random_crop_pad(image, mask, (8, 8), generator=g)
        assert i.shape == (3, 8, 8) and torch.equal(i[0].long(), m)
        corners.add((int(i[2, 0, 0]), int(i[1, 0, 0])))  # (top, left) from the index channels
    assert corners == {(t, l) for t in range(5) for l in range(9)}  # uniform over 5 x 9 starts


def test_flip_mirrors_image_and_mask_together():
    image, mask = _pair()
    i, m = random_hflip(image, mask, p=1.0)
    assert torch.equal(m, mask.flip(-1)) and torch.equal(i, image.flip(-1))
    assert random_hflip(image, mask, p=0.0)[1] is mask
    g = torch.Generator().manual_seed(3)
    flips = sum(int(random_hflip(image, mask, 0.5, g)[0][1, 0, 0]) == 15 for _ in range(400))
    assert 150 < flips < 250  # about half


def test_augment_scale_flip_crop_keeps_the_pair_aligned():
    image, mask = _pair(32, 48, block=16)
    aug = SegmentationAugment(
        (0.5, 2.0), (24, 24), flip=0.5, generator=torch.Generator().manual_seed(4)
    )
    seen_pad = False
    for _ in range(30):
        i, m = aug(image, mask)
        assert i.shape == (3, 24, 24) and m.shape == (24, 24)
        labelled = m != 255
        seen_pad |= bool((~labelled).any())
        # away from the squares' borders (a 5x5 neighbourhood of one label) the bilinear image
        # equals the nearest mask: the two were scaled, flipped and cropped together
        inside = _interior(m)
        assert inside.float().mean() > 0.1
        assert torch.equal(i[0].round().long()[inside], m[inside])
        assert torch.all(i[:, ~labelled] == 0)
    assert seen_pad  # scale 0.5 of 32x48 is 16x24: smaller than the crop, padded


@pytest.mark.parametrize(
    "kwargs, message",
    [({"scale_range": (2.0, 1.0)}, "scale_range"), ({"crop": (0, 4)}, "crop"),
     ({"flip": 1.5}, "flip")],
)  # fmt: skip
def test_augment_rejects_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SegmentationAugment(**kwargs)
