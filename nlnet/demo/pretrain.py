"""The demo's 2D pre-training (Section 4.1's ImageNet step) and its cache.

:func:`pretrain_2d` trains the tiny 2D backbone to name single digits; :func:`cached_pretrain_2d`
keeps its weights per seed and settings in the demo cache, so that a recipe change of the video
training (the block, its options, the schedule) screened on many seeds trains only the video
models (docs/demo.md, Protocol).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from nlnet.data.digits.decoded import MEAN, STD, ClipTensorDataset
from nlnet.demo.video import DemoSettings, demo_config
from nlnet.engine.hooks.curves import top1

__all__ = ["PRETRAIN_FIELDS", "cached_pretrain_2d", "pretrain_2d", "pretrain_key"]


def pretrain_2d(
    settings: DemoSettings,
    device: torch.device,
    seed: int,
    progress: bool = True,
    run_dir: Path | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """2D pre-training of the backbone on single-digit frames (Section 4.1's ImageNet step).

    The paper initialises C2D and the non-local models from the same ImageNet-pretrained 2D
    ResNet. Here the same tiny backbone is first trained to name single digits (train-split
    images only, random positions and colours) as one-frame clips, through the engine's loop
    (AdamW, constant rate); both demo models start from these weights, so the comparison stays
    fair.

    Returns:
        The backbone state dict (without ``fc``) and a small log.
    """
    import tempfile

    from nlnet.data.digits.video import generate_frames
    from nlnet.engine.loop import train
    from nlnet.models.registry import create_model

    task = settings.task
    t0 = time.perf_counter()
    frames, labels = generate_frames(task, settings.pretrain_frames, "train")
    x = torch.from_numpy(frames).permute(0, 3, 1, 2).float().div(255.0)  # (N, 3, H, W)
    x = ((x - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None])[:, :, None]
    data = ClipTensorDataset(x, torch.from_numpy(labels), [str(d) for d in task.digits])
    torch.manual_seed(seed)
    model = create_model(
        "c2d_tiny", num_classes=len(task.digits), width=settings.width, dropout=settings.dropout
    )
    with tempfile.TemporaryDirectory() as tmp:
        cfg = demo_config(
            settings, "c2d_tiny", Path(run_dir or tmp) / "pretrain_2d",
            num_classes=len(task.digits), epochs=settings.pretrain_epochs, batch_size=64,
            lr=settings.pretrain_lr, schedule=settings.pretrain_schedule, seed=seed + 1,
            device=device, progress=progress, num_frames=1,
        )  # fmt: skip
        summary = train(cfg, model=model, train_dataset=data)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items() if not k.startswith("fc.")}
    log = {"frames": len(x), "epochs": settings.pretrain_epochs,
           "train_top1": top1(model, x, data.targets, device),
           "train_loss_last": summary["train_loss"],
           "time_s": time.perf_counter() - t0}  # fmt: skip
    return state, log


#: Settings the 2D pre-training depends on (besides the task's images and the seed): the key of
#: its cache (:func:`cached_pretrain_2d`).
PRETRAIN_FIELDS = ("width", "dropout", "pretrain_frames", "pretrain_epochs", "pretrain_lr",
                   "pretrain_schedule")  # fmt: skip


def pretrain_key(settings: DemoSettings, seed: int, device: torch.device) -> str:
    """A digest of everything :func:`pretrain_2d` computes from: the task's fingerprint, the
    pre-training settings, the seed, the normalisation, the PyTorch version and the device type."""
    import hashlib
    import json

    what = {
        "task": settings.task.fingerprint(),
        **{f: getattr(settings, f) for f in PRETRAIN_FIELDS},
        "seed": seed, "mean": MEAN, "std": STD, "torch": torch.__version__,
        "device": torch.device(device).type, "version": 1,
    }  # fmt: skip
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def cached_pretrain_2d(
    settings: DemoSettings, device: torch.device, seed: int, run_dir: Path | None, cache: Path
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """:func:`pretrain_2d`, kept in ``cache/pretrain-2d/<key>.pt`` and reused.

    The pre-training is the same for every recipe that changes only the video training (the
    block, its options, the schedule), so screening such a recipe on many seeds trains only the
    video models (docs/demo.md, Protocol). One thread on one machine computes it bit for bit the
    same, so the reused weights are those a fresh run gives (tested); the key holds the PyTorch
    version and the device type. Written atomically; an unreadable file is computed again.
    """
    from nlnet.data.atomic import atomic_path

    path = Path(cache) / "pretrain-2d" / f"{pretrain_key(settings, seed, device)}.pt"
    if path.is_file():
        try:
            saved = torch.load(path, map_location="cpu", weights_only=True)
            return saved["state"], {**saved["log"], "reused": str(path)}
        except Exception:  # a damaged file: computed again below and replaced
            pass
    state, log = pretrain_2d(settings, device, seed, False, run_dir)
    with atomic_path(path) as tmp:
        torch.save({"state": state, "log": log}, tmp)
    return state, log
