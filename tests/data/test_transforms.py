"""Spatial transforms of Section 4.1 ("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971)) on tiny clips."""

from __future__ import annotations

import pytest
import torch

from nlnet.data import IMAGENET_MEAN, IMAGENET_STD
from nlnet.data.video.transforms import (
    TestTransform,
    TrainTransform,
    center_crop,
    horizontal_flip,
    normalize,
    random_crop,
    random_short_side_resize,
    resize,
    short_side_resize,
    spatial_crop,
    three_crop,
    to_float_clip,
)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def frames(t=3, h=12, w=16, device="cpu"):
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (t, h, w, 3), dtype=torch.uint8, generator=g).to(device)


def column_ramp(h=12, w=16):
    """(C=1, T=1, H, W) clip whose value is the column index."""
    return torch.arange(w, dtype=torch.float32).expand(1, 1, h, w).clone()


def test_to_float_clip_layout_and_range():
    x = frames()
    c = to_float_clip(x)
    assert c.shape == (3, 3, 12, 16) and c.dtype == torch.float32
    assert torch.allclose(c[1, 2], x[2, ..., 1].float() / 255)
    with pytest.raises(TypeError, match="uint8"):
        to_float_clip(x.float())


def test_short_side_resize_keeps_aspect_ratio():
    landscape = torch.rand(3, 2, 12, 16)
    assert short_side_resize(landscape, 6).shape == (3, 2, 6, 8)
    portrait = torch.rand(3, 2, 16, 12)
    assert short_side_resize(portrait, 9).shape == (3, 2, 12, 9)
    const = torch.full((3, 2, 12, 16), 0.3)
    assert torch.allclose(short_side_resize(const, 24), torch.full((3, 2, 24, 32), 0.3))
    with pytest.raises(ValueError, match="size"):
        short_side_resize(landscape, 0)


def test_random_short_side_covers_the_range():
    g = torch.Generator().manual_seed(0)
    clip = torch.rand(3, 1, 12, 16)
    sizes = {random_short_side_resize(clip, 8, 11, generator=g).shape[-2] for _ in range(60)}
    assert sizes == {8, 9, 10, 11}


def test_random_crop_is_a_window_of_the_input():
    g = torch.Generator().manual_seed(0)
    clip = torch.rand(3, 2, 12, 16)
    tops_lefts = set()
    for _ in range(30):
        out = random_crop(clip, (5, 7), generator=g)
        assert out.shape == (3, 2, 5, 7)
        found = [
            (t, l)
            for t in range(12 - 5 + 1)
            for l in range(16 - 7 + 1)
            if torch.equal(out, clip[..., t : t + 5, l : l + 7])
        ]
        assert len(found) == 1
        tops_lefts.add(found[0])
    assert len(tops_lefts) > 5
    with pytest.raises(ValueError, match="larger"):
        random_crop(clip, 13)


def test_center_and_three_crop_positions():
    ramp = column_ramp()  # W = 16 is the long side
    left, mid, right = three_crop(ramp, 6)
    assert left[0, 0, 0].tolist() == list(range(0, 6))
    assert mid[0, 0, 0].tolist() == list(range(5, 11))
    assert right[0, 0, 0].tolist() == list(range(10, 16))
    assert torch.equal(center_crop(ramp, 6), mid)
    tall = ramp.transpose(-1, -2)  # H = 16 is the long side: crops go top to bottom
    assert spatial_crop(tall, 6, 2)[0, 0, :, 0].tolist() == list(range(10, 16))


def test_flip_and_normalize():
    ramp = column_ramp()
    flipped = horizontal_flip(ramp)
    assert flipped[0, 0, 0].tolist() == list(range(15, -1, -1))
    assert torch.equal(horizontal_flip(flipped), ramp)
    x = torch.rand(3, 2, 4, 4)
    out = normalize(x, [0.5, 0.25, 0.0], [0.5, 1.0, 2.0])
    assert torch.allclose(out[0], (x[0] - 0.5) / 0.5) and torch.allclose(out[2], x[2] / 2)
    with pytest.raises(ValueError, match="one per channel"):
        normalize(x, [0.5], [1.0])
    with pytest.raises(ValueError, match="positive"):
        normalize(x, [0, 0, 0], [1, 0, 1])


@pytest.mark.parametrize("device", DEVICES)
def test_train_transform(device):
    tf = TrainTransform(scale=(12, 15), crop=10, flip=True)
    x = frames(device=device)
    out = tf(x, generator=torch.Generator().manual_seed(3))
    assert out.shape == (3, 3, 10, 10) and out.dtype == torch.float32
    assert out.device.type == device
    again = tf(x, generator=torch.Generator().manual_seed(3))
    assert torch.equal(out, again)  # reproducible from the generator
    # normalised with ImageNet statistics: the raw [0, 1] value range maps accordingly
    lo = (0 - max(IMAGENET_MEAN)) / min(IMAGENET_STD)
    hi = (1 - min(IMAGENET_MEAN)) / min(IMAGENET_STD)
    assert lo - 1e-5 <= out.min().item() and out.max().item() <= hi + 1e-5
    big = TrainTransform(scale=(12, 12), crop=8, output_size=(9, 11), flip=False)
    assert big(x).shape == (3, 3, 9, 11)  # Section 5.2: crop resized to the output size


def test_train_transform_flips_about_half_the_time():
    # a horizontally symmetric scale/crop setting: the crop is the whole resized frame
    tf = TrainTransform(scale=(12, 12), crop=(12, 16), flip=True, mean=(0, 0, 0), std=(1, 1, 1))
    x = frames()
    plain = to_float_clip(x)
    g = torch.Generator().manual_seed(0)
    flips = 0
    for _ in range(40):
        out = tf(x, generator=g)
        if torch.allclose(out, horizontal_flip(plain)):
            flips += 1
        else:
            assert torch.allclose(out, plain)
    assert 8 <= flips <= 32


@pytest.mark.parametrize("device", DEVICES)
def test_test_transform_views(device):
    x = frames(h=12, w=18, device=device)
    full = TestTransform(scale=8)(x)  # fully-convolutional: whole frame
    assert full.shape == (3, 3, 8, 12) and full.device.type == device
    center = TestTransform(scale=8, crop=6)(x)
    assert center.shape == (3, 3, 6, 6)
    three = TestTransform(scale=8, num_crops=3)
    views = [three(x, crop_index=k) for k in range(3)]
    assert all(v.shape == (3, 3, 8, 8) for v in views)
    assert torch.equal(views[0], full[..., :8]) and torch.equal(views[2], full[..., -8:])
    assert torch.equal(views[1], center_crop(full, 8))
    with pytest.raises(ValueError, match="crop_index"):
        three(x, crop_index=3)
    with pytest.raises(ValueError, match="num_crops"):
        TestTransform(scale=8, num_crops=2)


def test_bad_configuration_errors():
    with pytest.raises(ValueError, match="scale"):
        TrainTransform(scale=(20, 10), crop=8)
    with pytest.raises(ValueError, match="does not fit"):
        TrainTransform(scale=(8, 10), crop=9)
    with pytest.raises(ValueError, match="does not fit"):
        TestTransform(scale=8, crop=9)
    with pytest.raises(ValueError, match="size"):
        resize(torch.rand(3, 1, 4, 4), (0, 3))


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_uint8_resize_matches_float_resize(mode):
    x = frames(t=2, h=12, w=16)  # (T, H, W, C) uint8
    as_uint8 = resize(x.permute(3, 0, 1, 2), (9, 13), mode=mode)  # native (bilinear) or via float
    assert as_uint8.dtype == torch.uint8 and as_uint8.shape == (3, 2, 9, 13)
    as_float = resize(to_float_clip(x), (9, 13), mode=mode) * 255
    assert (as_uint8.float() - as_float.clamp(0, 255)).abs().max().item() <= 1.01
