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


@pytest.mark.parametrize("kind", ["image", "video"])
def test_one_class_folder_is_refused_in_one_line(tmp_path, kind):
    """A folder of one class would train to 100% at once: both tasks refuse it."""
    _tree(tmp_path, {"train": ("cat",), "val": ("cat",)}, _png if kind == "image" else _mp4)
    if kind == "image":
        task = ImageClassificationTask(data={"root": str(tmp_path), "size": 8})
    else:
        task = VideoClassificationTask(data={"type": "folder", "root": str(tmp_path),
                                             "num_frames": 2, "stride": 1})  # fmt: skip
    with pytest.raises((DataError, ValueError), match="one class folder \\('cat'\\)") as err:
        task.build_dataset("train", "train")
    assert "needs at least two classes" in str(err.value) and "\n" not in str(err.value)
