"""The video dataset composed from parts: sampler, decoder, transform, bad-video policy, seeding."""

from __future__ import annotations

import warnings

import pytest
import torch

from nlnet.data.seeding import ItemKey, SeededDataset, item_seed
from nlnet.data.video.batches import BadVideoWarning
from nlnet.data.video.builder import VideoClipDataset, build_parts
from nlnet.data.video.config import VideoDataConfig
from nlnet.data.video.policy import BadVideoPolicy
from nlnet.data.video.sampling import RandomClipSampler, UniformClipSampler
from nlnet.engine.distributed import ResumableDistributedSampler


class FrameNumberDecoder:
    """A decoder part that needs no file: frame ``i`` is filled with the value ``i``; every
    video has 30 frames."""

    backend = "pyav"
    cache = None

    def __call__(self, path, indices):
        return indices.to(torch.uint8)[:, None, None, None].expand(-1, 4, 4, 3).clone()

    def index(self, videos, index_file=None):
        return [{"num_frames": 30, "fps": 10.0, "error": None} for _ in videos]


def _dataset(training: bool, **cfg) -> VideoClipDataset:
    data = VideoDataConfig(mean=(0, 0, 0), std=(1, 1, 1), test_scale=4, train_scale=(4, 4),
                           crop=4, **cfg)  # fmt: skip
    parts = build_parts(data, training, clips=2)
    parts["decoder"] = FrameNumberDecoder()
    return VideoClipDataset([("/v/a.mp4", 0), ("/v/b.mp4", 1)], ["x", "y"], **parts)


def _frame_numbers(item) -> list[int]:
    return (item["clip"][0, :, 0, 0] * 255).round().long().tolist()  # the decoder's numbers


def test_a_replaced_decoder_part_feeds_the_sampler_and_transform():
    ds = _dataset(False, num_frames=3, stride=2)
    assert isinstance(ds.sampler, UniformClipSampler) and ds.sampler.clips_per_video == 2
    assert len(ds) == 4
    item = ds[1]  # video 0, second test clip
    assert set(item) == {"clip", "target", "index", "clip_index"}
    assert item["index"] == 0 and item["clip_index"] == 1 and item["target"] == 0
    frames = _frame_numbers(item)
    assert frames == ds.sampler(30, 1).tolist() and frames[1] - frames[0] == 2


def test_training_items_draw_from_one_generator_per_item():
    ds = _dataset(True, num_frames=3, stride=2, flip=False)
    assert isinstance(ds.sampler, RandomClipSampler) and len(ds) == 2
    key = ItemKey.of(5, 1, 1)
    # the item's frames are the random sampler's draw from the key's generator
    expected = ds.sampler(30, 0, key.generator()).tolist()
    assert _frame_numbers(ds[key]) == expected == _frame_numbers(SeededDataset(ds)[key])
    # another epoch's key draws again; a plain index draws from the global generator
    assert (
        _frame_numbers(ds[ItemKey.of(5, 2, 1)])
        == ds.sampler(30, 0, ItemKey.of(5, 2, 1).generator()).tolist()
    )
    torch.manual_seed(key.seed)
    assert _frame_numbers(ds[1]) == expected


def test_sampler_policies_and_errors():
    g = torch.Generator().manual_seed(0)
    train = RandomClipSampler(4, 2)
    assert train.clips_per_video == 1 and len(train(50, generator=g)) == 4
    test = UniformClipSampler(4, 1, num_clips=3)
    starts = [int(test(30, k)[0]) for k in range(3)]
    assert starts == sorted(starts) and len(set(starts)) == 3
    with pytest.raises(ValueError, match="test_clips"):
        UniformClipSampler(4, 1, num_clips=0)
    with pytest.raises(ValueError, match="stride"):
        RandomClipSampler(4, 0)


def test_bad_video_policy_warns_once_and_names_the_cause():
    index = [{"num_frames": 2, "fps": 1.0, "error": None}, {"num_frames": 0, "error": "broken"},
             {"num_frames": 9, "fps": 1.0, "error": None}]  # fmt: skip
    videos = ["/v/a.mp4", "/v/b.mp4", "/v/ok.mp4"]
    with pytest.warns(BadVideoWarning) as rec:
        policy = BadVideoPolicy(min_frames=4).bind(videos, index, clip_len=8)
    assert len(rec) == 2 and "too short" in policy.bad[0] and policy.bad[1] == "broken"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # already warned in this process: silent
        assert policy.is_bad(0) and policy.is_bad(1) and not policy.is_bad(2)
    assert policy.unusable_reason() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none usable: no warning per file, the one-line reason
        none = BadVideoPolicy(min_frames=4).bind(videos[:2], index[:2], clip_len=8)
    assert "none of the 2 videos can be decoded" in none.unusable_reason()
    assert BadVideoPolicy(2).bind(["/v/a.mp4"], index[:1], clip_len=8).unusable_reason() is None
    with pytest.warns(BadVideoWarning, match="min_frames=3"):  # default: one clip's length
        assert BadVideoPolicy().bind(["/v/c.mp4", "/v/ok.mp4"], [index[0], index[2]],
                                     clip_len=3).min_frames == 3  # fmt: skip


def test_many_bad_videos_are_named_up_to_a_few_then_counted():
    from nlnet.data.video.policy import NAMED

    n_short, n_broken = 150, 42
    index = [{"num_frames": 2, "fps": 1.0, "error": None}] * n_short
    index += [{"num_frames": 0, "error": "broken"}] * n_broken + [{"num_frames": 50, "error": None}]
    videos = [f"/v/{i}.mp4" for i in range(len(index))]
    with pytest.warns(BadVideoWarning) as rec:
        policy = BadVideoPolicy(min_frames=4).bind(videos, index, clip_len=8)
    assert len(rec) == NAMED + 1 and len(policy.bad) == n_short + n_broken
    rest = n_short + n_broken - NAMED
    assert str(rec[-1].message) == (
        f"skipping {rest} more videos ({n_short - NAMED} too short, {n_broken} unreadable)"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert policy.is_bad(len(index) - 2)  # counted, not warned again


def test_one_per_item_key_for_dataset_and_engine():
    assert item_seed(1, 2, 3) == item_seed(1, 2, 3) != item_seed(1, 2, 4)
    a, b = ItemKey.of(1, 2, 3).generator(), ItemKey.of(1, 2, 3).generator()
    assert torch.equal(torch.rand(3, generator=a), torch.rand(3, generator=b))
    sampler = ResumableDistributedSampler(4, 1, 0, shuffle=False, seed=1, with_seeds=True)
    sampler.set_epoch(2)
    assert list(sampler) == [ItemKey.of(1, 2, i) for i in range(4)]


class GlobalRandomDataset(torch.utils.data.Dataset):
    """Draws from the global generator (as torchvision's transforms do)."""

    def __len__(self):
        return 3

    def __getitem__(self, i):
        return torch.rand(2)


def test_seeded_dataset_seeds_the_global_generators_of_other_datasets_and_restores_them():
    ds = SeededDataset(GlobalRandomDataset())
    key = ItemKey.of(0, 0, 1)
    state = torch.get_rng_state()
    item = ds[key]
    assert torch.equal(torch.get_rng_state(), state)  # the training's own state is untouched
    assert torch.equal(item, torch.rand(2, generator=key.generator())) and torch.equal(
        ds[key], item
    )
