"""The U-Net demo: segmentation with and without the guide's bottleneck block, on real digit scans.

The practitioner's first use case puts a non-local block (reduction 2, sub-sampling 2) after the
last block of a U-Net's encoder, so that a structure's label can use evidence far away in the
image. ``run_unet_demo(seeds)`` tests that on the built-in dense digits task
(:mod:`nlnet.data.digits.dense`: 64x64 images of scikit-learn's real handwritten-digit scans,
no download), where a digit's label -- ``match`` or ``other`` -- depends on a boxed cue digit
elsewhere in the image, up to ~60 pixels away.

The CPU-sized U-Net (``unet2d`` with 2 poolings and 8 channels in the first level) has a
theoretical receptive field of about 50 pixels, so the convolutions alone cannot always relate a
digit to the cue; ``unet2d_nl`` adds the block after its bottleneck (16x16 grid, 8x8 pooled
keys). Both start from one U-Net pre-trained to name each digit (:func:`pretrain_unet`, the
paper's ImageNet initialisation in miniature, Sec. 4.1), keep its encoder fixed
(the engine's ``train.freeze``), and train the rest from the same seed through the engine's loop
(``task: segmentation``, AdamW, one-cycle rate, deep supervision at the bottleneck); they are
tested on images whose digit scans were never seen in training: mIoU, mean Dice over the four
classes, and the Dice of ``match`` / ``other``.

Outputs in ``out_dir``: ``summary.json``, ``predictions.png`` (image, truth, both predictions and
the block's attention from a ``match`` pixel, last seed) and each model's weights.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from nlnet.data.digits.dense import PRETRAIN_CLASS_NAMES, digit_class_masks

__all__ = ["UNetDemoSettings", "run_unet_demo", "format_unet_table"]

MODELS: tuple[str, str] = ("unet2d", "unet2d_nl")
CLASS_NAMES: list[str] = ["background", "cue", "match", "other"]


@dataclass(frozen=True)
class UNetDemoSettings:
    """Sizes and recipe (measured figures and times: docs/usecases.md).

    The segmentation demo's schedule (one-cycle AdamW, 16 epochs of 2000 images) with a peak rate
    of 2e-2, deep supervision at the bottleneck (nnU-Net's practice), and both models starting
    from one U-Net **pre-trained to name each digit** (4 epochs; the paper's ImageNet
    initialisation in miniature, Sec. 4.1) whose **encoder stays fixed**. Relating a digit to
    the cue needs features that say which digit is where; nothing in the task's labels asks
    for them (every cue is "cue", whatever its digit), so training from scratch sat on a
    plateau on most seeds, and pre-trained features fine-tuned at this rate were lost within
    the first epochs (a linear probe of the bottleneck names a digit's class 99% right after
    the pre-training, 60-65% after the task's training). Chosen on validation figures of
    screening seeds 100-109 (docs/usecases.md, where the rejected candidates are too).
    """

    base_channels: int = 8
    depth: int = 2
    epochs: int = 16
    batch_size: int = 32
    lr: float = 2e-2
    num_train: int = 2000
    num_test: int = 300
    #: Options of the block of ``unet2d_nl`` over the guide's (``reduction=2, sub_sample=2``),
    #: e.g. ``{"bias": True}``: keyword arguments of :class:`~nlnet.layers.NonLocalBlock`.
    block: dict[str, Any] = field(default_factory=dict)
    #: Pre-training of the U-Net (both models start from it, as the paper's from ImageNet,
    #: Sec. 4.1): per-pixel digit classes of the training images, this many epochs (0: none).
    pretrain_epochs: int = 4
    pretrain_lr: float = 1e-2
    #: With ``pretrain_epochs``: keep the pre-trained encoder fixed (its levels and the
    #: bottleneck's convolutions; the block, decoder and classifiers train), so that the
    #: features that name each digit survive the task's training.
    freeze_encoder: bool = True
    #: Both models: a second classifier on the bottleneck's output in the training loss
    #: (``UNet(deep_supervision=True)``, nnU-Net's deep supervision).
    deep_supervision: bool = True

    def __post_init__(self) -> None:
        if self.freeze_encoder and self.pretrain_epochs < 1:
            raise ValueError(
                "freeze_encoder: needs pretrain_epochs >= 1 (a pre-trained encoder to keep); "
                "set freeze_encoder=false first to train the U-Net from scratch"
            )

    @classmethod
    def quick(cls) -> UNetDemoSettings:
        """Seconds: a smoke test (its numbers mean nothing)."""
        return cls(base_channels=4, epochs=1, batch_size=4, num_train=8, num_test=4,
                   pretrain_epochs=1)  # fmt: skip


def _overrides(name: str, s: UNetDemoSettings) -> dict[str, Any]:
    """The model's keyword arguments: its size, and the block's options for ``unet2d_nl``."""
    block = {"block": dict(s.block)} if name == MODELS[1] and s.block else {}
    return {"base_channels": s.base_channels, "depth": s.depth,
            "deep_supervision": s.deep_supervision, **block}  # fmt: skip


def _config(
    name: str, s: UNetDemoSettings, root: Path, run_dir: Path, seed: int, device: str,
    pretrain: bool = False,
):  # fmt: skip
    from nlnet.engine.config import config_from_dict

    classes = PRETRAIN_CLASS_NAMES if pretrain else CLASS_NAMES
    lr, epochs = (s.pretrain_lr, s.pretrain_epochs) if pretrain else (s.lr, s.epochs)
    return config_from_dict({
        "task": "segmentation",
        "class_names": classes,
        "model": {"name": name, "num_classes": len(classes), "overrides": _overrides(name, s)},
        "data": {"root": str(root)},
        "optim": {"optimizer": "adamw", "schedule": "onecycle", "lr": lr, "weight_decay": 1e-4,
                  "epochs": epochs, "steps": [], "pct_start": 0.1},
        "train": {"batch_size": s.batch_size, "seed": seed, "workers": 0, "log_every": 10_000,
                  "freeze": list(_ENCODER) if s.freeze_encoder and not pretrain else [],
                  "ckpt_every": 0, "device": device, "progress": False, "val_split": None},
        "eval": {"batch_size": 64, "workers": 0},
        "output_dir": str(run_dir),
    })  # fmt: skip


def _picture(path: Path, models: dict[str, nn.Module], test: Any) -> None:
    from nlnet.analysis.dense_visualize import pixel_attention, save_segmentation_figure

    item = test[0]
    image, truth = item["image"], item["mask"]
    ys, xs = np.nonzero(truth.numpy() == 2)  # a pixel of a "match" digit
    pixel = (int(ys[len(ys) // 2]), int(xs[len(xs) // 2]))
    preds = {}
    for name, model in models.items():
        with torch.no_grad():
            preds[name] = model.cpu().eval()(image[None]).argmax(1)[0].numpy()
    _, attention = pixel_attention(models[MODELS[1]], image, pixel)
    save_segmentation_figure(
        path, test.read_image(0), truth.numpy(), preds, attention, pixel, CLASS_NAMES
    )


#: The layers a pre-training does not hand on: its classes are not the task's.
_HEADS = ("classifier.", "aux_classifier.")
#: The U-Net's encoder: its levels and the bottleneck, whose new block the engine's
#: ``train.freeze`` leaves trainable.
_ENCODER = ("encoder.", "bottleneck.")


def pretrain_unet(
    s: UNetDemoSettings, root: Path, run_dir: Path, seed: int, device: str
) -> dict[str, torch.Tensor]:
    """Pre-train ``unet2d`` to segment the training images' digits by their own class
    (:func:`digit_class_masks`) through the engine's loop: the demo's stand-in for the paper's
    ImageNet initialisation (Sec. 4.1), which gives both models features that name a digit
    before they learn its relation to the cue. A job of :class:`nlnet.demo.jobs.Jobs`.

    Returns:
        The weights without the classifier (CPU), the initialisation of both models.
    """
    from nlnet.data.segmentation.images import SegmentationFolder
    from nlnet.engine.loop import train
    from nlnet.models import create_model

    class DigitClasses(SegmentationFolder):
        by_name = digit_class_masks(root, "train")

        def read_mask(self, index: int) -> np.ndarray:
            return self.by_name[self.images[index].name]

    data = DigitClasses(root, "train", num_classes=len(PRETRAIN_CLASS_NAMES))
    cfg = _config(MODELS[0], s, root, run_dir, seed + 1, device, pretrain=True)
    torch.manual_seed(seed + 1)
    model = create_model(MODELS[0], num_classes=len(PRETRAIN_CLASS_NAMES), **cfg.model.overrides)
    train(cfg, model=model, train_dataset=data, force=True)
    return {k: v.detach().cpu() for k, v in model.state_dict().items()
            if not k.startswith(_HEADS)}  # fmt: skip


def fit_and_test(
    name: str, s: UNetDemoSettings, root: Path, run_dir: Path, seed: int, device: str,
    split: str = "test", init: dict[str, torch.Tensor] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One model of one seed: train on ``root``'s train split through the engine's loop, test on
    its ``split`` split. A job of :class:`nlnet.demo.jobs.Jobs` (one thread, side by side).
    ``init``: the pre-trained weights (:func:`pretrain_unet`); the classifier and the block
    keep their own initialisation.

    Returns:
        ``{"seed", "model", "params", "train_s", "metrics", "state"}`` (``state`` on the CPU).
    """
    from nlnet.data.segmentation.images import SegmentationFolder
    from nlnet.engine.loop import train
    from nlnet.engine.tasks.segmentation import SegmentationTask
    from nlnet.models import create_model
    from nlnet.models.loading import load_partial

    seg = SegmentationTask(len(CLASS_NAMES), CLASS_NAMES, data={"root": str(root)})
    train_set = seg.build_dataset("train")
    test = SegmentationFolder(root, split, num_classes=len(CLASS_NAMES))
    loader = DataLoader(test, batch_size=64, collate_fn=seg.collate)
    cfg = _config(name, s, root, run_dir, seed, device)
    torch.manual_seed(seed)
    model = create_model(name, num_classes=len(CLASS_NAMES), **cfg.model.overrides)
    if init is not None:
        load_partial(model, init, (*_HEADS, "bottleneck.non_local."), what=f"init of {name}")
    if s.freeze_encoder and init is None:
        raise ValueError("freeze_encoder: needs a pre-trained encoder (pretrain_epochs > 0)")
    start = time.perf_counter()
    train(cfg, model=model, train_dataset=train_set, force=True)
    train_s = time.perf_counter() - start
    metrics = seg.evaluate(model, loader, device=torch.device(device))
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return {"seed": seed, "model": name, "train_s": train_s, "metrics": metrics,
            "params": sum(p.numel() for p in model.parameters()), "state": state}  # fmt: skip


def run_unet_demo(
    seeds: Sequence[int] = (0,),
    *,
    out_dir: str | os.PathLike = "runs/unet-demo",
    settings: UNetDemoSettings | None = None,
    data_root: str | os.PathLike | None = None,
    device: str = "cpu",
    pictures: bool = True,
    jobs: int = 1,
    log: Callable[[str], None] = print,
    split: str = "test",
) -> dict[str, Any]:
    """Train ``unet2d`` and ``unet2d_nl`` for each seed; test mIoU and Dice.

    ``jobs`` trainings run side by side, one PyTorch thread each
    (:class:`nlnet.demo.jobs.Jobs`): the figures do not depend on it. Seed ``k`` draws its own
    images (``DenseDigitsConfig(seed=k)``), initialisation and data order; ``split="val"``
    gives the validation figures of screening seeds (docs/demo.md, Protocol).

    Returns:
        ``{"settings", "split", "data_roots", "runs": [{"seed", "model", "params", "train_s",
        "metrics"}], "wall_s"}`` (``metrics`` on ``split``).
    """
    from nlnet.data.digits.dense import DenseDigitsConfig, seed_data
    from nlnet.data.segmentation.images import SegmentationFolder
    from nlnet.demo.jobs import Jobs, write_summary
    from nlnet.models import create_model

    if split not in ("test", "val"):
        raise ValueError(f"split: expected 'test' or 'val', got {split!r}")
    s = settings or UNetDemoSettings()
    t0 = time.perf_counter()
    data = DenseDigitsConfig(num_train=s.num_train, num_val=s.num_test, num_test=s.num_test)
    roots = {seed: seed_data(data, seed, data_root) for seed in seeds}
    out = Path(out_dir)
    jobs = jobs if device == "cpu" else 1
    with Jobs(jobs) as pool:
        inits: list[Any] = [None] * len(seeds)
        if s.pretrain_epochs:
            pre = [(s, roots[seed], out / f"seed{seed}" / "pretrain", seed, device)
                   for seed in seeds]  # fmt: skip
            inits = pool.starmap(pretrain_unet, pre)
        calls = [(name, s, roots[seed], out / f"seed{seed}" / name, seed, device, split, init)
                 for seed, init in zip(seeds, inits) for name in MODELS]  # fmt: skip
        runs = pool.starmap(fit_and_test, calls)
    for r in runs:
        m = r["metrics"]
        log(f"seed {r['seed']} {r['model']}: mIoU {m['mIoU']:.1f}, mDice {m['mDice']:.1f} "
            f"({r['train_s']:.0f} s)")  # fmt: skip
    if pictures:  # the last seed's models
        models: dict[str, nn.Module] = {}
        for r in runs[-len(MODELS) :]:
            models[r["model"]] = create_model(
                r["model"], num_classes=len(CLASS_NAMES), weights=r["state"],
                **_overrides(r["model"], s),
            )  # fmt: skip
        test = SegmentationFolder(roots[seeds[-1]], split, num_classes=len(CLASS_NAMES))
        _picture(out / "predictions.png", models, test)
    for r in runs:
        del r["state"]
    wall = time.perf_counter() - t0
    summary = write_summary(
        out,
        {
            "settings": asdict(s),
            "split": split,
            "runs": runs,
            "wall_s": wall,
            "jobs": jobs,
            "data_roots": {str(k): str(v) for k, v in roots.items()},
        },  # fmt: skip
    )
    log(format_unet_table(runs))
    return summary


def format_unet_table(runs: Sequence[dict[str, Any]]) -> str:
    """seed, model, mIoU, mDice, Dice of match / other, training time."""
    lines = [f"{'seed':>4} {'model':<10} {'mIoU':>6} {'mDice':>6} {'match':>6} {'other':>6} "
             f"{'train s':>7}"]  # fmt: skip
    for r in runs:
        m = r["metrics"]
        lines.append(f"{r['seed']:>4} {r['model']:<10} {m['mIoU']:>6.1f} {m['mDice']:>6.1f} "
                     f"{m['dice_match']:>6.1f} {m['dice_other']:>6.1f} {r['train_s']:>7.0f}")  # fmt: skip
    return "\n".join(lines)
