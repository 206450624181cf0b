"""The training loop and the Python API ``train(cfg)`` / ``evaluate(cfg, checkpoint)``.

The recipe is the paper's ("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971), Section 4.1): SGD with momentum 0.9 and
weight decay 1e-4, an iteration-based schedule whose learning rate is multiplied by 0.1 at fixed
iterations (0.01, then x0.1 at 150k and 300k of 400k iterations), dropout 0.5 before the
classifier and BatchNorm trained.  Section 5.1 fine-tunes 128-frame clips with all BN layers frozen
(``train.freeze_bn``) and Section 5.2 trains Charades with a per-category sigmoid
(``train.loss: bce``).  Added for practical use: linear warm-up, gradient accumulation, mixed
precision on CUDA, DistributedDataParallel, exact resume.

Exact resume.  The data order of an epoch is a permutation seeded by ``seed + epoch``, and the
random augmentation of an item is seeded by ``(seed, epoch, index)``
(:class:`SeededDataset`), so the batches do not depend on the number of workers or on where the
run was interrupted.  A checkpoint stores, besides the weights, optimizer, scheduler and AMP
scaler, the epoch, the iteration, the number of mini-batches of the epoch already consumed and
the generator states of every process; ``resume`` restores all of them and skips exactly the
consumed part of the epoch, so the final weights equal those of an uninterrupted run.
"""

from __future__ import annotations

import bisect
import contextlib
import csv
import json
import math
import os
import random
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from nlnet.data.datasets import collate_skip_bad
from nlnet.engine import distributed as du
from nlnet.engine.checkpoint import (
    CheckpointMismatchError,
    get_rng_state,
    load_backbone,
    load_checkpoint,
    load_model_weights,
    load_training_state,
    save_checkpoint,
    set_rng_state,
)
from nlnet.engine.config import Config, config_to_dict, save_config
from nlnet.engine.config import replace as replace_config
from nlnet.engine.evaluator import (
    autocast_context,
    build_eval_loader,
    run_evaluation,
    unpack_batch,
)
from nlnet.engine.metrics import ThroughputMeter

__all__ = [
    "WarmupMultiStepLR",
    "SeededDataset",
    "MetricsLogger",
    "build_model",
    "build_optimizer",
    "build_datasets_for",
    "freeze_batchnorm",
    "set_train_mode",
    "compute_loss",
    "train",
    "evaluate",
]

CHECKPOINT_DIR = "checkpoints"
LAST = "last.pt"
FINAL = "final.pt"


# --------------------------------------------------------------------------------------------
# schedule, optimizer, model
# --------------------------------------------------------------------------------------------
class WarmupMultiStepLR(torch.optim.lr_scheduler.LRScheduler):
    """Multi-step decay with optional linear warm-up, stepped once per iteration.

    ``lr(it) = base_lr * gamma ** #{s in steps : s <= it} * w(it)`` with
    ``w(it) = warmup_factor + (1 - warmup_factor) * it / warmup_iters`` during the warm-up and 1
    afterwards.  The paper (Section 4.1) uses ``steps = (150k, 300k)``, ``gamma = 0.1`` and no
    warm-up; Charades (Section 5.2) steps every 75k iterations.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        steps: tuple[int, ...] | list[int] = (),
        gamma: float = 0.1,
        warmup_iters: int = 0,
        warmup_factor: float = 0.1,
        last_epoch: int = -1,
    ) -> None:
        self.steps = [int(s) for s in steps]
        if self.steps != sorted(self.steps):
            raise ValueError(f"steps: expected increasing iterations, got {steps}")
        self.gamma = float(gamma)
        self.warmup_iters = int(warmup_iters)
        self.warmup_factor = float(warmup_factor)
        super().__init__(optimizer, last_epoch)

    def factor(self, iteration: int) -> float:
        """Learning-rate multiplier at ``iteration``."""
        f = self.gamma ** bisect.bisect_right(self.steps, iteration)
        if iteration < self.warmup_iters:
            alpha = iteration / self.warmup_iters
            f *= self.warmup_factor * (1.0 - alpha) + alpha
        return f

    def get_lr(self) -> list[float]:
        f = self.factor(self.last_epoch)
        return [base * f for base in self.base_lrs]


_NORM_TYPES = (nn.modules.batchnorm._BatchNorm, nn.GroupNorm, nn.LayerNorm)


def freeze_batchnorm(model: nn.Module) -> int:
    """Freeze every BatchNorm layer: eval mode (running statistics) and no gradient for its
    scale/shift (Section 5.1: "we freeze all BN layers").  Returns the number of layers."""
    n = 0
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.eval()
            for p in m.parameters(recurse=False):
                p.requires_grad_(False)
            n += 1
    return n


def set_train_mode(model: nn.Module, freeze_bn: bool = False) -> None:
    """``model.train()``, keeping BatchNorm layers in eval mode when ``freeze_bn``."""
    model.train()
    if freeze_bn:
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.eval()


def build_model(cfg: Config) -> nn.Module:
    """``create_model(cfg.model.name, num_classes, pretrained_2d, dropout, **overrides)``, then
    the optional initialisation from ``cfg.model.pretrained`` (head reset if asked)."""
    from nlnet.models.registry import create_model

    kwargs = dict(cfg.model.overrides)
    kwargs.setdefault("dropout", cfg.train.dropout)
    model = create_model(
        cfg.model.name,
        num_classes=cfg.model.num_classes,
        pretrained_2d=cfg.model.pretrained_2d,
        **kwargs,
    )
    init_from_pretrained(model, cfg)
    return model


def init_from_pretrained(model: nn.Module, cfg: Config) -> None:
    """Apply ``model.pretrained`` (+ ``model.reset_head``) to a freshly built model."""
    if not cfg.model.pretrained:
        return
    ckpt = load_checkpoint(cfg.model.pretrained)
    if cfg.model.reset_head:
        load_backbone(model, ckpt, exclude=cfg.model.head_names)
    else:
        try:
            load_model_weights(model, ckpt)
        except CheckpointMismatchError as exc:
            raise CheckpointMismatchError(
                f"model.pretrained={cfg.model.pretrained!r}: {exc}; set model.reset_head=true to "
                f"keep a fresh classifier ({', '.join(cfg.model.head_names)})"
            ) from exc


def build_optimizer(model: nn.Module, cfg: Config) -> torch.optim.SGD:
    """SGD, momentum 0.9, weight decay 1e-4 (Section 4.1) over the trainable parameters.

    With ``optim.weight_decay_bn`` set, normalisation scales/shifts get that decay instead.
    """
    o = cfg.optim
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model: no trainable parameter (all frozen?)")
    if o.weight_decay_bn is None or o.weight_decay_bn == o.weight_decay:
        groups: list[dict[str, Any]] = [{"params": params, "weight_decay": o.weight_decay}]
    else:
        norm_ids = {
            id(p)
            for m in model.modules()
            if isinstance(m, _NORM_TYPES)
            for p in m.parameters(recurse=False)
        }
        groups = [
            {
                "params": [p for p in params if id(p) not in norm_ids],
                "weight_decay": o.weight_decay,
            },
            {"params": [p for p in params if id(p) in norm_ids], "weight_decay": o.weight_decay_bn},
        ]
        groups = [g for g in groups if g["params"]]
    return torch.optim.SGD(groups, lr=o.lr, momentum=o.momentum, nesterov=o.nesterov)


def compute_loss(logits: torch.Tensor, target: torch.Tensor, loss: str) -> torch.Tensor:
    """Cross-entropy over classes (``ce``), or per-category sigmoid + BCE (``bce``, Section 5.2)."""
    logits = logits.float()
    if loss == "ce":
        if target.dim() != 1:
            raise ValueError(
                "train.loss=ce expects integer class targets (B,), got a target of shape "
                f"{tuple(target.shape)}; use train.loss=bce for multi-label data"
            )
        return F.cross_entropy(logits, target.long())
    if loss == "bce":
        if target.shape != logits.shape:
            raise ValueError(
                f"train.loss=bce expects multi-hot targets of shape {tuple(logits.shape)}, got "
                f"{tuple(target.shape)}"
            )
        return F.binary_cross_entropy_with_logits(logits, target.float())
    raise ValueError(f"loss: expected 'ce' or 'bce', got {loss!r}")


# --------------------------------------------------------------------------------------------
# deterministic data
# --------------------------------------------------------------------------------------------
class SeededDataset(Dataset):
    """Wrap a dataset so item ``i`` of epoch ``e`` sees generators seeded by ``(seed, e, i)``.

    The sampler yields ``(index, item_seed)`` pairs; before fetching, the python, numpy and torch
    generators are seeded with ``item_seed`` (and restored afterwards in the main process), so
    random augmentation is reproducible regardless of workers, ranks or resumption.
    """

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: Any) -> Any:
        if not isinstance(key, tuple):
            return self.dataset[key]
        index, seed = key
        in_main = torch.utils.data.get_worker_info() is None
        if in_main:
            saved = (random.getstate(), np.random.get_state(), torch.get_rng_state())
        random.seed(seed)
        np.random.seed(seed % (2**32))
        torch.manual_seed(seed)
        try:
            return self.dataset[index]
        finally:
            if in_main:
                random.setstate(saved[0])
                np.random.set_state(saved[1])
                torch.set_rng_state(saved[2])

    def __getattr__(self, name: str) -> Any:
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)


def _seed_worker(worker_id: int) -> None:
    seed = torch.initial_seed() % (2**32)
    np.random.seed(seed)
    random.seed(seed)


def build_datasets_for(cfg: Config, split: str, mode: str) -> Dataset:
    """``nlnet.data.build_dataset(cfg.data, split, mode)`` with ``test_clips``/``test_crops``
    from ``cfg.eval`` (Section 4.1: 10 clips, full-frame or 3 crops)."""
    from nlnet.data.datasets import build_dataset

    data = dict(cfg.data)
    data["test_clips"] = cfg.eval.clips
    data["test_crops"] = cfg.eval.crops
    return build_dataset(data, split, mode=mode)


def _check_classes(cfg: Config, dataset: Any, what: str) -> None:
    n = getattr(dataset, "num_classes", None)
    if isinstance(n, int) and n != cfg.model.num_classes:
        raise ValueError(
            f"model.num_classes={cfg.model.num_classes} but the {what} dataset has {n} classes; "
            f"set model.num_classes={n}"
        )


def _class_names(cfg: Config, *datasets: Any) -> list[str] | None:
    if cfg.class_names is not None:
        return list(cfg.class_names)
    for ds in datasets:
        names = getattr(ds, "classes", None) or getattr(ds, "class_names", None)
        if names is not None and len(names) == cfg.model.num_classes:
            return [str(n) for n in names]
    return None


# --------------------------------------------------------------------------------------------
# metrics files
# --------------------------------------------------------------------------------------------
class MetricsLogger:
    """Appends records to ``metrics.jsonl``, mirrors them in ``metrics.csv``, draws the curves."""

    def __init__(self, run_dir: str | os.PathLike, enabled: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.enabled = enabled
        self.jsonl = self.run_dir / "metrics.jsonl"
        self.csv = self.run_dir / "metrics.csv"
        self.png = self.run_dir / "curves.png"

    def truncate_after(self, iteration: int) -> None:
        """Drop records past ``iteration`` (written by a run that was killed before its next
        checkpoint) so a resumed run does not duplicate them."""
        if not self.enabled or not self.jsonl.exists():
            return
        keep = [r for r in self.records() if int(r.get("iter", 0)) <= iteration]
        with open(self.jsonl, "w") as f:
            for r in keep:
                f.write(json.dumps(r) + "\n")
        self.write_csv()

    def log(self, record: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.jsonl, "a") as f:
            f.write(json.dumps(_jsonable(record)) + "\n")

    def records(self) -> list[dict[str, Any]]:
        if not self.jsonl.exists():
            return []
        out = []
        for line in self.jsonl.read_text().splitlines():
            line = line.strip()
            if line:
                with contextlib.suppress(json.JSONDecodeError):
                    out.append(json.loads(line))
        return out

    def write_csv(self) -> None:
        if not self.enabled:
            return
        records = self.records()
        columns: list[str] = []
        for r in records:
            columns += [k for k in r if k not in columns]
        with open(self.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(records)

    def plot(self) -> Path | None:
        """Training loss, learning rate and validation metrics against the iteration."""
        if not self.enabled:
            return None
        records = self.records()
        train = [r for r in records if r.get("kind") == "train"]
        val = [r for r in records if r.get("kind") == "val"]
        if not train and not val:
            return None
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3 if val else 2, figsize=(13 if val else 9, 3.6))
        if train:
            its = [r["iter"] for r in train]
            axes[0].plot(its, [r["loss"] for r in train], label="train loss")
            axes[1].plot(its, [r["lr"] for r in train], color="tab:orange")
        axes[0].set(xlabel="iteration", ylabel="loss", title="training loss")
        axes[1].set(xlabel="iteration", ylabel="learning rate", title="learning rate")
        if any(r["lr"] > 0 for r in train):
            axes[1].set_yscale("log")
        if val:
            keys = [
                k
                for k in ("video_top1", "video_top5", "clip_top1", "video_mAP", "clip_mAP")
                if any(r.get(k) is not None for r in val)
            ]
            for k in keys:
                pts = [(r["iter"], r[k]) for r in val if r.get(k) is not None]
                axes[2].plot(*zip(*pts), marker="o", label=k)
            axes[2].set(xlabel="iteration", ylabel="%", title="validation")
            if keys:
                axes[2].legend()
        fig.tight_layout()
        fig.savefig(self.png, dpi=100)
        plt.close(fig)
        return self.png


def _jsonable(record: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in record.items():
        if isinstance(v, torch.Tensor):
            v = v.item() if v.numel() == 1 else v.tolist()
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[k] = v
    return out


# --------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------
def _say(msg: str) -> None:
    if du.is_main_process():
        from tqdm.auto import tqdm

        tqdm.write(msg)


def _resolve_resume(resume: bool | str | os.PathLike | None, run_dir: Path) -> Path | None:
    if not resume:
        return None
    path = run_dir / CHECKPOINT_DIR / LAST if resume is True else Path(resume)
    if path.is_dir():
        path = path / CHECKPOINT_DIR / LAST if (path / CHECKPOINT_DIR).is_dir() else path / LAST
    if not path.is_file():
        if resume is True:
            warnings.warn(
                f"resume: no checkpoint at {path}; starting a new run", RuntimeWarning, stacklevel=3
            )
            return None
        raise FileNotFoundError(f"resume: no checkpoint at {str(path)!r}")
    return path


def _iter_batches(loader: DataLoader) -> Iterator[Any]:
    yield from loader


def train(
    cfg: Config,
    *,
    resume: bool | str | os.PathLike | None = None,
    model: nn.Module | None = None,
    train_dataset: Dataset | None = None,
    val_dataset: Dataset | None = None,
    collate_fn: Callable | None = None,
) -> dict[str, Any]:
    """Train ``cfg.model`` on ``cfg.data`` and return a summary.

    Args:
        cfg: the resolved configuration (:func:`nlnet.engine.config.load_config`).
        resume: ``True`` continues from ``<output_dir>/checkpoints/last.pt`` (a fresh run if there
            is none), a path continues from that checkpoint, ``None``/``False`` starts anew.
        model: use this network instead of ``create_model(cfg.model.name, ...)``.
        train_dataset: use this dataset instead of ``build_dataset(cfg.data, "train")``.
        val_dataset: use this dataset instead of ``build_dataset(cfg.data, "val")`` (built only
            when ``cfg.data`` has a ``val`` entry).
        collate_fn: batch collation (default: ``nlnet.data.collate_skip_bad``).

    Returns:
        ``{"run_dir", "iterations", "epochs", "train_loss", "val" (metrics or None),
        "checkpoint", "time_s", "clips_per_s", "skipped", "stopped"}``.
    """
    t_start = time.perf_counter()
    info = du.init_distributed(cfg.train.device)
    try:
        return _train(cfg, info, resume, model, train_dataset, val_dataset, collate_fn, t_start)
    finally:
        du.cleanup(info)


def _train(
    cfg: Config,
    info: du.DistInfo,
    resume: Any,
    model: nn.Module | None,
    train_dataset: Dataset | None,
    val_dataset: Dataset | None,
    collate_fn: Callable | None,
    t_start: float,
) -> dict[str, Any]:
    tc, oc = cfg.train, cfg.optim
    device = info.device
    run_dir = Path(cfg.output_dir)
    main = info.is_main
    if tc.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    elif device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed clip sizes: let cuDNN pick kernels
    amp = tc.amp
    if amp != "none" and device.type != "cuda":
        warnings.warn(
            f"train.amp={amp} is for CUDA; training in float32 on {device}",
            RuntimeWarning,
            stacklevel=3,
        )
        amp = "none"

    # -- model (same initial weights on every rank; DDP also broadcasts rank 0's) -----------
    random.seed(tc.seed)
    np.random.seed(tc.seed % 2**32)
    torch.manual_seed(tc.seed)
    if model is None:
        model = build_model(cfg)
    else:
        init_from_pretrained(model, cfg)
    model.to(device)
    if tc.freeze_bn:
        freeze_batchnorm(model)
    elif tc.sync_bn:
        model = du.convert_sync_batchnorm(model, device)
    optimizer = build_optimizer(model, cfg)
    scheduler = WarmupMultiStepLR(optimizer, oc.steps, oc.gamma, oc.warmup_iters, oc.warmup_factor)
    scaler = torch.amp.GradScaler("cuda", enabled=(amp == "fp16"))
    ddp_model = du.wrap_ddp(model, device)

    # -- data ---------------------------------------------------------------------------------
    if train_dataset is None:
        train_dataset = build_datasets_for(cfg, tc.split, "train")
    if val_dataset is None and tc.val_split:
        val_dataset = build_datasets_for(cfg, tc.val_split, "test")
    _check_classes(cfg, train_dataset, "training")
    if val_dataset is not None:
        _check_classes(cfg, val_dataset, "validation")
    collate_fn = collate_fn or collate_skip_bad
    class_names = _class_names(cfg, train_dataset, val_dataset)
    sampler = du.ResumableDistributedSampler(
        len(train_dataset), info.world_size, info.rank, shuffle=True, seed=tc.seed, with_seeds=True
    )
    seeded = SeededDataset(train_dataset)
    batches_per_epoch = len(sampler) // tc.batch_size
    steps_per_epoch = batches_per_epoch // tc.accum_steps
    if steps_per_epoch == 0:
        raise ValueError(
            f"train: the training set ({len(train_dataset)} items over {info.world_size} "
            f"process(es)) is smaller than one step of train.batch_size={tc.batch_size} x "
            f"train.accum_steps={tc.accum_steps}"
        )
    usable_batches = steps_per_epoch * tc.accum_steps
    max_iters = oc.epochs * steps_per_epoch if oc.epochs > 0 else oc.max_iters

    # -- run directory, resume ------------------------------------------------------------------
    logger = MetricsLogger(run_dir, enabled=main)
    epoch, iteration, batch_in_epoch = 0, 0, 0
    epoch_skipped, total_skipped = 0, 0
    # running loss sum / clip count of the epoch, kept on the device (no sync per step)
    epoch_loss_t = torch.zeros((), dtype=torch.float64, device=device)
    epoch_count_t = 0
    ckpt_path = _resolve_resume(resume, run_dir)
    if ckpt_path is not None:
        ckpt = load_checkpoint(ckpt_path, map_location="cpu")
        pos = load_training_state(
            ckpt,
            model=model,
            model_name=cfg.model.name,
            num_classes=cfg.model.num_classes,
            optimizer=optimizer,
            scheduler=scheduler,
            scaler=scaler,
            restore_rng=False,
        )
        epoch, iteration, batch_in_epoch = pos["epoch"], pos["iteration"], pos["batch_in_epoch"]
        per_rank = ckpt.get("extra", {}).get("ranks") or []
        if per_rank and len(per_rank) != info.world_size:
            warnings.warn(
                f"resume: the checkpoint was written by {len(per_rank)} process(es), this run has "
                f"{info.world_size}; training continues but not exactly as the original run",
                RuntimeWarning,
                stacklevel=3,
            )
        mine = per_rank[info.rank] if len(per_rank) == info.world_size else None
        if mine is not None:
            set_rng_state(mine["rng"])
            epoch_loss_t.fill_(float(mine["loss_sum"]))
            epoch_count_t = int(mine["loss_count"])
            epoch_skipped, total_skipped = int(mine["epoch_skipped"]), int(mine["total_skipped"])
        elif "rng" in ckpt:
            set_rng_state(ckpt["rng"])
        logger.truncate_after(iteration)
        _say(f"resumed from {ckpt_path} at iteration {iteration} (epoch {epoch})")
    else:
        random.seed(tc.seed + info.rank)
        np.random.seed((tc.seed + info.rank) % 2**32)
        torch.manual_seed(tc.seed + info.rank)
    if main:
        save_config(cfg, run_dir / "config.yaml")
    cfg_dict = config_to_dict(cfg)

    def checkpoint(path: Path) -> Path | None:
        state = {
            "rng": get_rng_state(),
            "loss_sum": float(epoch_loss_t),
            "loss_count": epoch_count_t,
            "epoch_skipped": epoch_skipped,
            "total_skipped": total_skipped,
        }
        ranks = du.all_gather_object(state)
        if not main:
            return None
        return save_checkpoint(
            path,
            model=model,
            model_name=cfg.model.name,
            num_classes=cfg.model.num_classes,
            optimizer=optimizer,
            scheduler=scheduler,
            scaler=scaler,
            epoch=epoch,
            iteration=iteration,
            batch_in_epoch=batch_in_epoch,
            config=cfg_dict,
            class_names=class_names,
            rng_state=state["rng"],
            extra={"ranks": ranks, "world_size": info.world_size},
        )

    def validate() -> dict[str, Any] | None:
        if val_dataset is None:
            return None
        loader = build_eval_loader(
            val_dataset, cfg.eval.batch_size, cfg.eval.workers, collate_fn, device.type == "cuda"
        )
        metrics = run_evaluation(
            model,
            loader,
            device,
            multi_label=tc.loss == "bce",
            amp=amp,
            progress=tc.progress,
            desc="val",
        )
        set_train_mode(model, tc.freeze_bn)
        logger.log({"kind": "val", "iter": iteration, "epoch": epoch, **metrics})
        _say(f"val @ {iteration}: {_fmt_metrics(metrics)}")
        return metrics

    # -- loop ---------------------------------------------------------------------------------
    bar = None
    if main and tc.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=max_iters, initial=iteration, desc="train", dynamic_ncols=True)
    set_train_mode(model, tc.freeze_bn)
    speed = ThroughputMeter(window=max(tc.log_every, 2))
    window_loss = torch.zeros((), dtype=torch.float64, device=device)
    window_count = 0
    last_clip_shape: tuple[int, ...] | None = None
    start_iteration = iteration
    stopped = False
    val_metrics: dict[str, Any] | None = None
    last_ckpt: Path | None = None
    train_time = 0.0
    clips_seen = 0
    t_loop = time.perf_counter()

    def epoch_summary(final_epoch: int, t_epoch: float) -> None:
        red = du.all_reduce_sum(
            torch.tensor(
                [float(epoch_loss_t), float(epoch_count_t), float(epoch_skipped)],
                dtype=torch.float64,
            )
        ).tolist()
        loss_avg = red[0] / red[1] if red[1] else math.nan
        logger.log(
            {
                "kind": "epoch",
                "iter": iteration,
                "epoch": final_epoch,
                "loss": loss_avg,
                "skipped": int(red[2]),
                "time_s": time.perf_counter() - t_epoch,
            }
        )
        _say(
            f"epoch {final_epoch}: iteration {iteration}/{max_iters}, loss {loss_avg:.4f}, "
            f"skipped {int(red[2])} bad video(s)"
        )
        logger.write_csv()

    try:
        while iteration < max_iters and not stopped:
            sampler.set_epoch(epoch)
            if hasattr(train_dataset, "set_epoch"):
                train_dataset.set_epoch(epoch)  # per-(seed, epoch, item) augmentation
            sampler.set_start(batch_in_epoch * tc.batch_size)
            gen = torch.Generator()
            gen.manual_seed(tc.seed * 1000003 + epoch)
            loader = DataLoader(
                seeded,
                batch_size=tc.batch_size,
                sampler=sampler,
                num_workers=tc.workers,
                collate_fn=collate_fn,
                pin_memory=device.type == "cuda",
                drop_last=True,
                worker_init_fn=_seed_worker,
                generator=gen,
                persistent_workers=False,
            )
            batches = _iter_batches(loader)
            t_epoch = time.perf_counter()
            while batch_in_epoch + tc.accum_steps <= usable_batches and iteration < max_iters:
                optimizer.zero_grad(set_to_none=True)
                n_clips = 0
                t_step = time.perf_counter()
                for micro in range(tc.accum_steps):
                    clip, target, _index, n_bad = unpack_batch(next(batches))
                    epoch_skipped += n_bad
                    total_skipped += n_bad
                    sync = micro == tc.accum_steps - 1
                    ctx = (
                        ddp_model.no_sync()
                        if (not sync and ddp_model is not model)
                        else contextlib.nullcontext()
                    )
                    empty = clip is None or clip.shape[0] == 0
                    if empty and ddp_model is model:
                        continue  # nothing to learn from; no gradient contribution
                    if empty:
                        if last_clip_shape is None:
                            raise RuntimeError(
                                "a whole micro-batch of bad videos before any valid one under "
                                "DDP; check the dataset"
                            )
                        clip = torch.zeros(last_clip_shape)
                    with ctx:
                        clip = clip.to(device, non_blocking=True)
                        with autocast_context(device, amp):
                            logits = ddp_model(clip)  # (B, num_classes)
                        if empty:
                            loss = logits.float().sum() * 0.0
                        else:
                            target = target.to(device, non_blocking=True)
                            loss = compute_loss(logits, target, tc.loss)
                            last_clip_shape = tuple(clip.shape)
                        scaler.scale(loss / tc.accum_steps).backward()
                    if not empty:
                        n = int(clip.shape[0])
                        n_clips += n
                        window_loss += loss.detach().double() * n
                        window_count += n
                        epoch_loss_t += loss.detach().double() * n
                        epoch_count_t += n
                batch_in_epoch += tc.accum_steps
                if oc.clip_grad_norm > 0:
                    scaler.unscale_(optimizer)
                    nn.utils.clip_grad_norm_(
                        [p for p in model.parameters() if p.requires_grad], oc.clip_grad_norm
                    )
                lr = optimizer.param_groups[0]["lr"]  # the rate of this iteration
                if n_clips > 0 or ddp_model is not model:  # else: only bad videos, no gradient
                    scaler.step(optimizer)
                    scaler.update()
                scheduler.step()
                iteration += 1
                clips_seen += n_clips
                train_time += time.perf_counter() - t_step
                speed.update(n_clips * info.world_size)
                if bar is not None:
                    bar.update(1)
                if iteration % tc.log_every == 0 or iteration == max_iters:
                    stats = du.all_reduce_sum(
                        torch.stack(
                            [
                                window_loss,
                                torch.tensor(
                                    float(window_count), device=device, dtype=torch.float64
                                ),
                            ]
                        )
                    ).tolist()
                    loss_avg = stats[0] / stats[1] if stats[1] else math.nan
                    if not math.isfinite(loss_avg):
                        raise FloatingPointError(
                            f"training loss is {loss_avg} at iteration {iteration}; lower "
                            "optim.lr or check the data"
                        )
                    window_loss.zero_()
                    window_count = 0
                    record = {
                        "kind": "train",
                        "iter": iteration,
                        "epoch": epoch,
                        "loss": loss_avg,
                        "lr": lr,
                        "clips_per_s": speed.rate,
                        "time_s": time.perf_counter() - t_start,
                    }
                    if device.type == "cuda":
                        record["max_mem_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
                    logger.log(record)
                    if bar is not None:
                        bar.set_postfix(
                            loss=f"{loss_avg:.4f}", lr=f"{lr:.2e}", clips_s=f"{speed.rate:.1f}"
                        )
                at_end = iteration == max_iters
                if tc.eval_every and iteration % tc.eval_every == 0 and not at_end:
                    val_metrics = validate()
                if batch_in_epoch + tc.accum_steps > usable_batches:
                    # epoch boundary: the checkpoint must point at the next epoch's start
                    epoch_summary(epoch, t_epoch)
                    epoch += 1
                    batch_in_epoch = 0
                    epoch_loss_t.zero_()
                    epoch_count_t = 0
                    epoch_skipped = 0
                    t_epoch = time.perf_counter()
                    epoch_done = True
                else:
                    epoch_done = False
                stop = bool(tc.stop_after) and iteration - start_iteration >= tc.stop_after
                due = bool(tc.ckpt_every) and iteration % tc.ckpt_every == 0
                if (due or stop) and not at_end:
                    last_ckpt = checkpoint(run_dir / CHECKPOINT_DIR / LAST)
                if stop and not at_end:
                    stopped = True
                    _say(
                        f"stopping after {tc.stop_after} iteration(s) (train.stop_after); "
                        "continue with --resume"
                    )
                    break
                if epoch_done:
                    break
            del batches, loader
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        if info.world_size == 1:
            _say("interrupted; the last checkpoint is kept (continue with --resume)")
        raise
    if bar is not None:
        bar.close()
    if not stopped and batch_in_epoch > 0:
        epoch_summary(epoch, t_loop)  # the last, partial epoch
    loop_time = time.perf_counter() - t_loop

    if not stopped:
        if val_dataset is not None:
            val_metrics = validate()
        last_ckpt = checkpoint(run_dir / CHECKPOINT_DIR / FINAL)
        if main:
            # last.pt points at the finished run too, so a repeated --resume is a no-op
            checkpoint_path = run_dir / CHECKPOINT_DIR / LAST
            if checkpoint_path.exists() or tc.ckpt_every:
                import shutil

                tmp = checkpoint_path.with_suffix(".pt.tmp")
                shutil.copyfile(last_ckpt, tmp)
                os.replace(tmp, checkpoint_path)
    logger.write_csv()
    png = logger.plot() if not stopped else None
    du.barrier()
    total_skipped_all = int(
        du.all_reduce_sum(torch.tensor([float(total_skipped)], dtype=torch.float64)).item()
    )
    rate = clips_seen * info.world_size / train_time if train_time > 0 else math.nan
    records = logger.records() if main else []
    train_losses = [r["loss"] for r in records if r.get("kind") == "train"]
    summary = {
        "run_dir": str(run_dir),
        "iterations": iteration,
        "max_iters": max_iters,
        "epochs": epoch,
        "train_loss": train_losses[-1] if train_losses else None,
        "val": val_metrics,
        "checkpoint": str(last_ckpt) if last_ckpt is not None else None,
        "curves": str(png) if png is not None else None,
        "time_s": time.perf_counter() - t_start,
        "loop_time_s": loop_time,
        "clips_per_s": rate,
        "skipped": total_skipped_all,
        "stopped": stopped,
        "world_size": info.world_size,
    }
    if main:
        with open(run_dir / "summary.json", "w") as f:
            json.dump(_jsonable(summary), f, indent=2)
    return summary


def _fmt_metrics(metrics: Mapping[str, Any]) -> str:
    keys = [k for k in metrics if k.startswith(("clip_", "video_")) and not k.endswith("count")]
    return (
        ", ".join(f"{k} {metrics[k]:.2f}" for k in keys)
        + f" (skipped {metrics.get('skipped', 0):.0f})"
    )


# --------------------------------------------------------------------------------------------
# evaluation API
# --------------------------------------------------------------------------------------------
def evaluate(
    cfg: Config,
    checkpoint: str | os.PathLike | Mapping[str, Any],
    *,
    model: nn.Module | None = None,
    dataset: Dataset | None = None,
    split: str | None = None,
    collate_fn: Callable | None = None,
) -> dict[str, Any]:
    """Multi-clip testing of a checkpoint (Section 4.1): clip- and video-level metrics.

    Args:
        cfg: configuration; ``cfg.eval`` gives clips, crops, batch size and the split, and
            ``cfg.data`` the dataset.  The checkpoint's model name and class count must match
            ``cfg.model`` (a clear error otherwise).
        checkpoint: a ``.pt`` written by :func:`train` (or a loaded one).
        model: use this network instead of ``create_model``.
        dataset: use this dataset instead of ``build_dataset(cfg.data, split)``.
        split: dataset split (default ``cfg.eval.split``).
        collate_fn: batch collation (default ``nlnet.data.collate_skip_bad``).

    Returns:
        The metrics of :func:`nlnet.engine.evaluator.run_evaluation` plus ``checkpoint`` and
        ``split``.
    """
    info = du.init_distributed(cfg.train.device)
    try:
        ckpt = load_checkpoint(checkpoint, map_location="cpu")
        from nlnet.engine.checkpoint import check_compatible

        check_compatible(ckpt, cfg.model.name, cfg.model.num_classes)
        if model is None:
            # the weights come from the checkpoint: skip the initialisation files
            bare = replace_config(cfg, **{"model.pretrained": None, "model.pretrained_2d": None})
            model = build_model(bare)
        load_model_weights(model, ckpt)
        model.to(info.device)
        split = split or cfg.eval.split
        if dataset is None:
            dataset = build_datasets_for(cfg, split, "test")
        _check_classes(cfg, dataset, split)
        loader = build_eval_loader(
            dataset,
            cfg.eval.batch_size,
            cfg.eval.workers,
            collate_fn or collate_skip_bad,
            info.device.type == "cuda",
        )
        metrics = run_evaluation(
            model,
            loader,
            info.device,
            multi_label=cfg.train.loss == "bce",
            amp=cfg.train.amp if info.device.type == "cuda" else "none",
            progress=cfg.train.progress,
            desc=f"eval {split}",
        )
        metrics["split"] = split
        metrics["checkpoint"] = str(checkpoint) if not isinstance(checkpoint, Mapping) else None
        return metrics
    finally:
        du.cleanup(info)
