"""Official Kinetics / Charades annotation files -> nlnet's list datasets."""

from __future__ import annotations

import json

import pytest
import torch

from nlnet.data.video.annotations import (
    read_charades_classes,
    read_charades_csv,
    read_kinetics_csv,
    write_charades_list,
    write_kinetics_list,
)
from nlnet.data.video.builder import build_dataset
from nlnet.data.video_io.backends import write_video

KINETICS_CSV = """label,youtube_id,time_start,time_end,split,is_cc
air drumming,-abc_12DEF,14,24,train,0
abseiling,--07WQ2iBlw,3,13,train,0
"air drumming",zZz9,305,315,train,1
abseiling,missing01,5,15,train,0
"""
CHARADES_CSV = """id,subject,scene,quality,relevance,verified,script,objects,descriptions,actions,length
46GP8,HR43,Kitchen,6,7,Yes,"A person cooks; then eats.",food;dish,"A person, cooking.",c092 11.90 21.20;c147 0.00 12.60;c092 30.0 31.5,24.83
N11GT,0KZ7,Stairs,6,7,Yes,A person walks.,stairs,A person walks.,,13.50
0IH69,6RE8,Bedroom,6,5,No,Sits.,bed,Sits.,c001 2.5 8.0,20.00
"""
CHARADES_CLASSES = """c000 Holding some clothes
c001 Putting clothes somewhere
c092 Cooking something
c147 Eating something
"""


def _video(path, level: int) -> None:
    frames = torch.full((6, 16, 16, 3), level, dtype=torch.uint8)
    write_video(path, frames, fps=25)


def test_kinetics_csv_rows_and_downloaded_file_names(tmp_path):
    (tmp_path / "k.csv").write_text(KINETICS_CSV)
    clips = read_kinetics_csv(tmp_path / "k.csv")
    assert [c.label for c in clips] == ["air drumming", "abseiling", "air drumming", "abseiling"]
    # <label>/<youtube_id>_<start:06d>_<end:06d>.mp4 (the ActivityNet crawler's trim format)
    assert clips[0].path() == "air drumming/-abc_12DEF_000014_000024.mp4"
    assert clips[2].path() == "air drumming/zZz9_000305_000315.mp4"
    assert clips[1].path(folder="") == "--07WQ2iBlw_000003_000013.mp4"
    assert clips[0].path(folder="{split}/{label_underscore}") == (
        "train/air_drumming/-abc_12DEF_000014_000024.mp4"
    )


def test_kinetics_test_csv_without_label_and_bad_rows(tmp_path):
    (tmp_path / "t.csv").write_text("youtube_id,time_start,time_end,split\nabc,3,13,test\n")
    (clip,) = read_kinetics_csv(tmp_path / "t.csv")
    assert clip.label is None and clip.split == "test"
    with pytest.raises(ValueError, match="without label"):
        write_kinetics_list(tmp_path / "t.csv", tmp_path / "t.txt")
    (tmp_path / "b.csv").write_text("label,youtube_id,time_start\nx,abc,3\n")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['time_end'\]"):
        read_kinetics_csv(tmp_path / "b.csv")
    (tmp_path / "c.csv").write_text("label,youtube_id,time_start,time_end\nx,abc,9,3\n")
    with pytest.raises(ValueError, match="line 2"):
        read_kinetics_csv(tmp_path / "c.csv")


def test_kinetics_list_loads_in_the_list_dataset_with_shared_class_ids(tmp_path):
    (tmp_path / "train.csv").write_text(KINETICS_CSV)
    (tmp_path / "val.csv").write_text("label,youtube_id,time_start,time_end,split\n"
                                      "abseiling,vvv,20,30,val\n")  # fmt: skip
    root = tmp_path / "videos"
    for i, clip in enumerate(read_kinetics_csv(tmp_path / "train.csv")[:3]):
        _video(root / clip.path(), level=40 + 60 * i)
    _video(root / "abseiling" / "vvv_000020_000030.mp4", level=200)
    rep = write_kinetics_list(tmp_path / "train.csv", tmp_path / "train.txt",
                              classes_out=tmp_path / "classes.json", video_root=root)  # fmt: skip
    assert rep.written == 3 and rep.missing == ["abseiling/missing01_000005_000015.mp4"]
    assert json.loads((tmp_path / "classes.json").read_text()) == ["abseiling", "air drumming"]
    rep = write_kinetics_list(tmp_path / "val.csv", tmp_path / "val.txt",
                              classes=tmp_path / "classes.json", video_root=root)  # fmt: skip
    assert (tmp_path / "val.txt").read_text() == "abseiling/vvv_000020_000030.mp4 0\n"
    cfg = {"type": "list", "root": str(root), "classes": str(tmp_path / "classes.json"),
           "annotations": {"train": str(tmp_path / "train.txt"), "val": str(tmp_path / "val.txt")},
           "num_frames": 2, "stride": 1, "train_scale": [16, 16], "crop": 16, "test_scale": 16,
           "cache": False}  # fmt: skip
    train = build_dataset(cfg, "train")
    assert train.classes == ["abseiling", "air drumming"] and len(train) == 3
    assert [train.video_target(i) for i in range(3)] == [1, 0, 1]
    val = build_dataset(cfg, "val", clips=1)
    assert val.video_target(0) == 0 and val[0] is not None
    with pytest.raises(ValueError, match="not in classes"):
        write_kinetics_list(tmp_path / "train.csv", tmp_path / "x.txt", classes=["abseiling"])
    with pytest.raises(ValueError, match="no video"):
        write_kinetics_list(tmp_path / "train.csv", tmp_path / "x.txt", video_root=root,
                            missing="error")  # fmt: skip


def test_charades_csv_segments_and_clip_labels(tmp_path):
    (tmp_path / "c.csv").write_text(CHARADES_CSV)
    videos = read_charades_csv(tmp_path / "c.csv")
    v = videos[0]
    assert v.id == "46GP8" and v.length == pytest.approx(24.83) and v.scene == "Kitchen"
    assert v.actions[0] == ("c092", 11.9, 21.2) and len(v.actions) == 3
    assert v.labels == ["c092", "c147"] and videos[1].labels == []
    assert v.labels_between(0.0, 5.0) == ["c147"]
    assert v.labels_between(12.0, 13.0) == ["c092", "c147"]
    assert v.labels_between(22.0, 29.0) == []
    (tmp_path / "bad.csv").write_text("id,actions\nX,c001 1.0\n")
    with pytest.raises(ValueError, match="c### start end"):
        read_charades_csv(tmp_path / "bad.csv")


def test_charades_list_gives_multi_hot_targets_in_the_class_file_order(tmp_path):
    (tmp_path / "c.csv").write_text(CHARADES_CSV)
    (tmp_path / "classes.txt").write_text(CHARADES_CLASSES)
    assert read_charades_classes(tmp_path / "classes.txt")[2] == ("c092", "Cooking something")
    root = tmp_path / "Charades_v1_480"
    for i, vid in enumerate(("46GP8", "N11GT", "0IH69")):
        _video(root / f"{vid}.mp4", level=30 + 70 * i)
    rep = write_charades_list(tmp_path / "c.csv", tmp_path / "train.txt",
                              classes=tmp_path / "classes.txt", video_root=root)  # fmt: skip
    assert rep.written == 3 and not rep.missing
    assert (tmp_path / "train.txt").read_text().splitlines() == [
        "46GP8.mp4 c092,c147", "N11GT.mp4", "0IH69.mp4 c001"]  # fmt: skip
    cfg = {"type": "multilabel", "root": str(root), "classes": str(tmp_path / "classes.txt"),
           "annotations": {"train": str(tmp_path / "train.txt")}, "num_frames": 2, "stride": 1,
           "train_scale": [16, 16], "crop": 16, "cache": False}  # fmt: skip
    ds = build_dataset(cfg, "train")
    assert ds.num_classes == 4
    assert ds.video_target(0).tolist() == [0, 0, 1, 1]
    assert ds.video_target(1).tolist() == [0, 0, 0, 0]
    assert ds.video_target(2).tolist() == [0, 1, 0, 0]
    (tmp_path / "few.txt").write_text("c000 Holding some clothes\n")
    with pytest.raises(ValueError, match="c092"):
        write_charades_list(tmp_path / "c.csv", tmp_path / "x.txt", classes=tmp_path / "few.txt")
