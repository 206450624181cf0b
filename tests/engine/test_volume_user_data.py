"""Users' own volumes through the command line: a case with a modality too many, splits or
checkpoints of other channels, masks whose labels leave gaps or are 0/255, and ``nlnet
inspect`` of a volume network on a ``.npy`` case."""

from __future__ import annotations

import json

import helpers  # tests/journeys/helpers.py (pytest pythonpath)
import numpy as np
import pytest

from nlnet.cli import main

SHAPE = (1, 10, 16, 18)


def _train(root, out, *extra: str) -> list[str]:
    return ["train", "--config", "smoke/volumes_tiny", f"data.root={root}", "data.patch=[8,8,8]",
            "optim.epochs=0", "optim.max_iters=2", "train.batch_size=2", "train.progress=false",
            *extra, "--output-dir", str(out)]  # fmt: skip


def _double(path) -> None:
    np.save(path, np.concatenate([np.load(path)] * 2))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 1-channel checkpoint trained on a folder where one training case has 2 channels."""
    tmp = tmp_path_factory.mktemp("mixed")
    root = helpers.volume_tree(tmp / "data", cases=3, shape=SHAPE, splits=("train", "val"))
    _double(root / "train" / "images" / "case1.npy")
    assert main(_train(root, tmp / "run")) == 0
    return root, tmp / "run"


def test_a_case_with_a_modality_too_many_is_skipped_and_counted(trained):
    _, run = trained
    summary = json.loads((run / "summary.json").read_text())
    assert summary["skipped"] >= 1  # case1, each time it was drawn (not fatal)
    assert 0 <= summary["val"]["mIoU"] <= 100


def test_splits_and_checkpoints_of_other_channels_are_one_line(trained, tmp_path, capsys):
    root, run = trained
    other = helpers.volume_tree(tmp_path / "two", cases=2, shape=SHAPE, splits=("train", "val"))
    for p in (other / "val" / "images").glob("*.npy"):
        _double(p)
    capsys.readouterr()
    ckpt = run / "checkpoints" / "final.pt"
    assert main(["eval", "--checkpoint", str(ckpt), f"data.root={other}"]) == 2
    err = capsys.readouterr().err
    assert "the val cases have 2 channel(s) but the checkpoint's model takes 1" in err
    assert "Traceback" not in err and err.count("\n") == 1
    assert main(_train(other, tmp_path / "run")) == 2
    err = capsys.readouterr().err
    assert "the validation data has 2 channel(s) but the training data 1" in err
    assert "Traceback" not in err


def test_inspect_measures_a_volume_network_on_npy_cases(trained, tmp_path, capsys):
    root, run = trained
    ckpt = str(run / "checkpoints" / "final.pt")
    case = root / "val" / "images" / "case0.npy"
    thin = tmp_path / "thin.npy"  # thinner than the network's stride: padded as in testing
    np.save(thin, np.load(case)[:, :2])
    capsys.readouterr()
    assert main(["inspect", ckpt, "--input", str(case), "--input", str(thin)]) == 0
    out = capsys.readouterr().out
    assert "measured on 2 input(s)" in out and "bottleneck.non_local" in out
    two = tmp_path / "two.npy"
    np.save(two, np.concatenate([np.load(case)] * 2))
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"")
    for bad, message in ((two, "2 channel(s), the model takes 1"),
                         (clip, "a volume model takes .npy, .nii, .nii.gz files")):  # fmt: skip
        assert main(["inspect", ckpt, "--input", str(bad)]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_masks_of_0_and_255_get_the_label_map_hint(tmp_path, capsys):
    """A binary mask saved as a picture (0 and 255): 255 is the ignore label, so the masks
    hold label 0 only; the error says how to map it, and the mapping trains."""
    root = helpers.volume_tree(tmp_path / "data", cases=2, shape=SHAPE, splits=("train", "val"))
    for p in root.glob("*/masks/*.npy"):
        np.save(p, np.where(np.load(p) > 0, 255, 0).astype(np.uint8))
    assert main(_train(root, tmp_path / "a")) == 2
    err = capsys.readouterr().err
    assert "label 0 only; 255 is data.ignore_index" in err
    assert "data.label_map='{255: 1}'" in err
    assert main(_train(root, tmp_path / "b", "data.label_map={255: 1}")) == 0
    assert "iou_1" in json.loads((tmp_path / "b" / "summary.json").read_text())["val"]


def test_0_255_masks_are_refused_with_a_class_count_given_too(tmp_path, capsys):
    """The same masks with ``model.num_classes`` set (as the shipped configs set it): the
    foreground would be ignored in every mask, so the run is refused with the same hint."""
    root = helpers.volume_tree(tmp_path / "data", cases=2, shape=SHAPE, splits=("train", "val"))
    for p in root.glob("*/masks/*.npy"):
        np.save(p, np.where(np.load(p) > 0, 255, 0).astype(np.uint8))
    assert main(_train(root, tmp_path / "a", "model.num_classes=2")) == 2
    err = capsys.readouterr().err
    assert "data.root: the training masks hold label 0 only; 255 is data.ignore_index" in err
    assert main(_train(root, tmp_path / "b", "model.num_classes=2",
                       "data.label_map={255: 1}")) == 0  # fmt: skip


def test_sparse_foreground_with_a_void_label_passes_the_0_255_check(tmp_path):
    """The check reads 8 of the training masks first; when those hold only 0 and 255 it reads
    them all, so a dataset whose few foreground masks fall outside the sample still trains."""
    from nlnet.data.segmentation.config import SegmentationDataConfig
    from nlnet.engine.errors import ConfigError
    from nlnet.engine.tasks.segmentation.labels import check_foreground

    root = helpers.volume_tree(tmp_path, cases=10, shape=(1, 8, 8, 8), splits=("train",))
    masks = sorted((root / "train" / "masks").glob("*.npy"))
    for p in masks:
        void = np.zeros((8, 8, 8), np.uint8)
        void[0] = 255
        np.save(p, void)
    d = SegmentationDataConfig(root=str(root), kind="volume", val_split=None)
    with pytest.raises(ConfigError, match="the training masks hold label 0 only"):
        check_foreground(d)
    one = np.load(masks[9])
    one[2, 2, 2] = 1  # case9: not among the 8 sampled of 10
    np.save(masks[9], one)
    check_foreground(d)
