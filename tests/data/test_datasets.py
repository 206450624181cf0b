"""Datasets of nlnet.data.video.builder on tiny real mp4 files written with PyAV."""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from nlnet.data.seeding import ItemKey
from nlnet.data.video import builder as ds_mod
from nlnet.data.video.builder import (
    BadVideoWarning,
    MultiLabelVideoDataset,
    VideoFolderDataset,
    VideoListDataset,
    clear_memory_index,
    collate_skip_bad,
    read_class_index,
)
from nlnet.data.video.config import VideoDataConfig
from nlnet.data.video.sampling import RandomClipSampler, UniformClipSampler
from nlnet.data.video.sampling import test_clip_indices as sample_test_clips
from nlnet.data.video_io import backends as video_mod
from nlnet.data.video_io import frame_index as index_mod
from nlnet.data.video_io.backends import write_video


def build_dataset(cfg, split, mode=None, *, clips=3, crops=1):
    """The library's builder with this module's 3 test clips per video (eval.clips)."""
    return ds_mod.build_dataset(cfg, split, mode, clips=clips, crops=crops)


N, H, W = 12, 32, 40
TINY = {
    "num_frames": 4,
    "stride": 2,
    "train_scale": [24, 28],
    "crop": 16,
    "test_scale": 24,
    "mean": [0.0, 0.0, 0.0],
    "std": [1.0, 1.0, 1.0],
}


def parts(training: bool = True) -> dict:
    """The dataset parts of the TINY data config (for the layouts built directly)."""
    return ds_mod.build_parts(VideoDataConfig(**TINY), training)


def level(i: int, offset: int = 0) -> int:
    return 20 + 12 * i + offset  # red level identifying frame i


def make_video(path, n: int = N, offset: int = 0):
    frames = np.zeros((n, H, W, 3), np.uint8)
    for i in range(n):
        frames[i, ..., 0] = level(i, offset)
        frames[i, ..., 1] = 90
    return write_video(path, frames, fps=25)


def frame_ids(clip: torch.Tensor, offset: int = 0) -> list[int]:
    """Frame indices of a (C, T, H, W) clip normalised with mean 0, std 1."""
    red = clip[0].mean(dim=(1, 2)) * 255  # (T,)
    return [int(round((r - 20 - offset) / 12)) for r in red.tolist()]


@pytest.fixture(autouse=True)
def _fresh_memory_index():
    clear_memory_index()
    yield
    clear_memory_index()


@pytest.fixture(scope="module")
def folder_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("kinetics")
    make_video(root / "train" / "cat" / "c1.mp4")
    make_video(root / "train" / "cat" / "c2.mp4")
    make_video(root / "train" / "dog" / "d1.mp4")
    make_video(root / "val" / "cat" / "c3.mp4")
    make_video(root / "val" / "dog" / "d2.mp4")
    (root / "train" / "cat" / "notes.txt").write_text("not a video")
    (root / ".thumbnails" / "junk").mkdir(parents=True)  # hidden folders are not splits/classes
    return root


@pytest.fixture(scope="module")
def bad_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    d = root / "train" / "x"
    good = make_video(d / "good.mp4")
    (d / "garbage.mp4").write_bytes(os.urandom(3000))
    data = good.read_bytes()
    (d / "truncated.mp4").write_bytes(data[: len(data) // 2])
    make_video(d / "short.mp4", n=3)
    return root


def test_folder_layout_classes_and_train_items(folder_root):
    train = build_dataset({"type": "folder", "root": str(folder_root), **TINY}, "train")
    assert isinstance(train, VideoFolderDataset) and isinstance(train.sampler, RandomClipSampler)
    assert train.classes == ["cat", "dog"] and train.num_classes == 2
    assert len(train) == 3 and train.frame_counts == [N, N, N]
    assert [os.path.basename(v) for v in train.videos] == ["c1.mp4", "c2.mp4", "d1.mp4"]
    item = train[2]
    clip, target, index = item["clip"], item["target"], item["index"]
    assert clip.shape == (3, 4, 16, 16) and clip.dtype == torch.float32
    assert (target, index) == (1, 2)
    ids = frame_ids(clip)
    assert all(b - a == 2 for a, b in zip(ids, ids[1:])) and 0 <= ids[0] <= N - 8
    val = build_dataset({"type": "folder", "root": str(folder_root), **TINY}, "val")
    assert val.classes == train.classes and isinstance(val.sampler, UniformClipSampler)
    assert [val.video_target(v) for v in range(val.num_videos)] == [0, 1]


def test_test_mode_views_decode_the_paper_clips(folder_root):
    cfg = {"type": "folder", "root": str(folder_root), **TINY}
    val = build_dataset(cfg, "val", crops=3)
    assert len(val) == 2 * 3 * 3 and val.views_per_video == 9
    expected = sample_test_clips(N, 4, 2, 3)  # (K, T): clips start at 0, 2, 4
    for i in range(9, 18):  # every view of video 1
        item = val[i]
        video, clip_k, crop_c = val.video_index(i)
        assert item["index"] == video == 1 and item["clip_index"] == clip_k * 3 + crop_c
        assert item["clip"].shape == (3, 4, 24, 24)  # 3-crop of the 24-pixel short side
        assert frame_ids(item["clip"]) == expected[clip_k].tolist()
    full = build_dataset({"type": "folder", "root": str(folder_root), **TINY}, "val")
    assert full[0]["clip"].shape == (
        3,
        4,
        24,
        30,
    )  # fully-convolutional: whole 32x40 frame -> 24x30


def test_list_layout_ucf_style(folder_root, tmp_path):
    (tmp_path / "classInd.txt").write_text("1 cat\n2 dog\n3 eel\n")
    (tmp_path / "trainlist01.txt").write_text(
        "# UCF101-style\ntrain/cat/c1.mp4 1\ntrain/dog/d1.mp4 2\n"
    )
    (tmp_path / "testlist01.txt").write_text("val/cat/c3.mp4\nval/dog/d2.mp4\n")  # path only
    cfg = {
        "type": "list",
        "root": str(folder_root),
        "annotations": {
            "train": str(tmp_path / "trainlist01.txt"),
            "test": str(tmp_path / "testlist01.txt"),
        },
        "classes": str(tmp_path / "classInd.txt"),
        **TINY,
    }
    train = build_dataset(cfg, "train")
    assert isinstance(train, VideoListDataset) and train.classes == ["cat", "dog", "eel"]
    assert train.targets == [0, 1]  # 1-based ids of classInd -> positions
    test = build_dataset(cfg, "test")
    assert test.targets == [0, 1]  # from the parent folder names
    assert test[0]["clip"].shape == (3, 4, 24, 30)
    # names instead of ids, plain 0-based labels without a class index
    (tmp_path / "names.txt").write_text("train/cat/c1.mp4 dog\n")
    assert VideoListDataset(
        tmp_path / "names.txt", folder_root, classes=["cat", "dog"], **parts()
    ).targets == [1]
    (tmp_path / "ids.txt").write_text(f"{folder_root}/train/cat/c2.mp4 4\n")
    plain = VideoListDataset(tmp_path / "ids.txt", **parts())
    assert plain.num_classes == 5 and plain.targets == [4]
    (tmp_path / "nolabel.txt").write_text("train/cat/c1.mp4\n")
    with pytest.raises(ValueError, match="class-index"):
        VideoListDataset(tmp_path / "nolabel.txt", folder_root, **parts())
    (tmp_path / "rawframes.txt").write_text("train/cat/c1.mp4 12 0\n")  # mmaction2 frame lists
    with pytest.raises(ValueError, match="expected 'path label'"):
        VideoListDataset(tmp_path / "rawframes.txt", folder_root, **parts())
    (tmp_path / "unknown.txt").write_text("train/cat/c1.mp4 7\n")
    with pytest.raises(ValueError, match="unknown class"):
        VideoListDataset(tmp_path / "unknown.txt", folder_root, classes=["cat"], **parts())


def test_multilabel_charades_style(folder_root, tmp_path):
    (tmp_path / "train.txt").write_text(
        "train/cat/c1.mp4 0,2\ntrain/cat/c2.mp4 1 3\ntrain/dog/d1.mp4\n"
    )
    (tmp_path / "val.txt").write_text("val/cat/c3.mp4 4, 1\n")
    cfg = {
        "type": "multilabel",
        "root": str(folder_root),
        "annotations": {"train": str(tmp_path / "train.txt"), "val": str(tmp_path / "val.txt")},
        **TINY,
    }
    train = build_dataset(cfg, "train")
    assert isinstance(train, MultiLabelVideoDataset)
    assert train.num_classes == 5  # largest label over both splits + 1
    batch = collate_skip_bad([train[0], train[1], train[2]])
    assert batch["target"].dtype == torch.float32
    assert batch["target"].tolist() == [[1, 0, 1, 0, 0], [0, 1, 0, 1, 0], [0, 0, 0, 0, 0]]
    val = build_dataset(cfg, "val")
    assert val.num_classes == 5 and val.video_target(0).tolist() == [0, 1, 0, 0, 1]
    # Charades-style codes in a class-index file
    (tmp_path / "classes.txt").write_text("c000 Holding some clothes\nc001 Opening a door\n")
    (tmp_path / "codes.txt").write_text("train/cat/c1.mp4 c001;c000\n")
    coded = MultiLabelVideoDataset(
        tmp_path / "codes.txt", folder_root, classes=tmp_path / "classes.txt", **parts()
    )
    assert coded.classes == ["Holding some clothes", "Opening a door"]
    assert coded.video_target(0).tolist() == [1.0, 1.0]


def test_class_index_formats(tmp_path):
    (tmp_path / "k.json").write_text(json.dumps({"b": 1, "a": 0}))
    assert read_class_index(tmp_path / "k.json")[0] == ["a", "b"]
    (tmp_path / "kin.txt").write_text("air drumming\nabseiling\n")  # names with spaces, no ids
    names, tokens = read_class_index(tmp_path / "kin.txt")
    assert names == ["air drumming", "abseiling"] and tokens["1"] == 1
    (tmp_path / "dup.txt").write_text("a\na\n")
    with pytest.raises(ValueError, match="duplicate"):
        read_class_index(tmp_path / "dup.txt")


def test_bad_videos_are_skipped_warned_once_and_counted(bad_root):
    cfg = {"type": "folder", "root": str(bad_root), **TINY}  # min_frames = num_frames = 4
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = build_dataset(cfg, "train")
        items = [data[i] for i in range(len(data))] + [data[0], data[3]]
    names = [os.path.basename(v) for v in data.videos]
    assert names == ["garbage.mp4", "good.mp4", "short.mp4", "truncated.mp4"]
    assert set(data.bad_videos) == {0, 2, 3} and "too short" in data.bad_videos[2]
    bad_warnings = [w for w in caught if issubclass(w.category, BadVideoWarning)]
    assert len(bad_warnings) == 3  # once per bad file, even when asked twice
    for name in ("garbage.mp4", "short.mp4", "truncated.mp4"):
        assert sum(name in str(w.message) for w in bad_warnings) == 1
    assert [it is None for it in items] == [True, False, True, True, True, True]
    batch = collate_skip_bad(items)
    assert batch["skipped"] == 5 and batch["clip"].shape == (1, 3, 4, 16, 16)
    assert batch["index"].tolist() == [1] and batch["target"].tolist() == [0]
    empty = collate_skip_bad([None, None])
    assert empty["clip"] is None and empty["skipped"] == 2 and empty["index"].numel() == 0
    # a smaller minimum accepts the 3-frame video (its last frame is repeated)
    with pytest.warns(BadVideoWarning):
        lenient = build_dataset({**cfg, "min_frames": 2}, "train")
    assert set(lenient.bad_videos) == {0, 3}
    assert frame_ids(lenient[2]["clip"]) == [0, 2, 2, 2]


def test_decode_failure_after_indexing_is_skipped(folder_root, monkeypatch):
    data = build_dataset({"type": "folder", "root": str(folder_root), **TINY}, "train")

    def broken(*args, **kwargs):
        raise RuntimeError("decoder crashed")

    monkeypatch.setattr(video_mod, "open_video", broken)
    with pytest.warns(BadVideoWarning, match="decoder crashed"):
        assert data[0] is None
    assert 0 in data.bad_videos


def test_frame_count_index_is_cached(folder_root, tmp_path, monkeypatch):
    cache = tmp_path / "index.json"
    cfg = {"type": "folder", "root": str(folder_root), "cache": str(cache), **TINY}
    calls = []
    real_probe = index_mod.probe_video

    def counting_probe(path, backend="pyav"):
        calls.append(path)
        return real_probe(path, backend=backend)

    monkeypatch.setattr(index_mod, "probe_video", counting_probe)
    first = build_dataset(cfg, "train")
    assert len(calls) == 3 and cache.is_file()
    entries = json.loads(cache.read_text())["entries"]
    assert {e["num_frames"] for e in entries.values()} == {N}
    for _ in range(3):  # epochs / rebuilt datasets in this process: the memory index
        build_dataset(cfg, "train")
        first[0]
    assert len(calls) == 3
    clear_memory_index()  # a new process: the JSON file
    again = build_dataset(cfg, "train")
    assert len(calls) == 3 and again.frame_counts == first.frame_counts
    # a modified file is probed again
    clear_memory_index()
    make_video(folder_root / "train" / "dog" / "d1.mp4", n=N + 2)
    changed = build_dataset(cfg, "train")
    assert len(calls) == 4 and calls[-1].endswith("d1.mp4")
    assert changed.frame_counts == [N, N, N + 2]
    make_video(folder_root / "train" / "dog" / "d1.mp4")  # restore for other tests
    # the default location is next to the data
    build_dataset({"type": "folder", "root": str(folder_root), **TINY}, "train")
    assert (folder_root / ".nlnet_index.json").is_file()


def test_seeded_augmentation_is_reproducible_per_epoch(folder_root):
    cfg = {"type": "folder", "root": str(folder_root), **TINY}
    a, b = build_dataset(cfg, "train"), build_dataset(cfg, "train")
    keys = [ItemKey.of(7, 0, i) for i in range(3)]
    assert all(torch.equal(a[k]["clip"], b[k]["clip"]) for k in keys)
    epoch0 = [a[k]["clip"] for k in keys]
    epoch1 = [a[ItemKey.of(7, 1, i)]["clip"] for i in range(3)]
    assert any(not torch.equal(x, y) for x, y in zip(epoch0, epoch1))


def test_dataloader_with_a_worker_and_collate(bad_root):
    with pytest.warns(BadVideoWarning):
        data = build_dataset(
            {"type": "folder", "root": str(bad_root), **TINY}, "train", mode="test"
        )
    loader = DataLoader(data, batch_size=6, num_workers=1, collate_fn=collate_skip_bad)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BadVideoWarning)
        batches = list(loader)
    assert sum(b["skipped"] for b in batches) == 9  # 3 bad videos x 3 test clips
    kept = [b for b in batches if b["clip"] is not None]
    assert sum(len(b["index"]) for b in kept) == 3
    assert torch.cat([b["clip_index"] for b in kept]).tolist() == [0, 1, 2]


def test_both_backends_give_the_same_clips(folder_root, require_torchcodec):
    require_torchcodec()
    cfg = {"type": "folder", "root": str(folder_root), **TINY}
    pyav = build_dataset({**cfg, "backend": "pyav"}, "val")
    codec = build_dataset({**cfg, "backend": "torchcodec"}, "val")
    assert codec.backend == "torchcodec" and codec.frame_counts == pyav.frame_counts
    for i in range(len(pyav)):
        assert torch.allclose(pyav[i]["clip"], codec[i]["clip"], atol=2 / 255)


def test_config_errors(folder_root):
    with pytest.raises(ValueError, match="unknown key"):
        build_dataset({"type": "folder", "root": str(folder_root), "frames": 8}, "train")
    with pytest.raises(ValueError, match="data.type: expected one of folder"):
        build_dataset({"type": "hdf5", "root": str(folder_root)}, "train")
    with pytest.raises(ValueError, match="root"):
        build_dataset({"type": "folder"}, "train")
    with pytest.raises(ValueError, match="annotations"):
        build_dataset({"type": "list", "root": str(folder_root)}, "train")
    with pytest.raises(ValueError, match="backend"):
        build_dataset({"type": "folder", "root": str(folder_root), "backend": "x"}, "train")
    with pytest.raises(ValueError, match="does not exist"):
        build_dataset({"type": "folder", "root": str(folder_root)}, "test")
    with pytest.raises(TypeError):
        build_dataset([("type", "folder")], "train")


def test_read_only_data_folder_keeps_the_index_in_the_user_cache(
    folder_root, tmp_path, monkeypatch
):
    monkeypatch.setenv("NLNET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(index_mod.os, "access", lambda *args, **kwargs: False)  # "read-only"
    data = build_dataset({"type": "folder", "root": str(folder_root), **TINY}, "train")
    assert data.cache_file.parent == tmp_path / "cache" / "index"
    assert data.cache_file.is_file()
    entries = json.loads(data.cache_file.read_text())["entries"]
    assert sorted(entries) == sorted(data.videos)


def test_evaluation_counts_skipped_videos_not_their_views(bad_root):
    """3 bad videos of 3 test clips each: the video task's evaluation says 3 skipped (not 9)."""
    from torch import nn

    from nlnet.engine.tasks.video import VideoClassificationTask, VideoEvalConfig

    task = VideoClassificationTask(data={"type": "folder", "root": str(bad_root), **TINY},
                                   evaluation=VideoEvalConfig(clips=3, batch_size=4))  # fmt: skip
    with pytest.warns(BadVideoWarning):
        data = task.build_dataset("train", "test")
    model = nn.Sequential(nn.Conv3d(3, 1, 1), nn.AdaptiveAvgPool3d(1), nn.Flatten())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BadVideoWarning)
        metrics = task.evaluate(model, data, torch.device("cpu"))
    assert metrics["skipped"] == 3 and metrics["video_count"] == 1


def test_animated_gifs_are_clips_of_a_video_folder(tmp_path):
    """A class folder of animated GIFs (TGIF-style) is a folder of clips: decoded frame by
    frame like an mp4 (the frames' red levels number them)."""
    from PIL import Image

    for cls in ("cat", "dog"):
        frames = np.zeros((N, H, W, 3), np.uint8)
        for i in range(N):
            frames[i, ..., 0], frames[i, ..., 1] = level(i), 90
        images = [Image.fromarray(f) for f in frames]
        (tmp_path / "train" / cls).mkdir(parents=True)
        images[0].save(tmp_path / "train" / cls / "a.GIF", save_all=True,
                       append_images=images[1:], duration=40, loop=0)  # fmt: skip
    train = build_dataset({"type": "folder", "root": str(tmp_path), **TINY}, "train")
    assert train.classes == ["cat", "dog"] and train.frame_counts == [N, N]
    ids = frame_ids(train[1]["clip"])
    assert all(b - a == 2 for a, b in zip(ids, ids[1:])) and 0 <= ids[0] <= N - 8
