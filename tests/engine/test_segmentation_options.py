"""The segmentation data section's augmentation / layout / sliding-window / region keys: one-line
config errors from ``nlnet train`` (exit 2, before any run directory), the defaults unchanged,
and what the task builds from them."""

from __future__ import annotations

import pytest
import torch

from nlnet.data.segmentation.config import SegmentationDataConfig
from nlnet.data.segmentation.transforms import SegmentationAugment
from nlnet.engine.tasks.segmentation import SegmentationTask


@pytest.mark.parametrize(
    "config, override, message",
    [
        ("dense/unet2d_nl", "data.layout=cityscape", "data.layout: expected one of folder, cityscapes"),
        ("dense/unet2d_nl", "data.scale_range=[2.0,0.5]", "data.scale_range: expected [lo, hi]"),
        ("dense/unet2d_nl", "data.crop=[0,16]", "data.crop: expected [h, w] positive sizes"),
        ("dense/unet2d_nl", "data.flip=2", "data.flip: expected a probability in [0, 1]"),
        ("dense/unet2d_nl", "data.sliding_window=true", "data.sliding_window: needs data.crop"),
        ("dense/unet2d_nl", "data.window_overlap=1", "data.window_overlap: expected a fraction"),
        ("dense/unet2d_nl", "data.regions={wt: [1]}", "data.regions: only for data.kind volume"),
        ("dense/unet2d_nl", "data.scale=[0.5,2]", "unknown config key 'data.scale'"),
        ("dense/unet3d_nl", "data.crop=[8,8]", "data.crop: only for data.kind image"),
        ("dense/unet3d_nl", "data.layout=cityscapes", "data.layout: only for data.kind image"),
        ("dense/unet3d_nl", "data.regions={wt: []}", "data.regions: expected {name: [labels]}"),
        ("dense/unet3d_nl", "data.regions={}", None),  # then data.hd95 below has no regions
    ],
)  # fmt: skip
def test_key_mistakes_are_one_line_config_errors(config, override, message, tmp_path, capsys):
    from nlnet.cli import main

    out = tmp_path / "never"
    extra = ["data.hd95=true"] if message is None else []
    argv = ["train", "--config", config, f"output_dir={out}", "data.root=nowhere", override]
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err
    expected = message or "data.hd95: needs data.regions"
    assert expected in err and err.count("\n") == 1, err
    assert not out.exists()


def test_defaults_keep_the_old_behaviour():
    d = SegmentationDataConfig()
    assert (d.layout, d.scale_range, d.crop, d.flip, d.sliding_window) == (
        "folder",
        (),
        (),
        None,
        False,
    )
    task = SegmentationTask(2, data={"root": "x"})
    assert task.data.regions == {} and not task.data.hd95


def test_the_task_builds_the_augmentation_for_training_only(tmp_path):
    from nlnet.data.digits.dense import DenseDigitsConfig, prepare_dense_digits

    root = prepare_dense_digits(
        DenseDigitsConfig(size=48, num_train=4, num_val=2, num_test=2), tmp_path
    )
    task = SegmentationTask(
        4, data={"root": str(root), "scale_range": [1.5, 2.0], "crop": 24, "flip": 1.0}
    )
    assert task.data.crop == (24, 24)  # one size: a square crop
    train, val = task.build_datasets()
    assert isinstance(train.transform, SegmentationAugment) and val.transform is None
    assert train.transform.flip == 1.0 and train.transform.scale_range == (1.5, 2.0)
    image, mask = train[0]["image"], train[0]["mask"]
    assert image.shape == (3, 24, 24) and mask.shape == (24, 24)
    assert val[0]["mask"].shape == (48, 48)
    plain = SegmentationTask(4, data={"root": str(root)}).build_dataset("train")
    assert plain.transform is None  # no key set: the items as before
    from nlnet.data.segmentation.images import SegmentationFolder

    assert torch.equal(plain[0]["image"], SegmentationFolder(root, "train")[0]["image"])


def test_a_region_named_like_a_class_is_refused():
    with pytest.raises(ValueError, match="data.regions"):
        SegmentationTask(2, ["background", "wt"], data={"kind": "volume", "regions": {"wt": [1]}})
