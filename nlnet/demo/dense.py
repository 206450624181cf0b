"""The dense demos: segmentation with and without one non-local block, on real digit scans.

Both run on the dense digits task (:mod:`nlnet.data.digits.dense`: 64x64 images of
scikit-learn's handwritten-digit scans, PNG masks and COCO json, no download), where whether a
digit is ``match`` (the boxed cue's class) or ``other`` depends on a digit elsewhere in the
image, up to ~60 pixels away. A convolution sees a bounded neighbourhood, the non-local block
every position (Wang et al., "Non-local Neural Networks", CVPR 2018, arXiv:1711.07971, Sec. 3:
non-local operations capture long-range dependencies directly). One runner, two recipes:

* :class:`SegDemoSettings` (``nlnet demo --task segmentation``): ``seg_tiny`` (the guide's
  head on a tiny dilated ResNet, receptive field 45 pixels) and ``seg_tiny_nl`` (the same with
  the head's non-local block); measured figures in docs/dense.md.
* :class:`UNetDemoSettings` (``nlnet demo --task unet``): ``unet2d`` (2 poolings, receptive
  field about 50 pixels) and ``unet2d_nl``, the practitioner's first use case (a block after
  the encoder's bottleneck); figures in docs/usecases.md.

For each seed both models start from one network pre-trained to name each digit pixel by its
own class (:func:`pretrain`, the paper's ImageNet initialisation in miniature, Sec. 4.1), keep
its pre-trained part fixed (the engine's ``train.freeze``) and train the rest from the same
seed through the engine's loop (``task: segmentation``, AdamW, one-cycle rate); they are tested
on images whose digit scans were never seen in training (mIoU, mean Dice, per-class figures).
Seed ``k`` draws its own images, initialisation and data order. Outputs in ``out_dir``:
``summary.json``, per seed ``seed<k>/<model>.pt`` and ``predictions.png`` (image, truth, both
predictions and the block's attention from a ``match`` pixel).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from nlnet.data.atomic import atomic_path
from nlnet.data.digits.dense import (
    CATEGORIES,
    PRETRAIN_CLASS_NAMES,
    DenseDigitsConfig,
    digit_class_masks,
    seed_data,
)
from nlnet.data.segmentation.images import SegmentationFolder
from nlnet.engine.jobs import Jobs, write_summary
from nlnet.models import create_model

__all__ = ["CLASS_NAMES", "DenseDemoSettings", "SegDemoSettings", "UNetDemoSettings", "demo_config", "fit_and_test", "format_table", "pretrain", "run_dense_demo"]  # fmt: skip

CLASS_NAMES: list[str] = ["background", *(n for _, n in CATEGORIES)]


@dataclass(frozen=True)
class DenseDemoSettings:
    """What both dense demos' recipes have: one-cycle AdamW over ``epochs`` of the task's
    training images at a peak rate ``lr``, from a network pre-trained ``pretrain_epochs`` to
    name each digit (0: none). ``block`` holds options of the non-local model's block over the
    guide's (:class:`nlnet.layers.BlockOptions` fields, e.g. ``{"init": "w_z"}``); ``models``
    which of the pair train (a screening sweep of a block option can leave out the baseline).

    A recipe class sets :attr:`task`, :attr:`pair`, which keys of the pre-trained network are
    handed on (:attr:`handed_on`, or all but :attr:`heads`), the keys that keep their own
    initialisation (:attr:`kept`), and the setting (:attr:`freeze_key`) that keeps the prefixes
    :attr:`freezes` fixed (:meth:`frozen`).
    """

    epochs: int = 16
    batch_size: int = 32
    lr: float = 1e-2
    block: dict[str, Any] = field(default_factory=dict)
    models: tuple[str, ...] = ()
    pretrain_epochs: int = 4
    pretrain_lr: float = 1e-2
    data: DenseDigitsConfig = field(default_factory=DenseDigitsConfig)

    task: ClassVar[str] = ""
    pair: ClassVar[tuple[str, str]] = ("", "")
    handed_on: ClassVar[tuple[str, ...]] = ()
    heads: ClassVar[tuple[str, ...]] = ()
    kept: ClassVar[tuple[str, ...]] = ()
    freeze_key: ClassVar[str] = ""
    freezes: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        from nlnet.layers import BlockOptions

        for name, low in (("epochs", 1), ("batch_size", 1), ("pretrain_epochs", 0)):
            if getattr(self, name) < low:
                raise ValueError(f"{name}: expected >= {low}, got {getattr(self, name)!r}")
        for name in ("lr", "pretrain_lr"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: expected > 0, got {getattr(self, name)!r}")
        BlockOptions.of(self.block)  # a typo or a bad value fails here, before any training
        key = self.freeze_key
        if self.frozen() and self.pretrain_epochs < 1:
            raise ValueError(f"{key}: needs pretrain_epochs >= 1 (a pre-trained network to keep); "
                             f"set {key}=false before pretrain_epochs=0, or pretrain_epochs=N "
                             f"before {key}=true")  # fmt: skip
        models = self.models or self.pair
        if any(m not in self.pair for m in models):
            raise ValueError(f"models: expected names among {list(self.pair)}, got {list(models)}")
        object.__setattr__(self, "models", tuple(m for m in self.pair if m in models))

    def model_options(self, name: str) -> dict[str, Any]:
        """``create_model`` options of ``name`` besides its classes (the block's for the pair's
        non-local model)."""
        return {"block": dict(self.block)} if name == self.pair[1] and self.block else {}

    def frozen(self) -> tuple[str, ...]:
        """Key prefixes kept at their pre-trained values while the task trains (:attr:`freezes`
        when the recipe's :attr:`freeze_key` setting is on)."""
        return self.freezes if self.freeze_key and getattr(self, self.freeze_key) else ()

    def hands_on(self, key: str) -> bool:
        """Whether the pre-trained network's ``key`` initialises the task's models."""
        return key.startswith(self.handed_on) if self.handed_on else not key.startswith(self.heads)


@dataclass(frozen=True)
class SegDemoSettings(DenseDemoSettings):
    """The segmentation demo's recipe (measured figures: docs/dense.md): a peak rate of 1e-2
    over 16 epochs of 2000 images; ``seg_tiny``'s backbone pre-trained 4 epochs and then kept
    fixed (``freeze_backbone``; its BatchNorm statistics still follow the task's images). The
    recipe since the 30-seed screening (docs/dense.md, "The pre-trained, fixed backbone
    screened"): without the pre-training two of 13 screening seeds learned the relation only
    partly or not at all; with the backbone trained too, the block's model falls back to the
    plateau on some seeds.
    """

    freeze_backbone: bool = True

    task: ClassVar[str] = "segmentation"
    pair: ClassVar[tuple[str, str]] = ("seg_tiny", "seg_tiny_nl")
    handed_on: ClassVar[tuple[str, ...]] = ("backbone.",)
    kept: ClassVar[tuple[str, ...]] = ("head.",)
    freeze_key: ClassVar[str] = "freeze_backbone"
    freezes: ClassVar[tuple[str, ...]] = ("backbone.",)

    @classmethod
    def quick(cls) -> SegDemoSettings:
        """Seconds: a smoke test (its numbers mean nothing)."""
        data = DenseDigitsConfig(size=48, num_train=16, num_val=4, num_test=8)
        return cls(epochs=1, batch_size=4, pretrain_epochs=1, data=data)


@dataclass(frozen=True)
class UNetDemoSettings(DenseDemoSettings):
    """The U-Net demo's recipe (measured figures and times: docs/usecases.md).

    The segmentation demo's schedule with a peak rate of 2e-2, deep supervision at the
    bottleneck (nnU-Net's practice), and both models starting from one U-Net pre-trained to
    name each digit whose **encoder stays fixed** (``freeze_encoder``). Relating a digit to the
    cue needs features that say which digit is where; nothing in the task's labels asks for them
    (every cue is "cue", whatever its digit), so training from scratch sat on a plateau on most
    seeds, and pre-trained features fine-tuned at this rate were lost within the first epochs (a
    linear probe of the bottleneck names a digit's class 99% right after the pre-training, 60-65%
    after the task's training). Chosen on validation figures of screening seeds 100-109.
    """

    lr: float = 2e-2
    base_channels: int = 8
    depth: int = 2
    #: Keep the pre-trained encoder fixed (its levels and the bottleneck's convolutions; the
    #: block, decoder and classifiers train).
    freeze_encoder: bool = True
    #: A second classifier on the bottleneck's output in the training loss (nnU-Net's deep
    #: supervision, ``UNet(deep_supervision=True)``).
    deep_supervision: bool = True

    task: ClassVar[str] = "unet"
    pair: ClassVar[tuple[str, str]] = ("unet2d", "unet2d_nl")
    heads: ClassVar[tuple[str, ...]] = ("classifier.", "aux_classifier.")
    kept: ClassVar[tuple[str, ...]] = ("classifier.", "aux_classifier.", "bottleneck.non_local.")
    freeze_key: ClassVar[str] = "freeze_encoder"
    freezes: ClassVar[tuple[str, ...]] = ("encoder.", "bottleneck.")

    def model_options(self, name: str) -> dict[str, Any]:
        return {"base_channels": self.base_channels, "depth": self.depth,
                "deep_supervision": self.deep_supervision, **super().model_options(name)}  # fmt: skip

    @classmethod
    def quick(cls) -> UNetDemoSettings:
        """Seconds: a smoke test (its numbers mean nothing)."""
        data = DenseDigitsConfig(num_train=8, num_val=4, num_test=4)
        return cls(base_channels=4, epochs=1, batch_size=4, pretrain_epochs=1, data=data)


def demo_config(
    name: str, s: DenseDemoSettings, root: Path, run_dir: Path, seed: int, device: str,
    pretrain: bool = False,
) -> Any:  # fmt: skip
    """The recipe as an engine config (``task: segmentation``); ``pretrain``: the digit-naming
    pre-training's (its classes, rate and epochs, nothing frozen)."""
    from nlnet.engine.config import config_from_dict

    classes = PRETRAIN_CLASS_NAMES if pretrain else CLASS_NAMES
    lr, epochs = (s.pretrain_lr, s.pretrain_epochs) if pretrain else (s.lr, s.epochs)
    return config_from_dict({
        "task": "segmentation",
        "class_names": list(classes),
        "model": {"name": name, "num_classes": len(classes), "overrides": s.model_options(name)},
        "data": {"root": str(root)},
        "optim": {"optimizer": "adamw", "schedule": "onecycle", "lr": lr, "weight_decay": 1e-4,
                  "epochs": epochs, "steps": [], "pct_start": 0.1},
        "train": {"batch_size": s.batch_size, "seed": seed, "workers": 0, "log_every": 10_000,
                  "ckpt_every": 0, "sync_bn": False, "device": device, "progress": False,
                  "val_split": None, "freeze": [] if pretrain else list(s.frozen())},
        "eval": {"batch_size": 64, "workers": 0},
        "output_dir": str(run_dir),
    })  # fmt: skip


def pretrain(
    s: DenseDemoSettings, root: Path, run_dir: Path, seed: int, device: str
) -> dict[str, torch.Tensor]:
    """Pre-train the pair's baseline to segment the training images' digits by their own class
    (:func:`~nlnet.data.digits.dense.digit_class_masks`) through the engine's loop: the demo's
    stand-in for the paper's ImageNet initialisation (Sec. 4.1), which gives both models
    features that name a digit before they learn its relation to the cue. A job of
    :class:`nlnet.engine.jobs.Jobs`.

    Returns:
        The weights handed on (CPU; :meth:`DenseDemoSettings.hands_on`).
    """
    from nlnet.engine.loop import train

    class DigitClasses(SegmentationFolder):
        by_name = digit_class_masks(root, "train")

        def read_mask(self, index: int) -> np.ndarray:
            return self.by_name[self.images[index].name]

    name = s.pair[0]
    data = DigitClasses(root, "train", num_classes=len(PRETRAIN_CLASS_NAMES))
    cfg = demo_config(name, s, root, run_dir, seed + 1, device, pretrain=True)
    torch.manual_seed(seed + 1)
    model = create_model(name, num_classes=len(PRETRAIN_CLASS_NAMES), **s.model_options(name))
    train(cfg, model=model, train_dataset=data, force=True)
    return {k: v.detach().cpu() for k, v in model.state_dict().items() if s.hands_on(k)}


def fit_and_test(
    name: str, s: DenseDemoSettings, root: Path, seed_dir: Path, seed: int, device: str,
    split: str = "test", init: dict[str, torch.Tensor] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One model of one seed: train on ``root``'s train split through the engine's loop, test on
    its ``split`` split, save the weights to ``seed_dir/<name>.pt``. A job of
    :class:`nlnet.engine.jobs.Jobs` (one thread, side by side). ``init``: the pre-trained
    weights (:func:`pretrain`); the keys under :attr:`DenseDemoSettings.kept` keep their own
    initialisation.

    Returns:
        ``{"seed", "model", "params", "train_s", "metrics", "state"}`` (``state`` on the CPU).
    """
    from torch.utils.data import DataLoader

    from nlnet.engine.loop import train
    from nlnet.engine.tasks.segmentation import SegmentationTask
    from nlnet.models.loading import load_partial

    if s.frozen() and init is None:
        raise ValueError(f"{s.freeze_key}: needs a pre-trained network (pretrain_epochs > 0)")
    seg = SegmentationTask(len(CLASS_NAMES), CLASS_NAMES, data={"root": str(root)})
    train_set = seg.build_dataset("train")
    loader = DataLoader(seg.build_dataset(split, "test"), batch_size=64, collate_fn=seg.collate)
    cfg = demo_config(name, s, root, seed_dir / name, seed, device)
    torch.manual_seed(seed)
    model = create_model(name, num_classes=len(CLASS_NAMES), **s.model_options(name))
    if init is not None:
        load_partial(model, init, s.kept, what=f"init of {name}")
    start = time.perf_counter()
    train(cfg, model=model, train_dataset=train_set, force=True)
    train_s = time.perf_counter() - start
    metrics = seg.evaluate(model, loader, device=torch.device(device))
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    with atomic_path(seed_dir / f"{name}.pt") as tmp:
        torch.save(state, tmp)
    return {"seed": seed, "model": name, "train_s": train_s, "metrics": metrics,
            "params": sum(p.numel() for p in model.parameters()), "state": state}  # fmt: skip


def _picture(path: Path, models: dict[str, nn.Module], test: SegmentationFolder) -> dict[str, Any]:
    """Image, truth, both predictions and the block's attention from a ``match`` pixel."""
    from nlnet.analysis.dense_visualize import pixel_attention, save_segmentation_figure

    item = test[0]
    image, truth = item["image"], item["mask"]
    ys, xs = np.nonzero(truth.numpy() == 2)  # a pixel of a "match" digit
    pixel = (int(ys[len(ys) // 2]), int(xs[len(xs) // 2]))
    preds = {}
    for name, model in models.items():
        with torch.no_grad():
            preds[name] = model.cpu().eval()(image[None]).argmax(1)[0].numpy()
    _, attention = pixel_attention(list(models.values())[-1], image, pixel)
    save_segmentation_figure(
        path, test.read_image(0), truth.numpy(), preds, attention, pixel, CLASS_NAMES
    )
    return {"picture": str(path), "query_pixel": pixel}


def run_dense_demo(
    seeds: Sequence[int] = (0,),
    settings: DenseDemoSettings | None = None,
    *,
    out_dir: str | os.PathLike = "runs/dense-demo",
    data_root: str | os.PathLike | None = None,
    pictures: bool = True,
    device: str = "cpu",
    jobs: int = 1,
    log: Callable[[str], None] = print,
    split: str = "test",
) -> dict[str, Any]:
    """Train the recipe's pair (the baseline and the non-local model) for each seed; test mIoU,
    mean Dice and per-class IoU and Dice.

    Args:
        seeds: data, initialisation and shuffling seeds.
        settings: the recipe (default :class:`SegDemoSettings`; ``settings.models`` train).
        out_dir: where checkpoints, pictures and ``summary.json`` go.
        data_root: the folder of the PNG/COCO folders, one per seed (default: a cache folder).
        pictures: write ``seed<k>/predictions.png`` (with both models).
        device: ``cpu``, ``cuda`` or ``cuda:N`` (training and evaluation).
        jobs: trainings side by side, one PyTorch thread each (CPU; one on a GPU): the figures
            do not depend on it.
        log: where progress lines go.
        split: the figures' split: ``"test"`` (reported seeds) or ``"val"`` (screening seeds:
            docs/demo.md, Protocol).

    Returns:
        ``{"task", "split", "settings", "data_roots", "runs": [{"seed", "model", "params",
        "train_s", "metrics"}...], "wall_s", "jobs"}`` (``metrics`` on ``split``).
    """
    if split not in ("test", "val"):
        raise ValueError(f"split: expected 'test' or 'val', got {split!r}")
    s = settings or SegDemoSettings()
    t0 = time.perf_counter()
    roots = {seed: seed_data(s.data, seed, data_root) for seed in seeds}
    log(f"data: {', '.join(map(str, roots.values()))} ({time.perf_counter() - t0:.0f} s)")
    out = Path(out_dir)
    with Jobs(jobs, device) as pool:
        inits = dict.fromkeys(seeds)
        if s.pretrain_epochs:
            calls = [(s, roots[seed], out / f"seed{seed}" / "pretrain", seed, device)
                     for seed in seeds]  # fmt: skip
            inits = dict(zip(seeds, pool.starmap(pretrain, calls)))
        calls = [(name, s, roots[seed], out / f"seed{seed}", seed, device, split, inits[seed])
                 for seed in seeds for name in s.models]  # fmt: skip
        runs = pool.starmap(fit_and_test, calls)
    for r in runs:
        m = r["metrics"]
        log(f"seed {r['seed']} {r['model']}: mIoU {m['mIoU']:.1f}, mDice {m['mDice']:.1f} "
            f"({r['train_s']:.0f} s)")  # fmt: skip
    states = [r.pop("state") for r in runs]  # the weights are in seed<k>/<model>.pt
    for seed in seeds if pictures and len(s.models) == 2 else ():
        seed_runs = [(r, state) for r, state in zip(runs, states) if r["seed"] == seed]
        models = {r["model"]: create_model(r["model"], num_classes=len(CLASS_NAMES), weights=state,
                                           **s.model_options(r["model"]))
                  for r, state in seed_runs}  # fmt: skip
        test = SegmentationFolder(roots[seed], split, num_classes=len(CLASS_NAMES))
        picture = out / f"seed{seed}" / "predictions.png"
        seed_runs[-1][0]["pictures"] = _picture(picture, models, test)
    summary = write_summary(out, {
        "task": s.task, "split": split, "settings": dataclasses.asdict(s),
        "data_roots": {str(k): str(v) for k, v in roots.items()}, "runs": runs,
        "wall_s": time.perf_counter() - t0, "jobs": pool.n,
    })  # fmt: skip
    log(format_table(runs))
    return summary


def format_table(runs: Sequence[dict[str, Any]]) -> str:
    """A text table: seed, model, mIoU, mean Dice, per-class IoU, training time."""
    keys = [f"iou_{n}" for n in CLASS_NAMES]
    head = f"{'seed':>4} {'model':<12} {'mIoU':>6} {'mDice':>6} "
    lines = [head + " ".join(f"{k[4:]:>10}" for k in keys) + f" {'train s':>8}"]
    for r in runs:
        m = r["metrics"]
        cells = " ".join(f"{m[k]:>10.1f}" for k in keys)
        lines.append(f"{r['seed']:>4} {r['model']:<12} {m['mIoU']:>6.1f} {m['mDice']:>6.1f} "
                     f"{cells} {r['train_s']:>8.0f}")  # fmt: skip
    return "\n".join(lines)
