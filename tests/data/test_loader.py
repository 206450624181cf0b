"""The overlapping loader: worker prefetch, pinned memory only for CUDA, device prefetching."""

from __future__ import annotations

from typing import NamedTuple

import pytest
import torch
from torch.utils.data import TensorDataset

from nlnet.data.loader import (
    DevicePrefetcher,
    TimedBatches,
    WorkerTuner,
    make_loader,
    to_device,
    worker_tuner,
)


def _data(n: int = 10) -> TensorDataset:
    return TensorDataset(torch.arange(n, dtype=torch.float32)[:, None], torch.arange(n))


def test_make_loader_settings_follow_workers_and_device():
    cpu = make_loader(_data(), batch_size=4, workers=0, prefetch=3)
    assert cpu.num_workers == 0 and cpu.prefetch_factor is None and not cpu.pin_memory
    two = make_loader(_data(), batch_size=4, workers=2, prefetch=3, drop_last=True)
    assert two.num_workers == 2 and two.prefetch_factor == 3 and not two.pin_memory
    assert make_loader(_data(), batch_size=4, device="cuda").pin_memory  # settings only
    got = torch.cat([x for x, _ in two])
    assert len(two) == 2 and sorted(got.flatten().tolist()) == list(range(8))
    for bad, match in (({"workers": -1}, "workers"), ({"prefetch": 0}, "prefetch")):
        with pytest.raises(ValueError, match=match):
            make_loader(_data(), batch_size=2, **bad)


class Pair(NamedTuple):
    clip: torch.Tensor
    name: str


def test_to_device_keeps_the_structure():
    batch = {"clip": torch.ones(2), "meta": [Pair(torch.zeros(1), "a"), 3], "t": (torch.ones(1),)}
    out = to_device(batch, torch.device("cpu"))
    assert isinstance(out["meta"][0], Pair) and out["meta"][0].name == "a" and out["meta"][1] == 3
    assert isinstance(out["t"], tuple) and torch.equal(out["clip"], batch["clip"])


def test_cpu_prefetcher_passes_batches_through_in_order():
    loader = make_loader(_data(), batch_size=3)
    got = list(DevicePrefetcher(loader, "cpu"))
    assert len(got) == len(DevicePrefetcher(loader, "cpu")) == 4
    for (x, y), (rx, ry) in zip(got, loader):
        assert torch.equal(x, rx) and torch.equal(y, ry)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the side-stream copy needs CUDA")
def test_cuda_prefetcher_gives_every_batch_on_the_device():
    loader = make_loader(_data(), batch_size=3, device="cuda")
    got = [x for x, _ in DevicePrefetcher(loader, "cuda")]
    assert all(x.is_cuda for x in got)
    assert torch.cat(got).cpu().flatten().tolist() == list(range(10))


def test_workers_beyond_the_usable_cores_are_cut_once_with_a_warning():
    import os

    cores = len(os.sched_getaffinity(0))
    with pytest.warns(RuntimeWarning, match=f"more than the {cores} usable CPU"):
        loader = make_loader(_data(), batch_size=4, workers=cores + 2)
    assert loader.num_workers == cores
    assert make_loader(_data(), batch_size=4, workers=cores).num_workers == cores


def test_worker_tuner_grows_while_the_loader_lags_and_undoes_a_slower_count():
    t = WorkerTuner(cores=16)
    assert t.workers == 0 and t.update(5.0, 0.9) == 0  # the first epoch only warms up
    assert t.update(10.0, 0.8) == 2  # waiting 80% of the time: workers
    assert t.update(20.0, 0.5) == 4 and t.update(30.0, 0.2) == 8
    assert t.update(25.0, 0.2) == 4 and t.done  # slower than with 4 (beyond 5%): back, stop
    assert t.update(100.0, 0.9) == 4  # decided: later epochs keep it
    keeps_up = WorkerTuner(cores=16)
    keeps_up.update(1.0, 0.0)
    assert keeps_up.update(50.0, 0.04) == 0 and keeps_up.done  # waits < 5%: no workers
    few = WorkerTuner(cores=2)
    few.update(1.0, 0.9)
    assert few.update(10.0, 0.9) == 2 and few.update(10.2, 0.9) == 2 and few.done  # all cores
    noisy = WorkerTuner(cores=8)
    noisy.update(1.0, 0.9)
    assert noisy.update(10.0, 0.5) == 2 and noisy.update(9.8, 0.5) == 4  # within 5%: go on


def test_timed_batches_add_up_the_waiting():
    import time

    def slow():
        for i in range(3):
            time.sleep(0.02)
            yield i

    batches = TimedBatches(slow())
    assert list(batches) == [0, 1, 2] and 0.05 < batches.wait_s < 1.0


def test_worker_tuner_of_a_config_shares_the_cores_between_the_processes(monkeypatch):
    monkeypatch.setattr("nlnet.data.loader.usable_cores", lambda: 8)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert worker_tuner(4) is None and worker_tuner(0) is None  # a fixed count
    assert worker_tuner("auto").cores == 8 and worker_tuner("auto", world_size=2).cores == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # torchrun: 4 processes on this node
    assert worker_tuner("auto", world_size=8).cores == 2
