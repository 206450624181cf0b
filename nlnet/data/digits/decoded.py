"""The digits video task decoded into memory: the clips of a prepared split as tensors.

:func:`load_split` reads a split written by :func:`nlnet.data.digits.cache.prepare_digits` back
through the normal video pipeline (:class:`nlnet.data.video.builder.VideoFolderDataset`, its
disk clip cache keeping the decoded frames), in the manifest's order;
:class:`ClipTensorDataset` serves such tensors as dataset items. The demo trains its tiny
models on them (one decoding per process: :func:`decoded_splits`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from nlnet.data.digits.cache import read_manifest
from nlnet.data.digits.video import DigitsTaskConfig
from nlnet.data.seeding import ItemKey

__all__ = ["MEAN", "STD", "ClipTensorDataset", "clear_decoded", "decoded_splits", "load_split"]

#: Normalisation of the digits clips (intensities are mostly black with bright strokes).
MEAN = (0.1, 0.1, 0.1)
STD = (0.25, 0.25, 0.25)


def load_split(
    root: Path, split: str, task: DigitsTaskConfig, progress: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode one split through :class:`VideoFolderDataset` into memory.

    The dataset's disk clip cache (``root/.decoded``, :mod:`nlnet.data.video_io.clip_cache`) keeps the decoded
    frames, so a later run with the same data (or a demo job in a worker process) reads them
    instead of the mp4 files.

    Returns:
        ``(clips, targets)``: float ``(N, 3, T, H, W)`` normalised and int64 ``(N,)``, in the
        manifest's order (so that item ``i`` matches ``manifest["splits"][split][i]``).
    """
    from tqdm import tqdm

    from nlnet.data.loader import make_loader
    from nlnet.data.video.builder import VideoFolderDataset, build_parts, collate_skip_bad
    from nlnet.data.video.config import VideoDataConfig

    data = VideoDataConfig(
        num_frames=task.num_frames, stride=1, test_scale=task.size, test_crop=None, mean=MEAN,
        std=STD, clip_cache="disk", clip_cache_dir=str(root / ".decoded"), clip_cache_mb=4096,
    )  # fmt: skip
    ds = VideoFolderDataset(root, split, cache=False, **build_parts(data, False, clips=1))
    manifest = read_manifest(root)
    order = {str((root / r["file"]).resolve()): i for i, r in enumerate(manifest["splits"][split])}
    clips = torch.empty(len(ds), 3, task.num_frames, task.size, task.size)
    targets = torch.empty(len(ds), dtype=torch.long)
    loader = make_loader(ds, batch_size=50, collate_fn=collate_skip_bad)
    bar = tqdm(total=len(ds), desc=f"decoding {split}", unit="clip", leave=False,
               disable=not progress)  # fmt: skip
    for batch in loader:
        if batch["skipped"]:
            raise RuntimeError(f"could not decode every clip of {split}; delete the cache {root}")
        for clip, target, video in zip(batch["clip"], batch["target"], batch["index"]):
            i = order[str(Path(ds.videos[int(video)]).resolve())]
            clips[i], targets[i] = clip, int(target)
        bar.update(len(batch["clip"]))
    bar.close()
    return clips, targets


class ClipTensorDataset(Dataset):
    """Decoded clips held in memory, as dataset items ``{"clip", "target", "index"}``.

    It draws nothing at random, so it takes the training sampler's
    :class:`~nlnet.data.seeding.ItemKey` as it is (``takes_item_key``) and reads its index: no
    global generator is seeded and restored around each fetch.
    """

    takes_item_key = True

    def __init__(self, clips: torch.Tensor, targets: torch.Tensor, classes: list[str]) -> None:
        self.clips, self.targets, self.classes = clips, targets, list(classes)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def __len__(self) -> int:
        return len(self.clips)

    def __getitem__(self, i: int | ItemKey) -> dict[str, Any]:
        i = i.index if isinstance(i, ItemKey) else i
        return {"clip": self.clips[i], "target": int(self.targets[i]), "index": i}


_SPLITS: dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]] = {}


def decoded_splits(
    root: Path, task: DigitsTaskConfig, progress: bool = False
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The three splits of ``root`` decoded into memory (:func:`load_split`), once per process."""
    key = f"{Path(root).resolve()}:{task.fingerprint()}"
    if key not in _SPLITS:
        _SPLITS[key] = {s: load_split(root, s, task, progress) for s in ("train", "val", "test")}
    return _SPLITS[key]


def clear_decoded() -> None:
    """Forget the splits :func:`decoded_splits` holds (between the seeds of one process)."""
    _SPLITS.clear()
