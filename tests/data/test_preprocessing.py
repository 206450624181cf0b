"""The one test-time record: every kind round-trips, every older shape reads, checkpoints store
the versioned dict and give the record back."""

from __future__ import annotations

import pytest
import torch

from nlnet.data.preprocessing import PREPROCESSING_VERSION, Preprocessing
from nlnet.data.video.config import VideoDataConfig
from nlnet.engine.checkpoint import CheckpointError, checkpoint_info, save_checkpoint

RECORDS = [
    VideoDataConfig(num_frames=8, stride=4, test_scale=40, test_crop=32).preprocessing(),
    Preprocessing("clip", (0.1,) * 3, (0.2,) * 3, 4, 2, "segments", 64, (48, 64)),
    Preprocessing("image", (0.5,) * 3, (0.25,) * 3, size=37, crop=32),
    Preprocessing("image", window=(32, 32), sliding_window=True, window_overlap=0.5),
    Preprocessing("volume", label_map={4: 3}, modalities=("t1", "flair"), window=(8, 16, 16)),
    Preprocessing("super_resolution", upscale=3),
    Preprocessing("boxes", iou_types=("bbox", "segm")),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.kind)
def test_every_kind_round_trips_through_its_versioned_dict(record):
    stored = record.to_dict()
    assert stored["version"] == PREPROCESSING_VERSION and stored["kind"] == record.kind
    assert Preprocessing.from_dict(stored) == record
    # plain data only: what torch.load(weights_only=True) and JSON read back
    assert all(isinstance(v, (int, float, str, bool, list, dict)) for v in stored.values())


def test_the_kinds_defaults():
    assert Preprocessing("image").mean == (0.485, 0.456, 0.406)  # ImageNet
    assert Preprocessing("super_resolution").mean == (0.0,) * 3  # [0, 1] pixels as they are
    assert Preprocessing("boxes").std == (1.0,) * 3
    volume = Preprocessing("volume")
    assert volume.mean is None and volume.normalize == "zscore_nonzero"
    assert volume.to_dict()["normalize"] == "zscore_nonzero"


# the five shapes checkpoints held before the record was versioned, one per task
OLDER = [
    ({"mean": [0.45] * 3, "std": [0.225] * 3, "num_frames": 32, "stride": 2, "size": 256,
      "crop": None, "channel_order": "RGB"}, {"kind": "clip", "num_frames": 32, "crop": None}),
    ({"mean": [0.5] * 3, "std": [0.25] * 3, "size": 32, "resize": 36, "input_kind": "image"},
     {"kind": "image", "size": 36, "crop": 32}),
    ({"mean": [0.5] * 3, "std": [0.25] * 3, "window": [32, 32], "sliding_window": True,
      "window_overlap": 0.25}, {"kind": "image", "window": (32, 32), "size": None}),
    ({"kind": "volume", "normalize": "zscore_nonzero", "patch": [8, 8, 8],
      "label_map": {"4": 3}, "modalities": ["t1"], "window": [8, 8, 8]},
     {"kind": "volume", "window": (8, 8, 8), "label_map": {4: 3}, "modalities": ("t1",)}),
    ({"mean": [0.0] * 3, "std": [1.0] * 3, "upscale": 2}, {"kind": "super_resolution",
                                                          "upscale": 2}),
    ({"mean": [0.0] * 3, "std": [1.0] * 3, "iou_types": ["bbox"]},
     {"kind": "boxes", "iou_types": ("bbox",)}),
]  # fmt: skip


@pytest.mark.parametrize("stored,expected", OLDER, ids=lambda v: str(v.get("kind", "")))
def test_older_shapes_read_into_the_record(stored, expected):
    record = Preprocessing.from_dict(stored)
    for name, value in expected.items():
        assert getattr(record, name) == value, name
    assert Preprocessing.from_dict(record.to_dict()) == record


def test_refusals_name_the_field():
    assert Preprocessing.from_dict({}) is None and Preprocessing.from_dict(None) is None
    with pytest.raises(ValueError, match="preprocessing.kind: expected one of"):
        Preprocessing("audio")
    with pytest.raises(ValueError, match="version 9 is newer"):
        Preprocessing.from_dict({"version": 9, "kind": "image"})
    with pytest.raises(ValueError, match="a clip needs num_frames"):
        Preprocessing("clip")
    with pytest.raises(ValueError, match="preprocessing.sampling"):
        Preprocessing("clip", num_frames=4, sampling="random")


def test_checkpoints_store_the_versioned_dict_and_give_the_record(tmp_path):
    model = torch.nn.Linear(2, 2)
    older = OLDER[1][0]  # an image classifier's dict of the older shape
    path = save_checkpoint(tmp_path / "a.pt", model=model, model_name="vit_tiny",
                           num_classes=2, preprocessing=older)  # fmt: skip
    stored = torch.load(path, weights_only=True)["preprocessing"]
    assert stored["version"] == PREPROCESSING_VERSION and stored["kind"] == "image"
    info = checkpoint_info(path)
    assert info.preprocessing == Preprocessing.from_dict(older)
    bare = save_checkpoint(tmp_path / "b.pt", model=model, model_name="vit_tiny", num_classes=2)
    assert checkpoint_info(bare).preprocessing is None
    with pytest.raises(CheckpointError, match="preprocessing: preprocessing.kind"):
        save_checkpoint(tmp_path / "c.pt", model=model, model_name="vit_tiny", num_classes=2,
                        preprocessing={"version": 2, "kind": "audio"})  # fmt: skip


def test_a_record_hashes_and_a_checkpoint_without_one_exports_with_its_models_input():
    from nlnet.engine.checkpoint import CheckpointInfo
    from nlnet.export import export_metadata, input_shape

    assert hash(RECORDS[4]) == hash(Preprocessing.from_dict(RECORDS[4].to_dict()))
    info = CheckpointInfo("c2d_r50", 4)  # an import that stored no preprocessing
    meta = export_metadata(info)
    assert meta["preprocessing"]["kind"] == "clip" and meta["preprocessing"]["num_frames"] == 32
    assert input_shape(info) == (1, 3, 32, 224, 224)


def test_export_takes_the_channels_the_checkpoint_was_trained_on():
    """A U-Net trained on one-channel volumes (the registered input is BraTS' four): the
    export input has one channel, and a given size with four is refused naming it."""
    from nlnet.engine.checkpoint import CheckpointInfo
    from nlnet.export import input_shape

    info = CheckpointInfo("unet3d_nl", 2, model_options={"in_channels": 1})
    assert input_shape(info)[:2] == (1, 1)
    assert input_shape(info, "1x16x16x16") == (1, 1, 16, 16, 16)
    with pytest.raises(ValueError, match=r"input_size: the model takes 1 channel\(s\)"):
        input_shape(info, "4x16x16x16")
