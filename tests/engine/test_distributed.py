"""Two gloo processes on the CPU train exactly like one process with the same global batch."""

from __future__ import annotations

import json
import socket

import ddp_worker_engine
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from nlnet.data.seeding import ItemKey
from nlnet.engine import distributed as du  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo")
def test_two_process_ddp_equals_single_process(tmp_path):
    out = tmp_path / "ddp"
    out.mkdir()
    mp.spawn(
        ddp_worker_engine.worker,
        args=(2, _free_port(), str(out), 2),  # 2 processes x 2 clips
        nprocs=2,
        join=True,
    )
    r0 = json.loads((out / "rank0.json").read_text())
    r1 = json.loads((out / "rank1.json").read_text())
    assert r0["backend"] == "gloo" and r0["summary"]["world_size"] == 2
    # the single-process run with the global batch of 4
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, single = ddp_worker_engine.run_training(
            ddp_worker_engine.make_cfg(str(tmp_path / "single"), 4)
        )
    finally:
        torch.set_num_threads(old)
    for name, ref in model.state_dict().items():
        for r in (r0, r1):
            got = torch.tensor(r["state"][name], dtype=ref.dtype)
            torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6, msg=name)
    # the validation metrics are gathered over both ranks: every view and video counted once
    for r in (r0, r1):
        val = r["summary"]["val"]
        assert val["clip_count"] == 14 and val["video_count"] == 7
        assert val["video_top1"] == pytest.approx(single["val"]["video_top1"])
    # only rank 0 writes the run directory
    assert (out / "checkpoints" / "final.pt").is_file()
    assert (out / "metrics.jsonl").read_text().count('"kind": "train"') == 6
    ckpt = torch.load(out / "checkpoints" / "final.pt", weights_only=True)
    assert len(ckpt["extra"]["ranks"]) == 2  # generator states of both ranks


def test_sampler_shards_match_the_single_process_order():
    full = du.ResumableDistributedSampler(10, 1, 0, shuffle=True, seed=3)
    full.set_epoch(2)
    order = full.indices()
    shards = []
    for rank in range(2):
        s = du.ResumableDistributedSampler(10, 2, rank, shuffle=True, seed=3)
        s.set_epoch(2)
        shards.append(s.indices())
    # global batch k of size 4 == union of per-rank batches k of size 2
    for k in range(2):
        assert sorted(order[4 * k : 4 * k + 4]) == sorted(
            shards[0][2 * k : 2 * k + 2] + shards[1][2 * k : 2 * k + 2]
        )
    # same permutation as torch's DistributedSampler
    ref = torch.utils.data.DistributedSampler(range(10), num_replicas=2, rank=1, seed=3)
    ref.set_epoch(2)
    assert list(ref) == shards[1]
    # resume inside the epoch, and per-item seeds
    s = du.ResumableDistributedSampler(10, 2, 1, shuffle=True, seed=3, with_seeds=True)
    s.set_epoch(2)
    s.set_start(3)
    items = list(s)
    assert [i for i, _ in items] == shards[1][3:] and len(s) == 2
    assert items[0] == ItemKey.of(3, 2, items[0].index)
    with pytest.raises(ValueError, match="start"):
        s.set_start(99)


def test_eval_sampler_covers_every_item_once():
    got = sorted(i for r in range(3) for i in du.ShardedEvalSampler(10, 3, r))
    assert got == list(range(10))


def test_single_process_helpers():
    info = du.init_distributed("cpu")
    assert (info.rank, info.world_size, info.is_main) == (0, 1, True)
    assert du.is_main_process() and du.get_world_size() == 1
    assert du.all_gather_object(5) == [5]
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(3))
    assert du.convert_sync_batchnorm(model, torch.device("cpu")) is model  # CUDA only
    with pytest.raises(ValueError, match="device"):
        du.resolve_device("tpu")


@pytest.mark.slow  # two more processes; test_two_process_ddp_equals_single_process is the default
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo")
def test_ddp_survives_micro_batches_in_which_every_clip_failed(tmp_path):
    """One clip per process and 10 of 16 videos bad: some steps have an empty micro-batch on one
    rank only (even the first); that rank joins the all-reduce with weight 0, so the ranks keep
    identical weights and nothing hangs."""
    out = tmp_path / "ddp"
    bad = tuple(range(10))
    mp.spawn(ddp_worker_engine.worker, args=(2, _free_port(), str(out), 1, bad), nprocs=2,
             join=True)  # fmt: skip
    r0 = json.loads((out / "rank0.json").read_text())
    r1 = json.loads((out / "rank1.json").read_text())
    assert r0["summary"]["iterations"] == 6 and r0["summary"]["empty_batches"] > 0
    for name in r0["state"]:
        assert r0["state"][name] == r1["state"][name], name
