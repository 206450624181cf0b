"""The video dataset composed from parts: sampler, decoder, transform, bad-video policy, seeding."""

from __future__ import annotations

import warnings

import pytest
import torch

from nlnet.data.datasets import VideoClipDataset
from nlnet.data.items import BadVideoWarning, ClipItem
from nlnet.data.policy import BadVideoPolicy
from nlnet.data.sampling import ClipSampler
from nlnet.data.seeding import item_generator, item_seed
from nlnet.engine.distributed import item_seed as engine_item_seed


class FrameNumberDecoder:
    """A decoder part that needs no file: frame ``i`` is filled with the value ``i``."""

    backend = "pyav"
    cache = None

    def __call__(self, path, indices):
        return indices.to(torch.uint8)[:, None, None, None].expand(-1, 4, 4, 3).clone()


def _dataset(tmp_path, **kwargs) -> VideoClipDataset:
    videos = []
    for name in ("a", "b"):  # files must exist for the frame-count index; never decoded here
        (tmp_path / f"{name}.mp4").write_bytes(b"")
        videos.append(tmp_path / f"{name}.mp4")
    ds = VideoClipDataset(videos, [0, 1], ["x", "y"], cache_file=None, decoder=FrameNumberDecoder(),
                          mean=(0, 0, 0), std=(1, 1, 1), test_scale=4, **kwargs)  # fmt: skip
    return ds


def test_a_replaced_decoder_part_feeds_the_sampler_and_transform(tmp_path, monkeypatch):
    import nlnet.data.frame_index as index_mod
    from nlnet.data.video import VideoInfo

    monkeypatch.setattr(
        index_mod, "probe_video", lambda p, backend="pyav": VideoInfo(30, 10.0, 4, 4)
    )
    ds = _dataset(tmp_path, mode="test", num_frames=3, stride=2, test_clips=2)
    assert isinstance(ds.sampler, ClipSampler) and ds.sampler.clips_per_video == 2 and len(ds) == 4
    item = ds[1]  # video 0, second test clip
    assert isinstance(item, ClipItem) and item.index == 0 and item.clip_index == 1
    frames = (item.clip[0, :, 0, 0] * 255).round().long().tolist()  # the decoder's frame numbers
    assert frames == ds.sampler(30, 1).tolist() and frames[1] - frames[0] == 2


def test_sampler_modes_and_errors():
    g = torch.Generator().manual_seed(0)
    train = ClipSampler(4, 2, "train")
    assert train.clips_per_video == 1 and len(train(50, generator=g)) == 4
    test = ClipSampler(4, 1, "test", num_clips=3)
    starts = [int(test(30, k)[0]) for k in range(3)]
    assert starts == sorted(starts) and len(set(starts)) == 3
    with pytest.raises(ValueError, match="mode"):
        ClipSampler(4, 1, "val")
    with pytest.raises(ValueError, match="stride"):
        ClipSampler(4, 0)


def test_bad_video_policy_warns_once_and_names_the_cause():
    index = [{"num_frames": 2, "fps": 1.0, "error": None}, {"num_frames": 0, "error": "broken"}]
    with pytest.warns(BadVideoWarning) as rec:
        policy = BadVideoPolicy(["/v/a.mp4", "/v/b.mp4"], index, min_frames=4)
    assert len(rec) == 2 and "too short" in policy.bad[0] and policy.bad[1] == "broken"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # already warned in this process: silent
        assert policy.is_bad(0) and policy.is_bad(1)
    assert "none of the 2 videos can be decoded" in policy.unusable_reason()
    assert BadVideoPolicy(["/v/a.mp4"], index[:1], min_frames=2).unusable_reason() is None


def test_one_per_item_seed_for_dataset_and_engine():
    assert engine_item_seed is item_seed
    assert item_seed(1, 2, 3) == item_seed(1, 2, 3) != item_seed(1, 2, 4)
    a, b = item_generator(1, 2, 3), item_generator(1, 2, 3)
    assert torch.equal(torch.rand(3, generator=a), torch.rand(3, generator=b))
