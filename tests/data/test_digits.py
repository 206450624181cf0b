"""The built-in digits task: deterministic, balanced, disjoint splits, learnable after mp4."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nlnet.data.digits.cache import prepare_digits, read_manifest
from nlnet.data.digits.video import (
    COLOR_NAMES,
    DigitsTaskConfig,
    generate_split,
    load_digit_bank,
    split_digit_indices,
)

TINY = dict(num_frames=3, size=32, num_train=12, num_val=5, num_test=6, distractors=1)


def test_same_seed_same_clips_other_seed_other_clips():
    cfg = DigitsTaskConfig(**TINY, seed=3)
    a, b = generate_split(cfg, "train"), generate_split(cfg, "train")
    assert np.array_equal(a.clips, b.clips)
    assert np.array_equal(a.labels, b.labels)
    c = generate_split(DigitsTaskConfig(**TINY, seed=4), "train")
    assert not np.array_equal(a.clips, c.clips)
    assert a.clips.shape == (12, 3, 32, 32, 3) and a.clips.dtype == np.uint8


@pytest.mark.parametrize("n, k", [(23, 4), (7, 3), (5, 2)])
def test_labels_are_balanced(n, k):
    for task in ("pointer", "match", "same"):
        cfg = DigitsTaskConfig(**{**TINY, "num_train": n}, num_choices=k, task=task)
        assert cfg.num_classes == {"pointer": 4, "match": k, "same": 2}[task]
        counts = np.bincount(generate_split(cfg, "train").labels, minlength=cfg.num_classes)
        assert counts.max() - counts.min() <= 1
        assert counts.sum() == n


def test_digit_image_pools_are_disjoint_and_cover_everything():
    _, labels = load_digit_bank(8)
    pools = split_digit_indices(labels, (0.6, 0.15, 0.25), seed=0)
    sets = {k: set(v.tolist()) for k, v in pools.items()}
    assert not sets["train"] & sets["val"]
    assert not sets["train"] & sets["test"]
    assert not sets["val"] & sets["test"]
    assert len(sets["train"] | sets["val"] | sets["test"]) == len(labels) == 1797
    for pool in pools.values():  # stratified: every class in every split
        assert set(np.unique(labels[pool])) == set(range(10))


def test_clips_only_use_their_split_images():
    cfg = DigitsTaskConfig(**TINY)
    used = {
        s: {i for ids in generate_split(cfg, s).digit_ids for i in ids}
        for s in ("train", "val", "test")
    }
    assert not used["train"] & used["test"]
    assert not used["train"] & used["val"]
    assert not used["val"] & used["test"]


PALETTE = np.array(
    [[1, 0.15, 0.15], [0.15, 1, 0.15], [0.3, 0.4, 1], [1, 0.95, 0.1], [1, 0.2, 1], [0.1, 1, 1]]
)


def _colour_of(patch: np.ndarray) -> int:
    """Palette index of the bright pixels of an (h, w, 3) uint8 patch."""
    px = patch.reshape(-1, 3).astype(float)
    colour = px[px.max(1) > 128].mean(0) / 255.0
    return int(np.argmin(((PALETTE - colour) ** 2).sum(1)))


def test_pointer_task_target_is_the_class_of_the_digit_in_the_markers_colour():
    cfg = DigitsTaskConfig(**TINY, task="pointer", noise=0.0, digits=(1, 3, 5, 7, 9))
    assert cfg.num_classes == 5 and cfg.class_names == ["1", "3", "5", "7", "9"]
    _, bank_labels = load_digit_bank(cfg.digit_size)
    data = generate_split(cfg, "train")
    K = cfg.num_choices
    for i in range(len(data.labels)):
        ids = data.digit_ids[i]
        choices = [bank_labels[j] for j in ids[:K]]  # the last frame's digits come first
        target = cfg.digits[data.labels[i]]
        assert len(set(choices)) == K and target in choices
        assert all(bank_labels[j] in cfg.digits for j in ids)
        y0, x0, y1, x1 = data.cue_box[i]  # the marker: a filled square in frame 0
        assert _colour_of(data.clips[i, 0, y0:y1, x0:x1]) == data.cue[i]
        y0, x0, y1, x1 = data.match_box[i]  # the target digit wears the marker's colour
        assert _colour_of(data.clips[i, -1, y0:y1, x0:x1]) == data.cue[i]
        # ... and no other last-frame digit does (all K colours differ)
        colours = [_colour_of(data.clips[i, -1, y0:y1, x0:x1]) for (y0, x0, y1, x1) in
                   [data.match_box[i]]]  # fmt: skip
        assert colours == [data.cue[i]]


@pytest.mark.parametrize("match", ["class", "image"])
def test_match_task_target_is_the_colour_of_the_cue_class(match):
    cfg = DigitsTaskConfig(**TINY, task="match", match=match, noise=0.0, digits=tuple(range(10)))
    assert cfg.num_classes == cfg.num_choices
    _, bank_labels = load_digit_bank(cfg.digit_size)
    data = generate_split(cfg, "train")
    K = cfg.num_choices
    for i in range(len(data.labels)):
        ids = data.digit_ids[i]
        choices, cue = ids[:K], ids[K]  # last-frame digits first, then the cue
        slot = [k for k in range(K) if bank_labels[choices[k]] == data.cue[i]]
        assert len(slot) == 1  # exactly one match
        assert bank_labels[cue] == data.cue[i]
        assert (cue == choices[slot[0]]) == (match == "image")
        y0, x0, y1, x1 = data.match_box[i]
        assert _colour_of(data.clips[i, -1, y0:y1, x0:x1]) == data.labels[i]
        y0, x0, y1, x1 = data.cue_box[i]  # the cue has its white box in frame 0
        assert data.clips[i, 0, y0 - 1, x0 - 1 : x1 + 1].min() > 200


def test_same_task_target_is_whether_the_classes_agree():
    cfg = DigitsTaskConfig(**TINY, task="same", noise=0.0)
    assert cfg.num_classes == 2
    _, bank_labels = load_digit_bank(cfg.digit_size)
    data = generate_split(cfg, "train")
    for i in range(len(data.labels)):
        last, cue = data.digit_ids[i][0], data.digit_ids[i][1]
        assert last != cue  # never the same scan
        assert (bank_labels[last] == bank_labels[cue]) == bool(data.labels[i])
        assert bank_labels[cue] == data.cue[i]
        y0, x0, y1, x1 = data.cue_box[i]  # the cue has its white box in frame 0
        assert data.clips[i, 0, y0 - 1, x0 - 1 : x1 + 1].min() > 200


def test_bad_configurations_are_refused():
    with pytest.raises(ValueError, match="num_choices"):
        DigitsTaskConfig(num_choices=9, task="pointer")
    with pytest.raises(ValueError, match="num_frames"):
        DigitsTaskConfig(num_frames=1)
    with pytest.raises(ValueError, match="too small"):
        DigitsTaskConfig(size=20, num_choices=4, task="pointer")
    with pytest.raises(ValueError, match="match"):
        DigitsTaskConfig(match="colour")
    with pytest.raises(ValueError, match="digits"):
        DigitsTaskConfig(digits=(1, 1, 2, 3))
    with pytest.raises(ValueError, match="num_choices"):
        DigitsTaskConfig(digits=(1, 2, 3), num_choices=4, task="pointer")
    assert DigitsTaskConfig(digits=(1, 7)).num_classes == 2  # "same" needs no choices
    with pytest.raises(ValueError, match="task"):
        DigitsTaskConfig(task="count")
    assert DigitsTaskConfig(task="match").class_names[1] == f"1_{COLOR_NAMES[1]}"
    with pytest.raises(ValueError, match="split"):
        DigitsTaskConfig().split_size("holdout")


def test_mp4_cache_roundtrip_and_reuse(tmp_path):
    from nlnet.data.video.builder import VideoFolderDataset, build_parts
    from nlnet.data.video.config import VideoDataConfig
    from nlnet.data.video_io.backends import open_video

    cfg = DigitsTaskConfig(**TINY, seed=1)
    root = prepare_digits(cfg, tmp_path / "digits")
    manifest = read_manifest(root)
    assert manifest["fingerprint"] == cfg.fingerprint()
    assert manifest["classes"] == ["0_different", "1_same"]
    stamp = (root / "manifest.json").stat().st_mtime_ns
    assert prepare_digits(cfg, root) == root  # cached: nothing rewritten
    assert (root / "manifest.json").stat().st_mtime_ns == stamp

    data = generate_split(cfg, "test")
    rec = manifest["splits"]["test"][0]
    with open_video(root / rec["file"]) as reader:
        decoded = reader.read_all().numpy()  # (T, H, W, 3) uint8
    assert decoded.shape == data.clips[0].shape
    err = np.abs(decoded.astype(int) - data.clips[0].astype(int))
    assert err.mean() < 2.0 and err.max() <= 16  # near-lossless H.264 (yuv444p, crf 0)

    parts = build_parts(VideoDataConfig(num_frames=3, stride=1, test_scale=32), False, clips=1)
    ds = VideoFolderDataset(root, "test", cache=False, **parts)
    assert ds.classes == manifest["classes"]
    assert sorted(ds.targets) == sorted(r["label"] for r in manifest["splits"]["test"])
    assert json.loads((root / "manifest.json").read_text())["config"]["seed"] == 1


def test_pretraining_frames():
    from nlnet.data.digits.video import generate_frames

    cfg = DigitsTaskConfig(**TINY)
    frames, labels = generate_frames(cfg, 20, "train")
    again, _ = generate_frames(cfg, 20, "train")
    assert frames.shape == (20, 32, 32, 3) and frames.dtype == np.uint8
    assert np.array_equal(frames, again)
    assert labels.min() >= 0 and labels.max() < len(cfg.digits)
    _, both = generate_frames(cfg, 20, "train", colour_labels=True)
    assert np.array_equal(both // 7, labels) and both.max() < 7 * len(cfg.digits)
