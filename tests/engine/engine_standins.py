"""Tiny stand-ins for the engine tests: a video network and a dataset obeying the data contract.

Items are dicts ``{"clip", "target", "index"}`` with ``clip`` float (C, T, H, W); a bad item is
``None``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset


class TinyVideoNet(nn.Module):
    """conv3d -> (BN) -> ReLU -> global average pool -> dropout -> fc, like ResNet3d's head."""

    def __init__(self, num_classes: int = 3, width: int = 4, bn: bool = True, dropout: float = 0.0):
        super().__init__()
        self.conv1 = nn.Conv3d(3, width, kernel_size=3, padding=1, bias=not bn)
        self.bn1 = nn.BatchNorm3d(width) if bn else nn.Identity()
        self.relu = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, 3, T, H, W) -> (B, K)
        x = self.pool(self.relu(self.bn1(self.conv1(x)))).flatten(1)
        return self.fc(self.dropout(x))


class TinyClipDataset(Dataset):
    """``n`` synthetic videos; class ``i % num_classes`` brightens channel ``class``.

    Random augmentation (noise, flip) draws from torch's global generator, like the real
    transforms do without an explicit generator.  ``bad`` indices yield ``None``.
    """

    def __init__(
        self,
        n: int = 16,
        num_classes: int = 3,
        size: tuple[int, int, int] = (2, 6, 6),
        bad: tuple[int, ...] = (),
        multi_label: bool = False,
        clips: int = 1,
    ):
        self.n, self.num_classes, self.size = n, num_classes, size
        self.bad = set(bad)
        self.multi_label = multi_label
        self.clips = clips
        self.classes = [f"class_{i}" for i in range(num_classes)]
        g = torch.Generator().manual_seed(1234)
        self.base = torch.randn(n, 3, *size, generator=g) * 0.5

    def __len__(self) -> int:
        return self.n * self.clips

    def __getitem__(self, i: int):
        video = i // self.clips
        if video in self.bad:
            return None
        label = video % self.num_classes
        clip = self.base[video].clone()
        clip[label % 3] += 1.0
        clip = clip + 0.1 * torch.randn(clip.shape)  # random augmentation
        if torch.rand(()) < 0.5:
            clip = clip.flip(-1)
        if self.multi_label:
            target = torch.zeros(self.num_classes)
            target[label] = 1.0
            target[(label + 1) % self.num_classes] = 1.0
        else:
            target = label
        return {"clip": clip, "target": target, "index": video}


def collate_standin(items):
    """Same contract as ``nlnet.data.collate_skip_bad``."""
    good = [it for it in items if it is not None]
    skipped = len(items) - len(good)
    if not good:
        return {"clip": None, "target": None, "index": None, "skipped": skipped}
    clips = torch.stack([g["clip"] for g in good])
    targets = [g["target"] for g in good]
    target = torch.stack(targets) if isinstance(targets[0], torch.Tensor) else torch.tensor(targets)
    index = torch.tensor([g["index"] for g in good])
    return {"clip": clips, "target": target, "index": index, "skipped": skipped}


#: the config of a tiny CPU run on the stand-ins: 10 steps of 4 clips, lr 0.1 decayed at step
#: 6 after 2 warm-up steps, a log record every step, no periodic checkpoint
TINY_RUN = {
    "model.name": "tiny",
    "model.num_classes": 3,
    "model.dropout": 0.5,
    "optim.lr": 0.1,
    "optim.max_iters": 10,
    "optim.steps": [6],
    "optim.warmup_iters": 2,
    "train.batch_size": 4,
    "train.workers": 0,
    "train.log_every": 1,
    "train.ckpt_every": 0,
    "train.device": "cpu",
    "train.progress": False,
    "eval.batch_size": 4,
    "eval.workers": 0,
}


def tiny_run_config(tmp_path: Path, name: str = "run", **over):
    """:data:`TINY_RUN` writing into ``tmp_path / name``, with dotted overrides ``over``."""
    from nlnet.engine.config import load_config

    return load_config(None, {**TINY_RUN, "output_dir": str(tmp_path / name), **over})
