"""Multi-process training helpers: process-group setup, samplers, reductions.

``torchrun --nproc_per_node=N -m nlnet train ...`` sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT``; :func:`init_distributed` reads them and creates the process
group (``nccl`` on CUDA, ``gloo`` on the CPU).  The paper trains on 8 GPUs with 8 clips each
("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971), Section 4.1); with DistributedDataParallel every process sees
``train.batch_size`` clips and gradients are averaged, so the global mini-batch is
``world_size * batch_size``.

:class:`ResumableDistributedSampler` draws the same permutation as
``torch.utils.data.DistributedSampler`` (seeded by ``seed + epoch``), can start in the middle
of an epoch (exact ``--resume``) and can attach a per-item seed so that random augmentation
depends only on ``(seed, epoch, index)``, not on worker count, rank or interruption.
"""

from __future__ import annotations

import datetime
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Sampler

from nlnet.data.seeding import ItemKey

__all__ = [
    "DistInfo",
    "init_distributed",
    "cleanup",
    "barrier",
    "get_rank",
    "get_world_size",
    "is_distributed",
    "is_main_process",
    "resolve_device",
    "all_reduce_sum",
    "all_gather_object",
    "convert_sync_batchnorm",
    "wrap_ddp",
    "ResumableDistributedSampler",
    "ShardedEvalSampler",
]


@dataclass(frozen=True)
class DistInfo:
    """Where this process stands: ``rank`` of ``world_size``, ``local_rank`` on its node."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None
    initialized_here: bool

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def is_distributed() -> bool:
    """True when a process group with more than one process is active."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def get_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def get_world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_main_process() -> bool:
    """Rank 0 (or no process group): the process that logs and writes checkpoints."""
    return get_rank() == 0


def resolve_device(device: str | torch.device | None = "auto", local_rank: int = 0) -> torch.device:
    """Turn ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N`` into a device (``cuda`` -> local rank)."""
    if isinstance(device, torch.device):
        return device
    name = (device or "auto").lower()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r}: CUDA is not available on this machine")
        if name == "cuda":
            return torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))
        return torch.device(name)
    if name in ("cpu", "mps", "xpu") or name.startswith(("mps", "xpu")):
        return torch.device(name)
    raise ValueError(f"device: expected auto, cpu, cuda or cuda:N, got {device!r}")


def init_distributed(
    device: str | torch.device | None = "auto",
    *,
    backend: str | None = None,
    init_method: str | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    timeout_s: float = 1800.0,
) -> DistInfo:
    """Create the process group if the environment asks for one; otherwise a 1-process info.

    Without arguments it follows torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``);
    tests pass ``init_method="tcp://127.0.0.1:PORT"``, ``rank`` and ``world_size`` explicitly.
    An already initialised group is reused (and not destroyed by :func:`cleanup` of the info).
    """
    local_rank = int(os.environ.get("LOCAL_RANK", rank if rank is not None else 0))
    if dist.is_available() and dist.is_initialized():
        r, w = dist.get_rank(), dist.get_world_size()
        dev = resolve_device(device, int(os.environ.get("LOCAL_RANK", r)))
        return DistInfo(r, w, int(os.environ.get("LOCAL_RANK", r)), dev, dist.get_backend(), False)
    if world_size is None:
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if rank is None:
        rank = int(os.environ.get("RANK", "0"))
    dev = resolve_device(device, local_rank)
    if world_size <= 1:
        return DistInfo(0, 1, 0, dev, None, False)
    if not dist.is_available():  # pragma: no cover
        raise RuntimeError("torch.distributed is not available in this PyTorch build")
    if backend is None:
        backend = "nccl" if dev.type == "cuda" else "gloo"
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group(
        backend=backend,
        init_method=init_method or "env://",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return DistInfo(rank, world_size, local_rank, dev, backend, True)


def cleanup(info: DistInfo | None = None) -> None:
    """Destroy the process group if :func:`init_distributed` created it."""
    if info is not None and not info.initialized_here:
        return
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def _comm_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over all processes (returns a new tensor on the input's device)."""
    if not is_distributed():
        return tensor.clone()
    t = tensor.detach().to(_comm_device()).clone()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.to(tensor.device)


def all_gather_object(obj: Any) -> list[Any]:
    """Gather a picklable object from every process (a 1-element list without a group)."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def convert_sync_batchnorm(model: nn.Module, device: torch.device) -> nn.Module:
    """SyncBatchNorm under multi-process CUDA training only (it has no CPU/gloo kernels)."""
    if device.type == "cuda" and is_distributed():
        return nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return model


def wrap_ddp(model: nn.Module, device: torch.device) -> nn.Module:
    """Wrap in DistributedDataParallel when a multi-process group is active."""
    if not is_distributed():
        return model
    from torch.nn.parallel import DistributedDataParallel

    if device.type == "cuda":
        return DistributedDataParallel(model, device_ids=[device.index], output_device=device.index)
    return DistributedDataParallel(model)


# --------------------------------------------------------------------------------------------
# samplers
# --------------------------------------------------------------------------------------------
class ResumableDistributedSampler(Sampler):
    """``DistributedSampler``'s order, plus a start offset and optional per-item seeds.

    Args:
        length: dataset size.
        num_replicas: number of processes (default: the world size).
        rank: this process (default: the current rank).
        shuffle: random permutation seeded with ``seed + epoch`` (else sequential).
        seed: base seed shared by all processes.
        drop_last: drop the tail instead of padding so every rank gets the same count.
        with_seeds: yield :class:`nlnet.data.seeding.ItemKey` keys instead of indices.
    """

    def __init__(
        self,
        length: int,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        with_seeds: bool = False,
    ) -> None:
        if length < 0:
            raise ValueError(f"length: expected >= 0, got {length}")
        self.length = int(length)
        self.num_replicas = get_world_size() if num_replicas is None else int(num_replicas)
        self.rank = get_rank() if rank is None else int(rank)
        if not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"rank: expected 0 <= rank < {self.num_replicas}, got {self.rank}")
        self.shuffle = shuffle
        self.seed = int(seed)
        self.drop_last = drop_last
        self.with_seeds = with_seeds
        self.epoch = 0
        self.start = 0
        if drop_last and self.length % self.num_replicas:
            self.num_samples = math.ceil((self.length - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(self.length / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        """Select the permutation of ``epoch`` and rewind to its beginning."""
        self.epoch = int(epoch)
        self.start = 0

    def set_start(self, start: int) -> None:
        """Skip the first ``start`` samples of this rank in the current epoch (resume)."""
        if not 0 <= start <= self.num_samples:
            raise ValueError(f"start: expected 0 <= start <= {self.num_samples}, got {start}")
        self.start = int(start)

    def indices(self) -> list[int]:
        """All indices of this rank for the current epoch (ignoring ``start``)."""
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.length, generator=g).tolist()
        else:
            order = list(range(self.length))
        if not self.drop_last and order:
            pad = self.total_size - len(order)
            if pad > 0:
                order += (order * math.ceil(pad / len(order)))[:pad]
        else:
            order = order[: self.total_size]
        return order[self.rank : self.total_size : self.num_replicas]

    def __iter__(self) -> Iterator[Any]:
        for idx in self.indices()[self.start :]:
            if self.with_seeds:
                yield ItemKey.of(self.seed, self.epoch, idx)
            else:
                yield idx

    def __len__(self) -> int:
        return self.num_samples - self.start


class ShardedEvalSampler(Sampler):
    """Every item exactly once over all ranks (rank r takes ``r, r + W, ...``), no padding."""

    def __init__(self, length: int, num_replicas: int | None = None, rank: int | None = None):
        self.length = int(length)
        self.num_replicas = get_world_size() if num_replicas is None else int(num_replicas)
        self.rank = get_rank() if rank is None else int(rank)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.length, self.num_replicas))

    def __len__(self) -> int:
        return len(range(self.rank, self.length, self.num_replicas))
