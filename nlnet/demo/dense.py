"""The dense demo: semantic segmentation with and without one non-local block, on real digit scans.

``run_dense_demo("segmentation", seeds)`` writes the dense digits task
(:mod:`nlnet.data.digits.dense`: PNG images, PNG masks and COCO json) into a cache, reads it back
with :class:`nlnet.data.segmentation.images.SegmentationFolder`, trains ``seg_tiny`` (the guide's head on
a tiny dilated ResNet, receptive field 45 pixels) and ``seg_tiny_nl`` (the same with the head's
non-local block) from the same initialisation seed, and reports test mIoU and per-class IoU.

Whether a digit is ``match`` (the boxed cue's class) or ``other`` depends on a digit elsewhere in
the 64x64 image; the convolution-only model sees only 45 pixels around a position, the non-local
block every position (Wang et al., "Non-local Neural Networks", CVPR 2018, arXiv:1711.07971,
Sec. 3: non-local operations capture long-range dependencies directly). Outputs per seed in ``out_dir/seed<k>/``: ``<model>.pt``
(weights), ``predictions.png`` (image, ground truth, both predictions and the block's attention
from a pixel of a ``match`` digit); ``summary.json`` and the printed table cover all seeds.

Training is the engine's one loop (:func:`nlnet.engine.loop.train`, ``task: segmentation``) with
the demo's recipe as a config: AdamW (weight decay 1e-4), one-cycle rate (10% warm-up).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from nlnet.data.digits.dense import CATEGORIES, DenseDigitsConfig, seed_data
from nlnet.data.segmentation.images import SegmentationFolder
from nlnet.demo.jobs import Jobs, write_summary
from nlnet.engine.tasks.segmentation import SegmentationTask
from nlnet.models import create_model

__all__ = [
    "DEMO_EPOCHS",
    "DEMO_LR",
    "DENSE_MODELS",
    "SegDemoSettings",
    "cli_main",
    "dense_demo_config",
    "engine_fit",
    "fit_and_test",
    "run_dense_demo",
    "format_table",
]

#: Baseline and non-local model of each dense task.
DENSE_MODELS: dict[str, tuple[str, str]] = {"segmentation": ("seg_tiny", "seg_tiny_nl")}
CLASS_NAMES: list[str] = ["background", *(n for _, n in CATEGORIES)]
#: The demo's schedule: one-cycle AdamW to a peak rate of 1e-2 over 16 epochs (docs/dense.md:
#: the relation is learned after a plateau whose length depends on the seed; 12 epochs at 3e-3
#: ended before two of seeds 0-4 left it).
DEMO_EPOCHS: int = 16
DEMO_LR: float = 1e-2


@dataclass(frozen=True)
class SegDemoSettings:
    """The segmentation demo's recipe (measured figures: docs/dense.md).

    One-cycle AdamW over ``epochs`` of the task's 2000 training images, peak rate ``lr``; both
    models from the same initialisation seed. ``block`` holds options of ``seg_tiny_nl``'s
    block over the guide's (:class:`nlnet.layers.BlockOptions` fields, e.g. ``{"init":
    "w_z"}``); ``models`` which of the pair train (a screening sweep of a block option can
    leave out the baseline, which the option does not touch).
    """

    epochs: int = DEMO_EPOCHS
    batch_size: int = 32
    lr: float = DEMO_LR
    block: dict[str, Any] = field(default_factory=dict)
    models: tuple[str, ...] = ("seg_tiny", "seg_tiny_nl")
    #: Pre-training of ``seg_tiny`` to name each digit pixel by its own class (the U-Net demo's
    #: stand-in for the paper's ImageNet initialisation, Sec. 4.1), this many epochs (0: none);
    #: both models start from its backbone.  The recipe since the 30-seed screening (docs/dense.md,
    #: "The pre-trained, fixed backbone screened"): without it two of 13 screening seeds learned
    #: the relation only partly or not at all.
    pretrain_epochs: int = 4
    pretrain_lr: float = 1e-2
    #: With ``pretrain_epochs``: keep the pre-trained backbone's weights fixed (the head and its
    #: block train; the backbone's BatchNorm statistics still follow the task's images, as with
    #: the U-Net demo's ``train.freeze``).  Trained too, the backbone lets the block's model fall
    #: back to the plateau on some seeds (docs/dense.md).
    freeze_backbone: bool = True

    def __post_init__(self) -> None:
        from nlnet.layers import BlockOptions

        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError("epochs, batch_size: expected >= 1; lr: expected > 0")
        if self.pretrain_epochs < 0 or self.pretrain_lr <= 0:
            raise ValueError("pretrain_epochs: expected >= 0; pretrain_lr: expected > 0")
        if self.freeze_backbone and self.pretrain_epochs < 1:
            raise ValueError(
                "freeze_backbone: needs pretrain_epochs >= 1 (a backbone to keep); set "
                "freeze_backbone=false before pretrain_epochs=0, or pretrain_epochs=N before "
                "freeze_backbone=true"
            )
        BlockOptions.of(self.block)  # a typo or a bad value fails here, before any training
        pair = DENSE_MODELS["segmentation"]
        if not self.models or any(m not in pair for m in self.models):
            raise ValueError(f"models: expected names among {list(pair)}, got {list(self.models)}")
        object.__setattr__(self, "models", tuple(m for m in pair if m in self.models))

    @classmethod
    def quick(cls) -> SegDemoSettings:
        """Seconds: a smoke test (its numbers mean nothing)."""
        return cls(epochs=1, batch_size=4, pretrain_epochs=1)


def dense_demo_config(
    name: str, root: Path, run_dir: Path, *, num_classes: int, epochs: int, batch_size: int,
    lr: float, seed: int, device: str = "cpu", class_names: Sequence[str] = tuple(CLASS_NAMES),
    freeze: Sequence[str] = (),
) -> Any:  # fmt: skip
    """The dense demo's recipe as an engine config (``task: segmentation``)."""
    from nlnet.engine.config import config_from_dict

    return config_from_dict({
        "task": "segmentation",
        "class_names": list(class_names),
        "model": {"name": name, "num_classes": num_classes},
        "data": {"root": str(root)},
        "optim": {"optimizer": "adamw", "schedule": "onecycle", "lr": lr, "weight_decay": 1e-4,
                  "epochs": epochs, "steps": [], "pct_start": 0.1},
        "train": {"batch_size": batch_size, "seed": seed, "workers": 0, "log_every": 10_000,
                  "ckpt_every": 0, "sync_bn": False, "device": device, "progress": False,
                  "val_split": None, "freeze": list(freeze)},
        "eval": {"batch_size": 64, "workers": 0},
        "output_dir": str(run_dir),
    })  # fmt: skip


def engine_fit(
    model: nn.Module, name: str, train_set: SegmentationFolder, run_dir: Path, **recipe: Any
) -> dict[str, Any]:
    """Train ``model`` in place through the engine's loop; return the loop's summary."""
    from nlnet.engine.loop import train

    cfg = dense_demo_config(name, train_set.root, run_dir, **recipe)
    return train(cfg, model=model, train_dataset=train_set, force=True)


def _pictures(
    path: Path, models: dict[str, nn.Module], test: SegmentationFolder, index: int = 0
) -> dict[str, Any]:
    from nlnet.analysis.dense_visualize import pixel_attention, save_segmentation_figure

    item = test[index]
    image, truth = item["image"], item["mask"]
    ys, xs = np.nonzero(truth.numpy() == 2)  # a pixel of a "match" digit
    pixel = (int(ys[len(ys) // 2]), int(xs[len(xs) // 2]))
    preds = {}
    for name, model in models.items():
        model.cpu().eval()
        with torch.no_grad():
            preds[name] = model(image[None]).argmax(1)[0].numpy()
    nl_name = list(models)[-1]
    _, attention = pixel_attention(models[nl_name], image, pixel)
    save_segmentation_figure(
        path, test.read_image(index), truth.numpy(), preds, attention, pixel, CLASS_NAMES
    )
    return {"picture": str(path), "query_pixel": pixel}


#: The part of ``seg_tiny`` a pre-training hands on (its head's classes are not the task's).
_BACKBONE = "backbone."


def pretrain_backbone(
    root: Path, seed_dir: Path, seed: int, s: SegDemoSettings, device: str
) -> dict[str, torch.Tensor]:
    """Pre-train ``seg_tiny`` to segment the training images' digits by their own class
    (:func:`~nlnet.data.digits.dense.digit_class_masks`) through the engine's loop, the U-Net
    demo's stand-in for the paper's ImageNet initialisation (Sec. 4.1). A job of
    :class:`nlnet.demo.jobs.Jobs`.

    Returns:
        The backbone's weights (CPU), the initialisation of both models.
    """
    from nlnet.data.digits.dense import PRETRAIN_CLASS_NAMES, digit_class_masks

    class DigitClasses(SegmentationFolder):
        by_name = digit_class_masks(root, "train")

        def read_mask(self, index: int) -> np.ndarray:
            return self.by_name[self.images[index].name]

    data = DigitClasses(root, "train", num_classes=len(PRETRAIN_CLASS_NAMES))
    torch.manual_seed(seed + 1)
    model = create_model("seg_tiny", num_classes=len(PRETRAIN_CLASS_NAMES))
    engine_fit(model, "seg_tiny", data, seed_dir / "pretrain", num_classes=len(PRETRAIN_CLASS_NAMES),
               epochs=s.pretrain_epochs, batch_size=s.batch_size, lr=s.pretrain_lr, seed=seed + 1,
               device=device, class_names=PRETRAIN_CLASS_NAMES)  # fmt: skip
    return {k: v.detach().cpu() for k, v in model.state_dict().items() if k.startswith(_BACKBONE)}


def fit_and_test(
    name: str, root: Path, seed_dir: Path, seed: int, recipe: dict[str, Any], split: str = "test",
    init: dict[str, torch.Tensor] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One model of one seed: train through the engine's loop, test mIoU, save its weights to
    ``seed_dir/<name>.pt``. A job of :class:`nlnet.demo.jobs.Jobs` (one thread, side by side).
    ``init``: the pre-trained backbone (:func:`pretrain_backbone`); the head keeps its own
    initialisation. ``recipe``: :func:`dense_demo_config`'s keywords and ``block`` (the block's
    options).

    Returns:
        ``{"seed", "model", "params", "train_s", "metrics", "state"}`` (``state`` on the CPU).
    """
    seg = SegmentationTask(len(CLASS_NAMES), CLASS_NAMES, data={"root": str(root)})
    train_set = seg.build_dataset("train")
    test_loader = DataLoader(
        SegmentationFolder(root, split, num_classes=len(CLASS_NAMES)), batch_size=64,
        collate_fn=seg.collate,
    )  # fmt: skip
    recipe = dict(recipe)
    block = recipe.pop("block", None)  # the block's options (the non-local model only)
    torch.manual_seed(seed)
    model = create_model(name, **({"block": block} if block else {}))
    if init is not None:
        from nlnet.models.loading import load_partial

        load_partial(model, init, ("head.",), what=f"init of {name}")
    start = time.perf_counter()
    engine_fit(model, name, train_set, seed_dir / name, num_classes=len(CLASS_NAMES), seed=seed,
               **recipe)  # fmt: skip
    train_s = time.perf_counter() - start
    metrics = seg.evaluate(model, test_loader, device=torch.device(recipe["device"]))
    seed_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    torch.save(state, seed_dir / f"{name}.pt")
    return {"seed": seed, "model": name, "params": sum(p.numel() for p in model.parameters()),
            "train_s": train_s, "metrics": metrics, "state": state}  # fmt: skip


def run_dense_demo(
    task: str = "segmentation",
    seeds: Sequence[int] = (0, 1, 2),
    *,
    out_dir: str | os.PathLike = "runs/dense-demo",
    data: DenseDigitsConfig | None = None,
    data_root: str | os.PathLike | None = None,
    settings: SegDemoSettings | None = None,
    pictures: bool = True,
    device: str = "cpu",
    jobs: int = 1,
    log: Callable[[str], None] = print,
    split: str = "test",
) -> dict[str, Any]:
    """Train the baseline and the non-local model for each seed; test mIoU and per-class IoU.

    Seed ``k`` draws its own images (``DenseDigitsConfig(seed=k)``) and its own initialisation
    and data order, as the video demo does.

    ``jobs`` trainings run side by side, one PyTorch thread each
    (:class:`nlnet.demo.jobs.Jobs`, like the video and U-Net demos): the figures do not
    depend on it.

    Args:
        task: ``"segmentation"`` (the detection demo is not available yet).
        seeds: data, initialisation and shuffling seeds.
        out_dir: where checkpoints, pictures and ``summary.json`` go.
        data: the task's configuration (default :class:`DenseDigitsConfig`; its ``seed`` is
            replaced by each seed).
        data_root: the folder of the PNG/COCO folders, one per seed (default: a cache folder).
        settings: the recipe (default :class:`SegDemoSettings`; ``settings.models`` train).
        pictures: write ``predictions.png`` per seed.
        device: ``cpu``, ``cuda`` or ``cuda:N`` (training and evaluation).
        jobs: trainings side by side (CPU; one on a GPU).
        log: where progress lines go.
        split: the figures' split: ``"test"`` (reported seeds) or ``"val"`` (screening seeds:
            docs/demo.md, Protocol).

    Returns:
        ``{"runs": [{"seed", "model", "params", "train_s", "metrics"}...], "data_roots": ...}``
        (``metrics`` on ``split``).
    """
    if task not in DENSE_MODELS:
        raise ValueError(
            f"task: expected one of {sorted(DENSE_MODELS)} (the detection demo is not "
            f"available yet), got {task!r}"
        )
    if split not in ("test", "val"):
        raise ValueError(f"split: expected 'test' or 'val', got {split!r}")
    t0 = time.perf_counter()
    roots = {seed: seed_data(data or DenseDigitsConfig(), seed, data_root) for seed in seeds}
    log(f"data: {', '.join(map(str, roots.values()))} ({time.perf_counter() - t0:.0f} s)")
    out = Path(out_dir)
    jobs = jobs if device == "cpu" else 1
    s = settings or SegDemoSettings()
    recipe = {"epochs": s.epochs, "batch_size": s.batch_size, "lr": s.lr, "device": device,
              "freeze": (_BACKBONE,) if s.freeze_backbone else ()}  # fmt: skip
    with Jobs(jobs) as pool:
        inits = dict.fromkeys(seeds)
        if s.pretrain_epochs:
            calls = [(roots[seed], out / f"seed{seed}", seed, s, device) for seed in seeds]
            inits = dict(zip(seeds, pool.starmap(pretrain_backbone, calls)))
        calls = [(name, roots[seed], out / f"seed{seed}", seed,
                  {**recipe, "block": s.block if name == DENSE_MODELS[task][1] else None}, split,
                  inits[seed]) for seed in seeds for name in s.models]  # fmt: skip
        runs = pool.starmap(fit_and_test, calls)
    for seed in seeds:
        test_set = SegmentationFolder(roots[seed], split, num_classes=len(CLASS_NAMES))
        models: dict[str, nn.Module] = {}
        seed_runs = [r for r in runs if r["seed"] == seed]
        for r in seed_runs:
            log(f"seed {seed} {r['model']}: mIoU {r['metrics']['mIoU']:.1f} ({r['train_s']:.0f} s)")
            block = s.block if r["model"] == DENSE_MODELS[task][1] and s.block else None
            options = {"block": block} if block else {}
            models[r["model"]] = create_model(r["model"], weights=r.pop("state"), **options)
        if pictures and len(models) == 2:
            path = out / f"seed{seed}" / "predictions.png"
            seed_runs[-1]["pictures"] = _pictures(path, models, test_set)
    summary = write_summary(out, {
        "task": task,
        "split": split,
        "settings": dataclasses.asdict(s),
        "data_roots": {str(k): str(v) for k, v in roots.items()},
        "runs": runs,
        "wall_s": time.perf_counter() - t0,
        "jobs": jobs,
    })  # fmt: skip
    log(format_table(runs))
    return summary


def format_table(runs: Sequence[dict[str, Any]]) -> str:
    """A text table: seed, model, mIoU and per-class IoU, training time."""
    keys = [f"iou_{n}" for n in CLASS_NAMES]
    head = f"{'seed':>4} {'model':<12} {'mIoU':>6} " + " ".join(f"{k[4:]:>10}" for k in keys)
    lines = [head + f" {'train s':>8}"]
    for r in runs:
        m = r["metrics"]
        cells = " ".join(f"{m[k]:>10.1f}" for k in keys)
        lines.append(
            f"{r['seed']:>4} {r['model']:<12} {m['mIoU']:>6.1f} {cells} {r['train_s']:>8.0f}"
        )
    return "\n".join(lines)


def cli_main(args: Any, settings: SegDemoSettings) -> int:
    """``nlnet demo --task segmentation``: both models side by side, one thread each
    (``--threads`` jobs), into ``<output-dir>/dense-demo-<timestamp>-seed<k>/``."""
    from nlnet.demo.jobs import jobs_for
    from nlnet.engine.errors import UserError

    try:
        jobs = jobs_for(args.threads)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError("--device cuda: CUDA is not available on this machine")
    torch.set_num_threads(1)  # one thread per job (nlnet.demo.jobs)
    data = DenseDigitsConfig(size=48, num_train=16, num_val=4, num_test=8) if args.quick else None
    if args.epochs:
        settings = dataclasses.replace(settings, epochs=args.epochs)
    out = Path(args.output_dir) / f"dense-demo-{time.strftime('%Y%m%d-%H%M%S')}-seed{args.seed}"
    run_dense_demo(
        "segmentation", [args.seed], out_dir=out, data=data, settings=settings, jobs=jobs,
        data_root=Path(args.cache_dir) / "dense" if args.cache_dir else None, device=args.device,
    )  # fmt: skip
    return 0
