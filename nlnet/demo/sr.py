"""The super-resolution demo: EDSR with and without a non-local block, on self-similar photographs.

``run_sr_demo(seeds)`` trains a CPU-sized EDSR (fewer, narrower residual blocks) with the
practitioner's super-resolution block (``edsr_baseline_nl``: one block, reduction 4, in the
middle of the body) and, as the baseline at equal parameters and compute, the same network with a
plain bottleneck residual unit of the block's size in its place (``edsr_baseline_res1``, the
control of Sec. 4.1 of the paper), from the same initialisation seed, through the engine's loop (``task: super_resolution``, L1 loss), on random
patches of photographs shipped in scikit-image (nothing downloaded). By default
(``photos="self_similar"``) these are the images with long-range self-similarity that the
non-local super-resolution literature targets -- textures (brick, grass, gravel) and text (text,
page) -- each cut into disjoint train / val / test bands
(:func:`nlnet.data.super_resolution.dataset.self_similar_photos`); ``photos="builtin"`` is the
older set of everyday photographs, trained on some and tested on others
(:data:`~nlnet.data.super_resolution.dataset.BUILTIN_SPLITS`, no val split). Both models are
tested on tiles of the ``split`` band (``"test"``, or ``"val"`` for screening, docs/demo.md,
Protocol): PSNR and SSIM on the Y channel with a ``upscale``-pixel border crop (scikit-image's
metrics), beside bicubic up-sampling of the same inputs.

The two models' parameters differ by 0.02 % and their multiply-adds by 1.5 % on a training patch
and 2.9 % on a test tile (the block's pairwise term grows with the image; :func:`sr_model_cost`);
``summary.json`` records both counts.

Outputs in ``out_dir``: ``summary.json`` (per seed and model: PSNR/SSIM, bicubic, training
wall and CPU time; per model: parameters and multiply-adds), ``crops.png`` (low-resolution
input, bicubic, EDSR + residual unit, EDSR + NL, original, side by side on crops of the evaluated tiles, from
the last seed) and each model's weights.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["PHOTOS", "SRDemoSettings", "fit_and_test", "format_sr_table", "run_sr_demo",
           "sr_demo_config", "sr_model_cost"]  # fmt: skip

#: The baseline (a plain residual unit of the block's size) and the model with the block.
MODELS: tuple[str, str] = ("edsr_baseline_res1", "edsr_baseline_nl")
#: The demo's photographs (``data.source`` of the engine's ``super_resolution`` task).
PHOTOS: tuple[str, ...] = ("self_similar", "builtin")


@dataclass(frozen=True)
class SRDemoSettings:
    """The demo's sizes and recipe (measured figures and times: docs/usecases.md).

    ``photos``: ``"self_similar"`` (default) or ``"builtin"`` (:data:`PHOTOS`); the earlier
    demo on the built-in photographs was ``photos="builtin", eval_tile=192, eval_max_tiles=4``.
    Test tiles of 64 pixels (32 low-resolution) fit the 20 % test bands of the self-similar
    photographs (the narrowest is 77 pixels wide).
    """

    photos: str = "self_similar"
    upscale: int = 2
    n_resblocks: int = 4
    n_feats: int = 32
    patch: int = 24  # low-resolution training patch
    batch_size: int = 16
    steps: int = 600  # chosen on the screening seeds (docs/usecases.md)
    lr: float = 1e-3
    bicubic_residual: bool = True  # learn the residual over bicubic (see EDSR's option)
    eval_tile: int = 64  # high-resolution test tiles
    eval_max_tiles: int = 8

    def __post_init__(self) -> None:
        if self.photos not in PHOTOS:
            raise ValueError(f"photos: expected one of {list(PHOTOS)}, got {self.photos!r}")

    @classmethod
    def quick(cls) -> SRDemoSettings:
        """Seconds: a smoke test (its numbers mean nothing)."""
        return cls(n_resblocks=1, n_feats=8, patch=12, batch_size=4, steps=3, eval_tile=48,
                   eval_max_tiles=1)  # fmt: skip


def sr_model_cost(name: str, s: SRDemoSettings) -> dict[str, int]:
    """Parameters and multiply-adds (batch 1, :func:`nlnet.analysis.cost.model_cost`) of a demo
    model on a low-resolution training patch (``macs_patch``) and test tile (``macs_tile``)."""
    from nlnet.analysis.cost import model_cost

    kw = {"upscale": s.upscale, "n_resblocks": s.n_resblocks, "n_feats": s.n_feats,
          "bicubic_residual": s.bicubic_residual}  # fmt: skip
    tile = (s.eval_tile or 4 * s.patch * s.upscale) // s.upscale
    patch = model_cost(name, (s.patch, s.patch), **kw)
    return {"params": patch.params, "macs_patch": patch.macs,
            "macs_tile": model_cost(name, (tile, tile), **kw).macs}  # fmt: skip


def sr_demo_config(name: str, s: SRDemoSettings, run_dir: Path, seed: int, device: str) -> Any:
    """The demo's recipe as an engine config: AdamW (no weight decay), one-cycle rate."""
    from nlnet.engine.config import config_from_dict

    return config_from_dict({
        "task": "super_resolution",
        "model": {"name": name, "num_classes": 3, "overrides": {
            "upscale": s.upscale, "n_resblocks": s.n_resblocks, "n_feats": s.n_feats,
            "bicubic_residual": s.bicubic_residual}},
        "data": {"source": s.photos, "patch": s.patch, "num_patches": s.steps * s.batch_size,
                 "eval_tile": s.eval_tile, "eval_max_tiles": s.eval_max_tiles},
        "optim": {"optimizer": "adamw", "schedule": "onecycle", "lr": s.lr, "weight_decay": 0.0,
                  "epochs": 1, "steps": [], "pct_start": 0.1},
        "train": {"batch_size": s.batch_size, "seed": seed, "workers": 0, "log_every": 10_000,
                  "ckpt_every": 0, "device": device, "progress": False, "val_split": None},
        "eval": {"batch_size": 1, "workers": 0, "split": "test"},
        "output_dir": str(run_dir),
    })  # fmt: skip


def _crops_figure(path: Path, models: dict[str, nn.Module], test: Any, upscale: int) -> None:
    """Rows of crops: low-res (nearest), bicubic, each model, original."""
    from nlnet.analysis.plotting import pyplot

    plt = pyplot()

    def bicubic_error(i: int) -> float:  # crops where up-sampling matters: textured ones
        lr, hr = test[i]["lr"], test[i]["hr"]
        bic = F.interpolate(lr[None], scale_factor=upscale, mode="bicubic")[0]
        return float((bic - hr).abs().mean())

    picks = sorted(range(len(test)), key=bicubic_error, reverse=True)[:3]
    cols = ["low-res", "bicubic", *models, "original"]
    fig, axes = plt.subplots(len(picks), len(cols), figsize=(2.2 * len(cols), 2.3 * len(picks)))
    axes = axes if len(picks) > 1 else [axes]
    for row, i in zip(axes, picks):
        item = test[i]
        lr, hr = item["lr"], item["hr"]
        c = min(96, hr.shape[-1])
        y0 = (hr.shape[-2] - c) // 2 // upscale * upscale
        x0 = (hr.shape[-1] - c) // 2 // upscale * upscale
        with torch.no_grad():
            outs = {n: m.eval()(lr[None])[0].clamp(0, 1) for n, m in models.items()}
        near = F.interpolate(lr[None], scale_factor=upscale, mode="nearest")[0]
        bic = F.interpolate(lr[None], scale_factor=upscale, mode="bicubic")[0].clamp(0, 1)
        for ax, (title, img) in zip(row, [("low-res", near), ("bicubic", bic), *outs.items(),
                                          ("original", hr)]):  # fmt: skip
            ax.imshow(img[:, y0 : y0 + c, x0 : x0 + c].permute(1, 2, 0).numpy())
            names = {MODELS[0]: "EDSR + res", MODELS[1]: "EDSR + NL"}
            ax.set_title(names.get(title, title), fontsize=9)
            ax.axis("off")
        row[0].set_ylabel(test.names[i], fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fit_and_test(
    name: str, s: SRDemoSettings, seed: int, run_dir: Path, device: str, split: str = "test"
) -> dict[str, Any]:
    """One model of one seed: train through the engine's loop, test on the tiles of ``split``.

    A job of :class:`nlnet.engine.jobs.Jobs` (one thread; the models train side by side).

    Returns:
        ``{"seed", "model", "params", "train_s", "cpu_s", "metrics", "state"}`` (``state`` on the
        CPU; ``cpu_s``: the training's CPU seconds in the job's process).
    """
    from nlnet.engine.loop import train
    from nlnet.engine.tasks.super_resolution import SuperResolutionTask
    from nlnet.models import create_model

    cfg = sr_demo_config(name, s, run_dir, seed, device)
    task = SuperResolutionTask.from_config(cfg)
    test = task.build_dataset(split, "test")
    torch.manual_seed(seed)
    model = create_model(name, **cfg.model.overrides)
    start, cpu = time.perf_counter(), time.process_time()
    train(cfg, model=model, force=True)
    train_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu
    metrics = task.evaluate(model, test, torch.device(device))
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return {"seed": seed, "model": name, "train_s": train_s, "cpu_s": cpu_s, "metrics": metrics,
            "params": sum(p.numel() for p in model.parameters()), "state": state}  # fmt: skip


def run_sr_demo(
    seeds: Sequence[int] = (0,),
    *,
    out_dir: str | os.PathLike = "runs/sr-demo",
    settings: SRDemoSettings | None = None,
    device: str = "cpu",
    pictures: bool = True,
    jobs: int = 1,
    log: Callable[[str], None] = print,
    split: str = "test",
) -> dict[str, Any]:
    """Train both models for each seed; test PSNR/SSIM on Y against bicubic.

    ``jobs`` runs (seed, model) trainings side by side, one PyTorch thread each
    (:class:`nlnet.engine.jobs.Jobs`): the figures do not depend on it. Seed ``k`` draws the
    initialisation and the training patches (the bands are fixed); ``split="val"`` gives the
    validation figures of the screening seeds (docs/demo.md, Protocol).

    Returns:
        ``{"settings", "split", "cost": {model: {"params", "macs_patch", "macs_tile"}}, "runs":
        [{"seed", "model", "params", "train_s", "cpu_s", "metrics"}], "wall_s"}`` (``metrics``
        on ``split``).

    Raises:
        ValueError: ``split`` not ``"test"`` or ``"val"``, or ``"val"`` with the built-in
            photographs (which have none).
    """
    from nlnet.engine.jobs import Jobs, write_summary
    from nlnet.models import create_model

    s = settings or SRDemoSettings()
    if split not in ("test", "val"):
        raise ValueError(f"split: expected 'test' or 'val', got {split!r}")
    if split == "val" and s.photos == "builtin":
        raise ValueError("split: the 'builtin' photos have no 'val' split; use 'self_similar'")
    out = Path(out_dir)
    t0 = time.perf_counter()
    cost = {name: sr_model_cost(name, s) for name in MODELS}
    with Jobs(jobs, device) as pool:
        calls = [(name, s, seed, out / f"seed{seed}" / name, device, split)
                 for seed in seeds for name in MODELS]  # fmt: skip
        runs = pool.starmap(fit_and_test, calls)
    for r in runs:
        m = r["metrics"]
        log(f"seed {r['seed']} {r['model']}: PSNR-Y {m['psnr_y']:.2f} dB "
            f"(bicubic {m['bicubic_psnr_y']:.2f}), {r['train_s']:.0f} s")  # fmt: skip
    if pictures:  # the last seed's models
        from nlnet.engine.tasks.super_resolution import SuperResolutionTask

        models: dict[str, nn.Module] = {}
        for r in runs[-len(MODELS) :]:
            cfg = sr_demo_config(r["model"], s, out, r["seed"], "cpu")
            models[r["model"]] = create_model(r["model"], weights=r["state"], **cfg.model.overrides)
        test = SuperResolutionTask.from_config(cfg).build_dataset(split, "test")
        _crops_figure(out / "crops.png", models, test, s.upscale)
    for r in runs:
        del r["state"]
    wall = time.perf_counter() - t0
    summary = write_summary(out, {"settings": asdict(s), "split": split, "cost": cost,
                                  "runs": runs, "wall_s": wall, "jobs": pool.n})  # fmt: skip
    log(format_sr_table(runs))
    return summary


def format_sr_table(runs: Sequence[dict[str, Any]]) -> str:
    """seed, model, PSNR-Y / SSIM-Y, bicubic PSNR-Y, gain over bicubic, training time."""
    lines = [f"{'seed':>4} {'model':<17} {'PSNR-Y':>7} {'SSIM-Y':>7} {'bicubic':>7} "
             f"{'gain':>6} {'train s':>7}"]  # fmt: skip
    for r in runs:
        m = r["metrics"]
        gain = m["psnr_y"] - m["bicubic_psnr_y"]
        lines.append(f"{r['seed']:>4} {r['model']:<17} {m['psnr_y']:>7.2f} {m['ssim_y']:>7.4f} "
                     f"{m['bicubic_psnr_y']:>7.2f} {gain:>+6.2f} {r['train_s']:>7.0f}")  # fmt: skip
    return "\n".join(lines)
