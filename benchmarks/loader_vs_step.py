"""Does data loading keep up with training? The loader alone against the step alone.

For a shipped config (default: ``smoke/folder_tiny``, the first run of docs/your-videos.md, and
``kinetics/c2d_r50_nl5``, the paper's 32 x 2 clips of Section 4.1): synthetic H.264 videos of a
Kinetics-like size are written into a class folder, and then

* ``loader clips/s``: training clips per second of the config's dataset (decode, the paper's
  scale jitter, crop and flip) through a ``DataLoader`` with 0 and with ``--workers`` worker
  processes, batches of the config's ``train.batch_size``, nothing else running in the process;
* with the config's own decoded-clip cache (``data.clip_cache``; the first-run config keeps
  whole videos in memory, ``clip_cache_unit: video``): ``fill clips/s``, the first pass over
  every video (each decoded once, whole) and ``cached clips/s``, the batches after it (every
  later epoch), 0 workers: the memory cache lives in the main process;
* ``step clips/s``: clips per second of the training step alone (the config's model, SGD,
  cross-entropy, BatchNorm trained) on a batch of random clips of the same shape;

and whether the loader keeps up (loader clips/s >= step clips/s). The figures are of this
machine: they tell which of the two bounds a run, not how fast either is elsewhere.

    python benchmarks/loader_vs_step.py
    python benchmarks/loader_vs_step.py --configs kinetics/c2d_r50_nl5 --batch 2 --batches 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode import make_video  # noqa: E402  (benchmarks/decode.py: a moving texture)

CONFIGS = ("smoke/folder_tiny", "kinetics/c2d_r50_nl5")


def loader_rate(cfg, workers: int, batches: int, data=None) -> float:
    """Training clips/s of ``cfg``'s dataset (or ``data``) through a DataLoader with ``workers``."""
    from torch.utils.data import DataLoader, RandomSampler

    from nlnet.data.video.builder import build_dataset

    data = build_dataset(cfg.data, "train") if data is None else data
    b = cfg.train.batch_size
    sampler = RandomSampler(data, replacement=True, num_samples=b * (batches + 1))
    loader = DataLoader(data, batch_size=b, sampler=sampler, num_workers=workers,
                        collate_fn=getattr(data, "collate", None), drop_last=True)  # fmt: skip
    it = iter(loader)
    next(it)  # workers started, first files opened
    t, n = time.perf_counter(), 0
    for _ in range(batches):
        batch = next(it)
        n += len(batch["clip"]) if isinstance(batch, dict) else len(batch[0])
    return n / (time.perf_counter() - t)


def cache_rates(cfg, batches: int) -> tuple[float, float]:
    """Clips/s of the first pass over every video through the config's clip cache (filling it),
    then of ``batches`` batches read from it (in this process: 0 workers)."""
    from nlnet.data.video.builder import build_dataset

    data = build_dataset(cfg.data, "train")
    t = time.perf_counter()
    for i in range(len(data)):
        data[i]
    fill = len(data) / (time.perf_counter() - t)
    return fill, loader_rate(cfg, 0, batches, data)


def step_rate(cfg, steps: int) -> float:
    """Clips/s of the config's training step alone on random clips of its shape."""
    from nlnet.models.registry import create_model

    torch.manual_seed(0)
    d = cfg.data
    model = create_model(cfg.model.name, num_classes=10, **cfg.model.overrides).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    b = cfg.train.batch_size
    x = torch.randn(b, 3, d.num_frames, d.crop, d.crop)
    y = torch.randint(0, 10, (b,))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    step()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return b * steps / (time.perf_counter() - t)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", nargs="+", default=list(CONFIGS))
    p.add_argument("--videos", type=int, default=4, help="synthetic videos in the folder")
    p.add_argument("--frames", type=int, default=150, help="frames per video (25 fps)")
    p.add_argument("--height", type=int, default=256)
    p.add_argument("--width", type=int, default=340)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=0, help="train.batch_size (0: the config's)")
    args = p.parse_args(argv)
    from nlnet.engine.config import load_config

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "train" / "a"
        folder.mkdir(parents=True)
        for i in range(args.videos):
            make_video(folder / f"v{i}.mp4", args.frames, args.height, args.width, 60, 25.0)
        for name in args.configs:
            over = [f"data.root={tmp}", "data.type=folder", "data.cache=false"]
            over += [f"train.batch_size={args.batch}"] if args.batch else []
            cfg = load_config(name, over)
            plain = load_config(name, [*over, "data.clip_cache=null"])
            rates = {w: loader_rate(plain, w, args.batches) for w in (0, args.workers)}
            cached = cache_rates(cfg, args.batches) if cfg.data.clip_cache else None
            step = step_rate(cfg, args.steps)
            rows.append((name, cfg, rates, cached, step))
            print(f"  {name}: done", file=sys.stderr, flush=True)
    print(f"\n{args.videos} synthetic videos of {args.frames} frames, {args.height}x{args.width}, "
          f"H.264; {torch.get_num_threads()} threads")  # fmt: skip
    print(f"{'config':<24}{'clip':>10}{'batch':>6}{'loader w=0':>12}"
          f"{f'loader w={args.workers}':>12}{'fill':>8}{'cached':>9}{'step':>9}"
          f"{'keeps up':>10}")  # fmt: skip
    for name, cfg, rates, cached, step in rows:
        d = cfg.data
        clip = f"{d.num_frames}x{d.stride} {d.crop}"
        best = max(rates.values()) if cached is None else cached[1]
        fill, hit = ("-", "-") if cached is None else (f"{cached[0]:.1f}", f"{cached[1]:.1f}")
        print(f"{name:<24}{clip:>10}{cfg.train.batch_size:>6}{rates[0]:>12.1f}"
              f"{rates[args.workers]:>12.1f}{fill:>8}{hit:>9}{step:>9.2f}"
              f"{'yes' if best >= step else 'no':>10}")  # fmt: skip
    print(
        "(clips/s, loader columns without the clip cache; fill / cached: the config's clip "
        "cache, first pass / later epochs; keeps up: the loader a run uses (the cached one "
        "after the first epoch where the config caches, else the faster of the two) delivers "
        "at least the step's clips/s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
