"""A class folder only a held-out split has: named in one message, refused by both tasks."""

from __future__ import annotations

import re

import numpy as np
import pytest

from nlnet.data.class_folders import split_classes, training_splits
from nlnet.data.video_io.backends import write_video
from nlnet.engine.errors import DataError
from nlnet.engine.tasks.image import ImageClassificationTask
from nlnet.engine.tasks.video import VideoClassificationTask

MESSAGE = "class folder 'eel' of split 'val' is in no training split (train)"


def _tree(root, splits: dict[str, tuple[str, ...]], write) -> None:
    for split, classes in splits.items():
        for name in classes:
            (root / split / name).mkdir(parents=True)
            write(root / split / name)


def _png(folder) -> None:
    from PIL import Image

    Image.fromarray(np.full((12, 12, 3), 90, np.uint8)).save(folder / "0.png")


def _mp4(folder) -> None:
    write_video(folder / "0.mp4", np.full((6, 16, 16, 3), 90, np.uint8), fps=10)


def test_the_training_splits_number_the_classes_and_refuse_a_new_one(tmp_path):
    _tree(tmp_path, {"train": ("cat", "dog"), "trainval": ("ant",), "val": ("cat", "eel")},
          lambda folder: None)  # fmt: skip
    assert training_splits(tmp_path) == ["train", "trainval"]
    assert split_classes(tmp_path, "train") == ["ant", "cat", "dog"]
    with pytest.raises(ValueError, match="class folder 'eel' of split 'val' is in no training"):
        split_classes(tmp_path, "val")


def test_the_image_task_names_the_folder_and_the_split(tmp_path):
    _tree(tmp_path, {"train": ("cat", "dog"), "val": ("cat",)}, _png)
    task = ImageClassificationTask(data={"root": str(tmp_path), "size": 8})
    val = task.build_dataset("val", "test")  # a val split may lack a class: same numbering
    assert val.classes == ["cat", "dog"] == task.build_dataset("train").classes
    (tmp_path / "val" / "eel").mkdir()
    _png(tmp_path / "val" / "eel")
    with pytest.raises(DataError, match=re.escape(MESSAGE)) as err:
        task.build_dataset("val", "test")
    assert "\n" not in str(err.value)


def test_the_video_task_refuses_a_class_never_trained(tmp_path):
    _tree(tmp_path, {"train": ("cat", "dog"), "val": ("cat", "eel")}, _mp4)
    task = VideoClassificationTask(data={"type": "folder", "root": str(tmp_path),
                                         "num_frames": 2, "stride": 1})  # fmt: skip
    assert task.build_dataset("train", "train").classes == ["cat", "dog"]
    with pytest.raises(DataError, match=re.escape(MESSAGE)) as err:
        task.build_dataset("val", "test")
    assert "\n" not in str(err.value) and "split 'val'" in str(err.value)


def test_training_on_one_class_folder_is_refused_in_one_line(tmp_path, capsys):
    """A folder of one class would train to 100% at once: ``nlnet train`` refuses it (the
    dataset itself stays readable, e.g. for prediction)."""
    from nlnet.cli import main

    _tree(tmp_path / "data", {"train": ("cat",), "val": ("cat",)}, _mp4)
    argv = ["train", "--config", "smoke/folder_tiny", f"data.root={tmp_path / 'data'}",
            f"output_dir={tmp_path / 'run'}", "train.device=cpu", "data.num_frames=2",
            "data.stride=1"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the training data has one class ('cat'); classification needs at least two" in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_full_frame_testing_of_videos_of_several_sizes_in_one_batch(tmp_path):
    """Videos of two aspect ratios, no test crop, eval batch size 4: each shape runs as its own
    batch (the clips of a batch used to be one stacked tensor and raised at the end of a run);
    the scores equal those of a batch size of 1."""
    import torch
    from torch import nn

    from nlnet.engine.tasks.video import VideoEvalConfig

    for cls, sizes in (("cat", ((16, 24), (16, 16))), ("dog", ((24, 16), (16, 16)))):
        (tmp_path / "val" / cls).mkdir(parents=True)
        (tmp_path / "train" / cls).mkdir(parents=True)
        for k, (h, w) in enumerate(sizes):
            frames = np.random.default_rng(k).integers(0, 255, (6, h, w, 3), dtype=np.uint8)
            write_video(tmp_path / "val" / cls / f"{k}.mp4", frames, fps=10)
    data = {"type": "folder", "root": str(tmp_path), "num_frames": 2, "stride": 1,
            "test_scale": 16, "test_crop": None}  # fmt: skip
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv3d(3, 2, 1), nn.AdaptiveAvgPool3d(1), nn.Flatten())
    results = []
    for batch in (4, 1):
        task = VideoClassificationTask(
            data=data, evaluation=VideoEvalConfig(clips=2, batch_size=batch)
        )
        dataset = task.build_dataset("val", "test")
        results.append(task.evaluate(model, dataset, torch.device("cpu")))
    assert results[0]["video_count"] == 4 and results[0]["clip_count"] == 8
    for key in ("clip_top1", "video_top1"):
        assert results[0][key] == results[1][key]


def test_media_files_follow_linked_folders_once_and_leave_out_dot_files(tmp_path):
    from nlnet.data.class_folders import media_files

    (tmp_path / "cls" / "sub").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    for name in ("cls/a.MP4", "cls/sub/b.mp4", "cls/._a.MP4", "cls/.DS_Store", "cls/c.txt",
                 "elsewhere/d.mp4"):  # fmt: skip
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "cls" / ".hidden").mkdir()
    (tmp_path / "cls" / ".hidden" / "e.mp4").write_bytes(b"x")
    (tmp_path / "cls" / "linked").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere" / "loop").symlink_to(tmp_path / "cls")  # a cycle
    found = [p.relative_to(tmp_path).as_posix() for p in media_files(tmp_path / "cls", [".mp4"])]
    assert found == ["cls/a.MP4", "cls/linked/d.mp4", "cls/sub/b.mp4"]


def test_a_class_folder_without_a_usable_video_is_found(tmp_path):
    from nlnet.data.class_folders import classes_without_items

    assert classes_without_items(["a", "b", "c"], [0, 2, 2], bad={1}) == ["b"]
    assert classes_without_items(["a", "b"], [0, 1, 1], bad={0}) == ["a"]
    _tree(tmp_path, {"train": ("cat", "dog"), "val": ("cat",)}, _mp4)
    write_video(tmp_path / "train" / "dog" / "0.mp4", np.zeros((1, 16, 16, 3), np.uint8), fps=1)
    task = VideoClassificationTask(data={"type": "folder", "root": str(tmp_path),
                                         "num_frames": 2, "stride": 1})  # fmt: skip
    with pytest.warns(UserWarning, match="too short"):
        train = task.build_dataset("train", "train")
    assert train.classes_without_items() == ["dog"]  # its one video is too short


def test_evaluation_refuses_class_folders_that_are_not_the_checkpoints():
    from nlnet.engine.evaluation import check_class_folders

    check_class_folders(["air drumming", "Archery"], ["air_drumming", "archery"], "val")
    check_class_folders(None, ["a", "b"], "val")  # nothing stored: nothing to compare
    with pytest.raises(DataError, match="class 0 of the val data is folder 'aaa' but the "
                                        "checkpoint's class 0 is 'left'"):  # fmt: skip
        check_class_folders(["left", "right"], ["aaa", "left"], "val")


def test_only_class_folders_are_checked_for_classes_without_items():
    """A list (a 1-based list's class 0, a subset of a class index) or items built in Python
    may number classes they have no item of: not refused."""
    from nlnet.data.images.dataset import ImageItems

    assert ImageItems(["a.png"], [1], ["zero", "one"], None).classes_without_items() == []
    folders = ImageItems(["a.png"], [1], ["zero", "one"], None, from_folders=True)
    assert folders.classes_without_items() == ["zero"]
