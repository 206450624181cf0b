"""Train C2D vs. non-local C2D on the built-in digits video task, in minutes on a CPU.

``nlnet demo`` shows what the library is for, on data it brings itself
("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971): Figures 1 and 3, Table 2d):

1. it generates the long-range digits task of :mod:`nlnet.data.digits` (real handwritten digits
   from scikit-learn) as mp4 files in a cache directory, and reads them back through the normal
   data pipeline (:class:`nlnet.data.datasets.VideoFolderDataset`), decoding each clip once;
2. it pre-trains the tiny 2D backbone on single-digit frames (the role of ImageNet in Section
   4.1), then trains, from that same initialisation, the tiny C2D baseline (``c2d_tiny``) and
   the network with one spacetime non-local block in res4 (``c2d_tiny_nl1``) -- and, with
   ``--variants``, the space-only and time-only blocks of Table 2d -- with the engine's one
   training loop (:func:`nlnet.engine.loop.train`) and a compact AdamW / one-cycle recipe
   (:meth:`DemoSettings.train_config`) on the decoded clips;
3. it evaluates every model on the test split (digit images never seen in training) and prints
   a table: model, parameters, multiply-adds, top-1, training time;
4. it writes into its run directory ``runs/demo-<timestamp>-seed<k>/``: ``curves.png`` (training loss and
   validation top-1 per epoch), ``attention.png`` (a Figure-3-style picture: for a few test clips,
   arrows from the cue digit in the first frame to the 20 highest-weighted key positions across
   the frames), ``summary.json`` and a checkpoint per model (readable by ``nlnet visualize``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from nlnet.data.digits import DigitsTaskConfig, default_cache_dir, prepare_digits, read_manifest
from nlnet.engine.config import replace as replace_config
from nlnet.engine.runlog import MetricsLogger

__all__ = ["DemoSettings", "run_demo"]


TASK_TEXT = {
    "pointer": "the target is the class of the last-frame digit drawn in the colour of the "
    "square shown in frame 0",
    "match": "the target is the colour of the last-frame digit whose class equals the boxed "
    "cue digit's class in frame 0",
    "same": "the target is whether the last-frame digit has the class of the boxed cue digit "
    "in frame 0",
}

#: Normalisation of the digits clips (intensities are mostly black with bright strokes).
MEAN = (0.1, 0.1, 0.1)
STD = (0.25, 0.25, 0.25)


@dataclasses.dataclass
class DemoSettings:
    """Everything a demo run depends on (recorded in ``summary.json``)."""

    task: DigitsTaskConfig
    models: tuple[str, ...] = ("c2d_tiny", "c2d_tiny_nl1")
    width: int = 8
    epochs: int = 4
    batch_size: int = 32
    lr: float = 2e-3
    weight_decay: float = 1e-4
    dropout: float = 0.2
    figure_clips: int = 3
    pretrain_frames: int = 4000
    pretrain_epochs: int = 6
    pretrain_lr: float = 3e-3
    theta_init_std: float | None = 0.01

    @classmethod
    def default(cls, seed: int = 0) -> DemoSettings:
        return cls(task=DigitsTaskConfig(seed=seed))

    @classmethod
    def quick(cls, seed: int = 0) -> DemoSettings:
        task = DigitsTaskConfig(
            num_frames=4, num_train=48, num_val=16, num_test=16, distractors=1, seed=seed
        )
        return cls(
            task=task, width=2, epochs=1, batch_size=16, figure_clips=2, pretrain_frames=64,
            pretrain_epochs=1,
        )  # fmt: skip


# --------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------


def load_split(
    root: Path, split: str, task: DigitsTaskConfig, progress: bool = True, workers: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode one split through :class:`VideoFolderDataset` into memory.

    The dataset's disk clip cache (``root/.decoded``, :mod:`nlnet.data.cache`) keeps the decoded
    frames, so a later run with the same data reads them instead of the mp4 files; ``workers``
    data-loader processes decode in parallel (:func:`nlnet.data.loader.make_loader`).

    Returns:
        ``(clips, targets)``: float ``(N, 3, T, H, W)`` normalised and int64 ``(N,)``, in the
        manifest's order (so that item ``i`` matches ``manifest["splits"][split][i]``).
    """
    from tqdm import tqdm

    from nlnet.data.datasets import VideoFolderDataset, collate_skip_bad
    from nlnet.data.loader import make_loader

    ds = VideoFolderDataset(
        root, split, mode="test", num_frames=task.num_frames, stride=1, test_clips=1,
        test_scale=task.size, test_crop=None, mean=MEAN, std=STD, cache=False,
        clip_cache="disk", clip_cache_dir=root / ".decoded", clip_cache_mb=4096,
    )  # fmt: skip
    manifest = read_manifest(root)
    order = {str((root / r["file"]).resolve()): i for i, r in enumerate(manifest["splits"][split])}
    clips = torch.empty(len(ds), 3, task.num_frames, task.size, task.size)
    targets = torch.empty(len(ds), dtype=torch.long)
    loader = make_loader(ds, batch_size=50, collate_fn=collate_skip_bad, workers=workers)
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


# --------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------


class ClipTensorDataset(Dataset):
    """Decoded clips held in memory, as dataset items ``(clip, target, index)``."""

    def __init__(self, clips: torch.Tensor, targets: torch.Tensor, classes: list[str]) -> None:
        self.clips, self.targets, self.classes = clips, targets, list(classes)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def __len__(self) -> int:
        return len(self.clips)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, int]:
        return self.clips[i], int(self.targets[i]), i


def demo_config(
    settings: DemoSettings,
    name: str,
    run_dir: Path,
    *,
    num_classes: int,
    epochs: int,
    batch_size: int,
    lr: float,
    schedule: str,
    seed: int,
    device: torch.device,
    progress: bool,
    num_frames: int,
) -> Any:
    """The demo's recipe as an engine config: AdamW, one-cycle (or constant) rate, per-epoch
    validation, the digits normalisation stored as the checkpoint's preprocessing."""
    from nlnet.engine.config import config_from_dict

    task = settings.task
    return config_from_dict({
        "model": {"name": name, "num_classes": num_classes, "dropout": settings.dropout,
                  "overrides": {"width": settings.width}},
        "data": {"type": "folder", "num_frames": num_frames, "stride": 1,
                 "test_scale": task.size, "mean": list(MEAN), "std": list(STD)},
        "optim": {"optimizer": "adamw", "schedule": schedule, "lr": lr,
                  "weight_decay": settings.weight_decay, "epochs": epochs, "steps": [],
                  "pct_start": 0.15},
        "train": {"batch_size": batch_size, "seed": seed,
                  "workers": 0, "log_every": 10_000, "ckpt_every": 0, "sync_bn": False,
                  "device": str(device), "progress": None if progress else False},
        "eval": {"clips": 1, "batch_size": 100, "workers": 0},
        "output_dir": str(run_dir),
    })  # fmt: skip


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

    import nlnet.models.tiny  # noqa: F401
    from nlnet.data.digits import generate_frames
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
            lr=settings.pretrain_lr, schedule="multistep", seed=seed + 1, device=device,
            progress=progress, num_frames=1,
        )  # fmt: skip
        summary = train(cfg, model=model, train_dataset=data)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items() if not k.startswith("fc.")}
    log = {"frames": len(x), "epochs": settings.pretrain_epochs,
           "train_top1": accuracy(model, x, data.targets, device),
           "train_loss_last": summary["train_loss"],
           "time_s": time.perf_counter() - t0}  # fmt: skip
    return state, log


@torch.no_grad()
def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, device, bs: int = 100):
    """Top-1 accuracy (in [0, 1]) of ``model`` on ``(x, y)`` in eval mode."""
    model.eval()
    correct = 0
    for i in range(0, len(x), bs):
        logits = model(x[i : i + bs].to(device))
        correct += int((logits.argmax(1).cpu() == y[i : i + bs]).sum())
    return correct / max(len(x), 1)


def train_model(
    name: str,
    settings: DemoSettings,
    data: dict[str, tuple[torch.Tensor, torch.Tensor]],
    device: torch.device,
    seed: int,
    progress: bool = True,
    init: dict[str, torch.Tensor] | None = None,
    run_dir: Path | None = None,
    class_names: list[str] | None = None,
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Train one registered model with the engine's loop (AdamW, one-cycle); return it and its
    per-epoch log.  The checkpoint is ``<run_dir>/<name>/checkpoints/final.pt``.

    ``init`` is the pre-trained backbone (loaded non-strictly: the classifier and the non-local
    blocks keep their initialisation). With ``settings.theta_init_std`` the ``theta`` embedding
    of every non-local block starts small, so that the initial attention is nearly uniform and
    every key receives gradient (a sharp random softmax on pre-trained features starves the
    keys it ignores).
    """
    import tempfile

    import nlnet.models.tiny  # noqa: F401  (registers the tiny family)
    from nlnet.engine.loop import train
    from nlnet.models.registry import create_model

    torch.manual_seed(seed)
    num_classes = settings.task.num_classes
    model = create_model(
        name, num_classes=num_classes, width=settings.width, dropout=settings.dropout
    )
    if init is not None:
        missing, unexpected = model.load_state_dict(init, strict=False)
        bad = [k for k in missing if not (k.startswith("fc.") or ".non_local." in k)]
        if bad or unexpected:
            raise RuntimeError(f"pre-trained weights do not fit {name}: {bad + unexpected}")
    if settings.theta_init_std:
        from nlnet.analysis.hooks import find_non_local_blocks

        for _, block in find_non_local_blocks(model):
            if block.theta is not None:
                torch.nn.init.normal_(block.theta.weight, std=settings.theta_init_std)
    names = class_names or [f"class_{i}" for i in range(num_classes)]
    train_ds, val_ds = (ClipTensorDataset(*data[s], names) for s in ("train", "val"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(run_dir or tmp) / name
        cfg = demo_config(
            settings, name, out, num_classes=num_classes, epochs=settings.epochs,
            batch_size=settings.batch_size, lr=settings.lr, schedule="onecycle", seed=seed,
            device=device, progress=progress, num_frames=settings.task.num_frames,
        )  # fmt: skip
        steps = len(train_ds) // settings.batch_size
        cfg = replace_config(cfg, **{"train.eval_every": steps, "train.log_every": steps})
        summary = train(cfg, model=model, train_dataset=train_ds, val_dataset=val_ds)
        records = MetricsLogger(out).records()
    epochs = [r for r in records if r["kind"] == "epoch"]
    vals = [r for r in records if r["kind"] == "val"]
    log: dict[str, Any] = {
        "epoch": [r["epoch"] + 1 for r in epochs],
        "train_loss": [r["loss"] for r in epochs],
        "val_top1": [r["video_top1"] / 100 for r in vals],
        "train_time_s": summary["loop_time_s"],
        "checkpoint": summary["checkpoint"] if run_dir is not None else None,
    }
    return model, log


# --------------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------------


def plot_curves(logs: dict[str, dict[str, Any]], path: Path) -> None:
    """Training loss and validation top-1 per epoch for every model (Figure 4 style)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.4))
    for name, log in logs.items():
        a1.plot(log["epoch"], log["train_loss"], marker="o", label=name)
        a2.plot(log["epoch"], [100 * v for v in log["val_top1"]], marker="o", label=name)
    a1.set_xlabel("epoch")
    a1.set_ylabel("training loss")
    a2.set_xlabel("epoch")
    a2.set_ylabel("validation top-1 (%)")
    a2.set_ylim(0, 100)
    for a in (a1, a2):
        a.grid(alpha=0.3)
    a2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_attention(
    model: torch.nn.Module,
    root: Path,
    x: torch.Tensor,
    records: list[dict[str, Any]],
    class_names: list[str],
    path: Path,
    device: torch.device,
    top_k: int = 20,
) -> list[dict[str, Any]]:
    """Figure-3-style picture: per clip, arrows from the cue to its ``top_k`` strongest keys.

    The query is the feature cell at the centre of the cue digit in frame 0 (from the manifest).
    Returns, per clip, the query, the fraction of its weight on the last frame and on the match.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from nlnet.analysis.hooks import record_attention
    from nlnet.analysis.visualize import draw_arrows

    n, T = len(records), x.shape[2]
    with record_attention(model) as rec, torch.no_grad():
        logits = model.eval()(x.to(device))
    name = rec.names[0]
    attn = rec.maps[name].cpu()
    mapping = rec.mapping(name, x.shape[2:])
    fig, axes = plt.subplots(n, T, figsize=(1.5 * T, 1.75 * n), squeeze=False)
    frames = (x.permute(0, 2, 3, 4, 1) * torch.tensor(STD) + torch.tensor(MEAN)).clamp(0, 1)
    stats = []
    for i, r in enumerate(records):
        y0, x0, y1, x1 = r["cue_box"]
        q = mapping.query_index((0, (y0 + y1) // 2, (x0 + x1) // 2))
        w = attn[i, q]
        draw_arrows(list(axes[i]), frames[i].numpy(), w, mapping, q, top_k=top_k)
        key_t = torch.tensor([mapping.key_cell(j)[0] for j in range(mapping.num_keys)])
        last = float(w[key_t == mapping.key_size[0] - 1].sum())
        my0, mx0, my1, mx1 = r["match_box"]
        jm = mapping.key_index((T - 1, (my0 + my1) // 2, (mx0 + mx1) // 2))
        pred = class_names[int(logits[i].argmax())]
        axes[i][0].set_ylabel(f"target {class_names[r['label']]}\npred {pred}", fontsize=7)
        stats.append(
            {"file": r["file"], "query": q, "weight_last_frame": last, "weight_match": float(w[jm])}
        )
    fig.suptitle(
        f"{name}: the cue (frame 0) -> its {top_k} strongest keys across frames", fontsize=9
    )
    fig.subplots_adjust(left=0.04, right=0.99, bottom=0.02, top=0.9, wspace=0.05, hspace=0.3)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return stats


def attention_statistics(
    model: torch.nn.Module,
    x: torch.Tensor,
    records: list[dict[str, Any]],
    device: torch.device,
    batch: int = 100,
) -> dict[str, float]:
    """Mean attention weight from the cue to the last-frame digit and back, over test clips.

    The query/key cells are those containing the centres of the boxes recorded in the manifest
    (``cue_box`` in frame 0, ``match_box`` in the last frame); ``uniform`` is ``1 / N'``.
    """
    from nlnet.analysis.hooks import record_attention

    cue_to_last, last_to_cue = [], []
    T = x.shape[2]
    model.eval()
    uniform = float("nan")
    for s in range(0, len(records), batch):
        xb = x[s : s + batch].to(device)
        with record_attention(model, to_cpu=True) as rec, torch.no_grad():
            model(xb)
        name = rec.names[0]
        attn = rec.maps[name]
        m = rec.mapping(name, xb.shape[2:])
        uniform = 1.0 / m.num_keys
        for i, r in enumerate(records[s : s + batch]):
            y0, x0, y1, x1 = r["cue_box"]
            my0, mx0, my1, mx1 = r["match_box"]
            cue = (0, (y0 + y1) // 2, (x0 + x1) // 2)
            last = (T - 1, (my0 + my1) // 2, (mx0 + mx1) // 2)
            cue_to_last.append(float(attn[i, m.query_index(cue), m.key_index(last)]))
            last_to_cue.append(float(attn[i, m.query_index(last), m.key_index(cue)]))
    return {
        "clips": len(cue_to_last),
        "cue_to_last_digit": float(np.mean(cue_to_last)),
        "last_digit_to_cue": float(np.mean(last_to_cue)),
        "uniform": uniform,
    }


# --------------------------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------------------------


def _threads(arg: str) -> int:
    cores = os.cpu_count() or 1
    if arg != "auto":
        n = int(arg)
        if n < 1:
            raise ValueError(f"--threads: expected a positive integer or 'auto', got {arg!r}")
        return n
    # On a shared machine more threads than idle cores make PyTorch's CPU kernels far slower.
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return max(1, min(cores, int(cores - load + 0.5)))


def settings_from_args(args: argparse.Namespace) -> DemoSettings:
    """The :class:`DemoSettings` of the command-line options (a bad option is a UserError)."""
    from nlnet.engine.errors import UserError

    settings = DemoSettings.quick(args.seed) if args.quick else DemoSettings.default(args.seed)
    if args.variants:
        settings.models = (*settings.models, "c2d_tiny_nl1_space", "c2d_tiny_nl1_time")
    task_name = getattr(args, "task", "same")
    if task_name != settings.task.task:
        settings.task = dataclasses.replace(settings.task, task=task_name)
    if args.epochs is not None:
        if args.epochs < 1:
            raise UserError(f"--epochs: expected a positive integer, got {args.epochs}")
        settings.epochs = args.epochs
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: CUDA is not available on this machine")
    return settings


def results_table(results: dict[str, dict[str, Any]]) -> str:
    """Model, parameters, multiply-adds, test top-1, gap to C2D, training time."""
    base = results.get("c2d_tiny", {}).get("test_top1")
    lines = [
        f"{'model':<20} {'params':>9} {'MACs':>8} {'top-1':>7} {'vs C2D':>7} {'train':>7}",
    ]
    for name, r in results.items():
        gap = "" if base is None or name == "c2d_tiny" else f"{100 * (r['test_top1'] - base):+.1f}"
        lines.append(
            f"{name:<20} {r['params'] / 1e3:>8.0f}k {r['macs'] / 1e6:>7.1f}M "
            f"{100 * r['test_top1']:>6.1f}% {gap:>7} {r['train_time_s']:>6.0f}s"
        )
    return "\n".join(lines)


def attention_outputs(
    settings: DemoSettings,
    models: dict[str, torch.nn.Module],
    data: dict[str, tuple[torch.Tensor, torch.Tensor]],
    manifest: dict[str, Any],
    root: Path,
    run_dir: Path,
    device: torch.device,
) -> tuple[list[dict[str, Any]], dict[str, dict[str, float]]]:
    """``attention.png`` for the first non-local model and attention statistics for each."""
    figure: list[dict[str, Any]] = []
    nl_name = next((n for n in settings.models if "_nl" in n), None)
    if nl_name is not None:
        recs = manifest["splits"]["test"][: settings.figure_clips]
        figure = plot_attention(
            models[nl_name], root, data["test"][0][: len(recs)], [{**r} for r in recs],
            manifest["classes"], run_dir / "attention.png", device,
        )  # fmt: skip
    stats = {}
    for name in (n for n in settings.models if "_nl" in n):
        n = min(len(data["test"][0]), 300)
        stats[name] = st = attention_statistics(
            models[name], data["test"][0][:n], manifest["splits"]["test"][:n], device
        )
        print(
            f"{name}: mean attention cue -> last digit {st['cue_to_last_digit']:.3f}, "
            f"last digit -> cue {st['last_digit_to_cue']:.3f} (uniform {st['uniform']:.3f})",
            flush=True,
        )
    return figure, stats


def train_all(
    settings: DemoSettings,
    data: dict[str, tuple[torch.Tensor, torch.Tensor]],
    device: torch.device,
    seed: int,
    progress: bool,
    init: dict[str, torch.Tensor] | None,
    run_dir: Path,
    class_names: list[str],
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], dict[str, torch.nn.Module]]:
    """Train every model of ``settings`` from the same initialisation; test top-1 and cost."""
    from nlnet.analysis.cost import model_cost

    task = settings.task
    results: dict[str, dict[str, Any]] = {}
    logs: dict[str, dict[str, Any]] = {}
    models: dict[str, torch.nn.Module] = {}
    for name in settings.models:
        model, log = train_model(
            name, settings, data, device, seed, progress, init, run_dir, class_names
        )
        top1 = accuracy(model, *data["test"], device)
        cost = model_cost(
            name,
            (task.num_frames, task.size, task.size),
            num_classes=task.num_classes,
            width=settings.width,
        )
        results[name] = {
            "params": cost.params,
            "macs": cost.macs,
            "test_top1": top1,
            "val_top1": log["val_top1"][-1],
            "train_time_s": log["train_time_s"],
        }
        logs[name] = log
        models[name] = model
        shutil.copyfile(log["checkpoint"], run_dir / f"{name}.pt")  # for nlnet visualize
        print(f"{name}: test top-1 {100 * top1:.1f}% ({log['train_time_s']:.0f}s)", flush=True)

    return results, logs, models


def run_demo(args: argparse.Namespace) -> dict[str, Any]:
    """Run the demo; returns the summary that is also written to ``summary.json``."""
    t_start = time.perf_counter()
    settings = settings_from_args(args)
    device = torch.device(args.device)
    threads = _threads(args.threads)
    torch.set_num_threads(threads)
    progress = not args.no_progress
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = Path(args.output_dir) / f"demo-{stamp}-seed{args.seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    task = settings.task
    print(
        f"nlnet demo: seed {args.seed}, {threads} thread(s), device {device}, run dir {run_dir}\n"
        f"task ({task.task}): {task.num_frames} frames of {task.size}x{task.size}; "
        f"{TASK_TEXT[task.task]} ({task.num_classes} classes, chance "
        f"{100 / task.num_classes:.0f}%)",
        flush=True,
    )

    t0 = time.perf_counter()
    root = prepare_digits(task, cache / f"digits-{task.fingerprint()}", progress=progress)
    workers = 2 if threads >= 2 else 0  # decode in parallel on idle cores
    data = {s: load_split(root, s, task, progress, workers) for s in ("train", "val", "test")}
    data_time = time.perf_counter() - t0
    manifest = read_manifest(root)
    class_names = manifest["classes"]
    print(
        f"data: {root} ({len(data['train'][0])} train / {len(data['val'][0])} val / "
        f"{len(data['test'][0])} test clips, {data_time:.0f}s)",
        flush=True,
    )

    init, pre_log = None, None
    if settings.pretrain_frames > 0 and settings.pretrain_epochs > 0:
        init, pre_log = pretrain_2d(settings, device, args.seed, progress, run_dir)
        print(
            f"2D pre-training: {pre_log['frames']} frames x {pre_log['epochs']} epochs, "
            f"top-1 {100 * pre_log['train_top1']:.0f}% ({pre_log['time_s']:.0f}s)",
            flush=True,
        )
    results, logs, models = train_all(
        settings, data, device, args.seed, progress, init, run_dir, class_names
    )
    plot_curves(logs, run_dir / "curves.png")
    attention_stats, attn_stats = attention_outputs(
        settings, models, data, manifest, root, run_dir, device
    )
    table = results_table(results)
    total = time.perf_counter() - t_start
    print("\n" + table + f"\n\ntotal wall time {total:.0f}s; outputs in {run_dir}", flush=True)
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    summary = {
        "seed": args.seed,
        "quick": bool(args.quick),
        "device": str(device),
        "threads": threads,
        "settings": {
            **{k: v for k, v in dataclasses.asdict(settings).items() if k != "task"},
            "task": task.to_dict(),
        },
        "dataset": str(root),
        "class_names": class_names,
        "data_time_s": data_time,
        "pretrain": pre_log,
        "results": results,
        "curves": logs,
        "attention_figure": attention_stats,
        "attention_statistics": attn_stats,
        "table": table,
        "total_time_s": total,
        "load_average": load,
        "platform": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "machine": platform.machine(), "cpus": os.cpu_count()},
    }  # fmt: skip
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary
