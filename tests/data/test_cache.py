"""The decoded-clip cache (``data.clip_cache``): memory LRU, shared disk folder, the dataset path."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from nlnet.data.seeding import ItemKey, SeededDataset
from nlnet.data.video.builder import build_dataset, clear_memory_index, collate_skip_bad
from nlnet.data.video_io import backends as video_mod
from nlnet.data.video_io.backends import write_video
from nlnet.data.video_io.clip_cache import (
    DiskClipCache,
    MemoryClipCache,
    build_clip_cache,
    clip_key,
)

TINY = {"type": "folder", "num_frames": 4, "stride": 1, "train_scale": [20, 24], "crop": 16,
        "test_scale": 20, "mean": [0, 0, 0], "std": [1, 1, 1],
        "cache": False}  # fmt: skip


def _frames(n: int = 4, value: int = 7) -> torch.Tensor:
    return torch.full((n, 6, 8, 3), value, dtype=torch.uint8)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    base = tmp_path_factory.mktemp("clips")
    rng = np.random.default_rng(0)
    for split, names in (("train", ("a1", "a2", "b1")), ("val", ("a3", "b2"))):
        for name in names:
            frames = rng.integers(0, 255, (6, 24, 28, 3), dtype=np.uint8)
            write_video(base / split / name[0] / f"{name}.mp4", frames, fps=10)
    return base


def test_memory_cache_is_an_lru_bounded_in_bytes():
    one = _frames().numel()  # bytes of one clip
    cache = MemoryClipCache(max_bytes=2 * one)
    assert cache.get("a") is None and cache.misses == 1
    assert cache.put("a", _frames(value=1)) and cache.put("b", _frames(value=2))
    assert int(cache.get("a")[0, 0, 0, 0]) == 1  # "a" is now the most recent
    assert cache.put("c", _frames(value=3))  # evicts "b", the least recently used
    assert cache.get("b") is None and cache.get("a") is not None and cache.get("c") is not None
    assert cache.nbytes == 2 * one and len(cache) == 2 and cache.hits == 3
    assert not cache.put("big", _frames(n=12))  # larger than the whole bound: not kept
    with pytest.raises(TypeError, match="uint8"):
        cache.put("f", _frames().float())
    clone = pickle.loads(pickle.dumps(cache))  # what a spawned DataLoader worker receives
    assert len(clone) == 0 and clone.nbytes == 0 and clone.put("a", _frames())


def test_disk_cache_is_shared_atomic_and_bounded(tmp_path):
    one = _frames().numel() + 128
    a = DiskClipCache(tmp_path / "c", max_bytes=2 * one)
    b = DiskClipCache(tmp_path / "c", max_bytes=2 * one)  # another worker or rank
    assert a.put("k1", _frames(value=5))
    torch.testing.assert_close(b.get("k1"), _frames(value=5))
    assert not list((tmp_path / "c").glob(".tmp-*"))  # written to a temporary name, renamed
    assert a.put("k2", _frames()) and not a.put("k3", _frames())  # the bound stops writes
    assert DiskClipCache(tmp_path / "c", max_bytes=10 * one).nbytes == os.path.getsize(
        tmp_path / "c" / "k1.npy"
    ) + os.path.getsize(tmp_path / "c" / "k2.npy")
    (tmp_path / "c" / "k1.npy").write_bytes(b"\x93NUMPY damaged")
    assert b.get("k1") is None  # a damaged file is a miss, not an error
    np.save(tmp_path / "c" / "k4.npy", np.zeros((2, 2), np.float32))
    assert b.get("k4") is None  # a foreign array too


def test_key_follows_file_indices_backend_and_size(tmp_path):
    f = tmp_path / "v.bin"
    f.write_bytes(b"x" * 10)
    k = clip_key(f, [0, 1, 2])
    assert k == clip_key(str(f), torch.tensor([0, 1, 2]))
    others = {clip_key(f, [0, 1, 3]), clip_key(f, [0, 1, 2], backend="torchcodec"),
              clip_key(f, [0, 1, 2], size=(16, 16))}  # fmt: skip
    assert k not in others and len(others) == 3
    f.write_bytes(b"y" * 11)  # an edited file
    assert clip_key(f, [0, 1, 2]) != k


def test_key_of_a_file_name_that_is_not_utf8(tmp_path, monkeypatch):
    """A Latin-1 name from a Windows zip (``caf\\xe9.mp4``) decodes to a surrogate escape in
    Python: its key is computed like any other, so the video is not taken for a bad one (the
    file's stat is the real file's, so no file system has to store the name)."""
    from nlnet.data.video_io import clip_cache

    real = tmp_path / "cafe.mp4"
    real.write_bytes(b"x" * 10)
    stat = os.stat(real)
    monkeypatch.setattr(clip_cache.os, "stat", lambda p: stat)
    odd = tmp_path / os.fsdecode(b"caf\xe9.mp4")
    assert clip_key(odd, [0, 1]) != clip_key(real, [0, 1])  # differs by name only


def test_build_clip_cache_values(tmp_path):
    assert build_clip_cache(None) is None
    assert isinstance(build_clip_cache("memory", max_mb=1), MemoryClipCache)
    disk = build_clip_cache("disk", max_mb=1, directory=tmp_path / "d")
    assert isinstance(disk, DiskClipCache) and disk.max_bytes == 2**20
    with pytest.raises(ValueError, match="clip_cache: expected null, 'memory' or 'disk'"):
        build_clip_cache("ram")
    with pytest.raises(ValueError, match="clip_cache_mb"):
        build_clip_cache("memory", max_mb=-1)


def _count_opens(monkeypatch) -> list[str]:
    opened: list[str] = []
    real = video_mod.open_video

    def counting(path, *args, **kwargs):
        opened.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(video_mod, "open_video", counting)
    return opened


@pytest.mark.parametrize("kind", ["memory", "disk"])
def test_dataset_decodes_each_clip_once_with_equal_items(root, tmp_path, monkeypatch, kind):
    clear_memory_index()
    cfg = {**TINY, "root": str(root), "clip_cache": kind, "clip_cache_dir": str(tmp_path)}
    plain = build_dataset({**TINY, "root": str(root)}, "val", clips=2)
    cached = build_dataset(cfg, "val", clips=2)
    opened = _count_opens(monkeypatch)
    first = [cached[i] for i in range(len(cached))]
    assert len(opened) == len(cached)  # 2 videos x 2 test clips: every view decoded once
    second = [cached[i] for i in range(len(cached))]
    assert len(opened) == len(cached)  # the second pass reads no file
    assert cached.clip_cache.hits == len(cached)
    for a, b, c in zip(first, second, (plain[i] for i in range(len(plain)))):
        torch.testing.assert_close(a["clip"], b["clip"])
        torch.testing.assert_close(a["clip"], c["clip"])  # the cache changes no value


def test_disk_cache_with_dataloader_workers_matches_the_uncached_batches(root, tmp_path):
    clear_memory_index()
    cfg = {**TINY, "root": str(root)}
    cached = build_dataset({**cfg, "clip_cache": "disk", "clip_cache_dir": str(tmp_path)}, "train")
    plain = build_dataset(cfg, "train")

    def batches(ds, workers):  # the training loop's per-item keys: the same random clips
        keys = [ItemKey.of(3, 0, i) for i in range(len(ds))]
        loader = DataLoader(SeededDataset(ds), batch_size=3, sampler=keys, num_workers=workers,
                            collate_fn=collate_skip_bad)  # fmt: skip
        return [b["clip"] for b in loader]

    ref = batches(plain, 0)
    for _ in range(2):  # the workers fill the shared folder, then read from it
        for x, y in zip(batches(cached, 2), ref):
            torch.testing.assert_close(x, y)
    assert len(list(tmp_path.glob("*.npy"))) == len(plain)  # 3 clips (6 frames, 4 taken at random)


def test_unknown_cache_kind_is_a_config_error(root):
    with pytest.raises(ValueError, match="clip_cache"):
        build_dataset({**TINY, "root": str(root), "clip_cache": "ssd"}, "train")


@pytest.fixture(scope="module")
def gops(tmp_path_factory):
    """Two 40-frame videos with keyframes every 8 frames and B-frames (seeks land mid-video)."""
    base = tmp_path_factory.mktemp("gops")
    rng = np.random.default_rng(1)
    for name in ("a/1", "b/2"):
        frames = rng.integers(0, 255, (40, 24, 28, 3), dtype=np.uint8)
        write_video(base / "train" / f"{name}.mp4", frames, fps=10, gop_size=8, bframes=2)
    return base


@pytest.mark.parametrize("kind", ["memory", "disk"])
def test_video_unit_decodes_each_video_once_with_equal_clips(gops, tmp_path, monkeypatch, kind):
    clear_memory_index()
    cfg = {**TINY, "root": str(gops), "num_frames": 8, "sampling": "segments"}
    plain = build_dataset(cfg, "train")
    cached = build_dataset({**cfg, "clip_cache": kind, "clip_cache_unit": "video",
                            "clip_cache_dir": str(tmp_path)}, "train")  # fmt: skip
    opened = _count_opens(monkeypatch)
    for epoch in range(3):  # other random segment frames every epoch: never the same indices
        for i in range(len(plain)):
            key = ItemKey.of(5, epoch, i)
            torch.testing.assert_close(cached[key]["clip"], plain[key]["clip"], rtol=0, atol=0)
    assert opened.count(plain.videos[0]) == 3 + 1  # the plain dataset's 3, the cache's 1
    assert cached.clip_cache.misses == 2 and cached.clip_cache.hits == 4
    if kind == "disk":
        assert len(list(tmp_path.glob("*.npy"))) == 2  # one entry per video


@pytest.mark.parametrize("backend", ["pyav", "torchcodec"])
def test_video_unit_cuts_any_indices_as_the_decoder_reads_them(
    gops, tmp_path, backend, require_torchcodec
):
    from nlnet.data.video_io.decoder import ClipDecoder

    if backend == "torchcodec":
        require_torchcodec()
    video = str(next((gops / "train" / "a").glob("*.mp4")))
    plain = ClipDecoder(backend)
    for cache in (MemoryClipCache(2**24), DiskClipCache(tmp_path, 2**24)):
        whole = ClipDecoder(backend, cache=cache, unit="video")
        for idx in ([0], [9, 3, 3, 39], list(range(17, 25)), [38, 40, 45]):  # past the end: last
            idx = torch.tensor(idx)
            assert torch.equal(whole(video, idx), plain(video, idx))
        assert cache.misses == 1 and cache.hits == 3
    with pytest.raises(ValueError, match="unit"):
        ClipDecoder(unit="frame")


def test_video_unit_decodes_clip_by_clip_where_the_cache_has_no_room(gops, tmp_path):
    from nlnet.data.video_io.decoder import ClipDecoder

    videos = sorted(str(p) for p in gops.rglob("*.mp4"))
    one = 40 * 24 * 28 * 3  # bytes of one decoded video
    memory = MemoryClipCache(max_bytes=one + 10)  # room for the first video only
    disk = DiskClipCache(tmp_path, max_bytes=one + 200)
    idx = torch.tensor([1, 11, 21, 31])
    for cache in (memory, disk):
        whole = ClipDecoder(cache=cache, unit="video")
        for _ in range(2):
            for v in videos:
                assert torch.equal(whole(v, idx), ClipDecoder()(v, idx))
        assert cache.nbytes in (one, one + 128) and cache.hits == 1 and cache.misses == 3
    assert len(memory) == 1  # nothing evicted: the first video stays, the second is not stored
    key = clip_key(videos[0], None)
    assert key not in {clip_key(videos[0], list(range(40))), clip_key(videos[1], None)}
    (tmp_path / f"{key}.npy").write_bytes(b"\x93NUMPY damaged")
    assert disk.get_frames(key, idx) is None  # a damaged whole-video entry is a miss


def test_unknown_cache_unit_is_a_config_error(root):
    from nlnet.data.video.config import VideoDataConfig
    from nlnet.data.video_io.clip_cache import CACHE_UNITS

    # the config's literal choices (it imports no torch) are the decoder's units
    assert CACHE_UNITS == ("clip", "video")
    assert all(VideoDataConfig(clip_cache_unit=u).clip_cache_unit == u for u in CACHE_UNITS)
    with pytest.raises(ValueError, match="data.clip_cache_unit: expected 'clip' or 'video'"):
        build_dataset({**TINY, "root": str(root), "clip_cache_unit": "frame"}, "train")


def test_video_unit_falls_back_to_the_clip_where_the_whole_video_fails(gops, monkeypatch):
    from nlnet.data.video_io.decoder import ClipDecoder
    from nlnet.data.video_io.reader import VideoDecodeError, VideoReader

    video = str(next((gops / "train" / "a").glob("*.mp4")))
    idx = torch.tensor([2, 5, 9])
    expected = ClipDecoder()(video, idx)
    calls = []

    def damaged_tail(self):  # frames past the clips cannot be decoded
        calls.append(1)
        raise VideoDecodeError(self.path, "decoding failed: invalid data")

    monkeypatch.setattr(VideoReader, "read_all", damaged_tail)
    whole = ClipDecoder(cache=MemoryClipCache(2**24), unit="video")
    for _ in range(2):
        assert torch.equal(whole(video, idx), expected)  # the clip itself decodes
    assert len(calls) == 1 and len(whole.cache) == 0  # tried whole once, then clip by clip


def test_a_damaged_disk_entry_is_a_miss_removed_and_written_again(tmp_path):
    cache = DiskClipCache(tmp_path, max_bytes=2**20)
    frames = _frames()
    assert cache.put("k", frames)
    good = (tmp_path / "k.npy").read_bytes()
    newline = good.index(b"\n")  # the end of the .npy header: numpy's parser fails oddly on it
    (tmp_path / "k.npy").write_bytes(good[:newline] + b"X" + good[newline + 1 :])
    assert cache.get_frames("k", torch.tensor([0, 1])) is None
    assert not (tmp_path / "k.npy").exists()  # gone, so that it is written again
    assert cache.put("k", frames) and torch.equal(cache.get("k"), frames)


def test_video_unit_in_a_loader_worker_reads_the_memory_cache_and_stores_nothing(gops, monkeypatch):
    import torch.utils.data as tud

    from nlnet.data.video_io.decoder import ClipDecoder
    from nlnet.data.video_io.reader import VideoReader

    videos = sorted(str(p) for p in gops.rglob("*.mp4"))
    idx = torch.tensor([3, 13, 23])
    decoder = ClipDecoder(cache=MemoryClipCache(2**24), unit="video")
    first = decoder(videos[0], idx)  # stored by the training process
    whole = []
    real = VideoReader.read_all
    monkeypatch.setattr(VideoReader, "read_all", lambda r: whole.append(1) or real(r))
    monkeypatch.setattr(tud, "get_worker_info", lambda: object())  # as in a worker
    assert torch.equal(decoder(videos[0], idx), first)  # a hit on what the parent stored
    assert torch.equal(decoder(videos[1], idx), ClipDecoder()(videos[1], idx))
    assert not whole and len(decoder.cache) == 1  # the miss decoded its clip only


def test_video_unit_with_an_unknown_frame_size_stores_nothing_that_does_not_fit(gops, monkeypatch):
    from nlnet.data.video_io.decoder import ClipDecoder
    from nlnet.data.video_io.pyav import PyAVReader
    from nlnet.data.video_io.reader import VideoInfo

    videos = sorted(str(p) for p in gops.rglob("*.mp4"))
    monkeypatch.setattr(PyAVReader, "info",
                        property(lambda r: VideoInfo(r.num_frames, 10.0, 0, 0)))  # fmt: skip
    one = 40 * 24 * 28 * 3
    cache = MemoryClipCache(max_bytes=one + 10)
    decoder = ClipDecoder(cache=cache, unit="video")
    idx = torch.tensor([0, 20, 39])
    for v in videos * 2:
        assert torch.equal(decoder(v, idx), ClipDecoder()(v, idx))
    assert len(cache) == 0 and cache.hits == 0  # size unknown: decoded clip by clip
