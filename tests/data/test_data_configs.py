"""The typed ``data`` sections beside their datasets (``nlnet.data.*.config``): a bad value is a
plain ``ValueError`` naming the key (the engine turns it into its one-line config error), and the
defaults build."""

from __future__ import annotations

import pytest

from nlnet.data.detection.config import DetectionDataConfig
from nlnet.data.images.config import ImageDataConfig
from nlnet.data.segmentation.config import SegmentationDataConfig
from nlnet.data.super_resolution.config import SuperResolutionData
from nlnet.engine.errors import UserError


@pytest.mark.parametrize(
    "cls, values, message",
    [
        (ImageDataConfig, {}, "data: task image_classification needs exactly one of data.root"),
        (ImageDataConfig, {"builtin": "mnist"}, "data.builtin: expected one of digits, got 'mnist'"),
        (ImageDataConfig, {"builtin": "digits", "min_scale": 0}, "data.min_scale: expected"),
        (ImageDataConfig, {"root": "x", "std": (1.0, 0.0, 1.0)}, "data.std: expected 3 numbers"),
        (SegmentationDataConfig, {"kind": "surface"}, "data.kind: expected image or volume"),
        (SegmentationDataConfig, {"layout": "voc"}, "data.layout: expected one of folder, cityscapes"),
        (SegmentationDataConfig, {"crop": (0, 4)}, "data.crop: expected [h, w] positive sizes"),
        (SegmentationDataConfig, {"kind": "volume", "hd95": True}, "data.hd95: needs data.regions"),
        (SuperResolutionData, {"source": "web"}, "data.source: expected one of"),
        (SuperResolutionData, {"source": "folder"}, "data.root: a 'folder' source needs root"),
        (SuperResolutionData, {"patch": 0}, "data.patch: expected a positive int, got 0"),
        (DetectionDataConfig, {"hflip": 2.0}, "data.hflip: expected a probability"),
    ],
)  # fmt: skip
def test_a_bad_value_is_a_plain_value_error_naming_the_key(cls, values, message):
    with pytest.raises(ValueError) as info:
        cls(**values)
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)
    assert not isinstance(info.value, UserError)  # the engine's error type is the engine's


def test_the_checks_normalise_what_they_accept():
    assert SegmentationDataConfig(crop=(16,)).crop == (16, 16)
    vol = SegmentationDataConfig(
        kind="volume", regions={"wt": [1, 2], "et": 4}, label_map={"4": "3"}
    )
    assert vol.regions == {"wt": (1, 2), "et": (4,)} and vol.label_map == {4: 3}
    assert ImageDataConfig(builtin="digits").size == 224
    assert SuperResolutionData().source == "builtin"


def test_video_extensions_as_a_user_writes_them():
    """``data.extensions=mp4`` (one string, no dot) is the list ['.mp4'], not the characters
    'm', 'p', '4' that would match every name ending in them; an empty entry is refused."""
    from nlnet.data.video.config import VideoDataConfig

    assert VideoDataConfig(extensions="mp4").extensions == (".mp4",)
    assert VideoDataConfig(extensions=["avi", ".MKV"]).extensions == (".avi", ".MKV")
    for bad in ([], ["."], [""], [3]):
        with pytest.raises(ValueError, match=r"data.extensions: expected file extensions"):
            VideoDataConfig(extensions=bad)
