"""Training throughput (clips/s) and peak memory of C2D vs. non-local C2D vs. I3D.

The paper ("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971), Table 2e) reports the non-local C2D ResNet-50 with 5
blocks at 1.2x the FLOPs of the C2D baseline, and I3D at 1.5x; a fair implementation should not
cost more time than multiply-adds.  This script times full SGD training steps (forward, backward,
optimizer step, BatchNorm trained, cross-entropy) of each model at a small clip size and prints
clips/s and peak memory next to the multiply-add ratio (counted with
``torch.utils.flop_counter`` on the meta device).

Each model runs in a fresh process so that the peak memory (CUDA: ``max_memory_allocated``;
CPU: the process's peak resident set) belongs to that model alone.

    python benchmarks/train_throughput.py                       # CPU, batch 2, 8x112x112
    python benchmarks/train_throughput.py --device cuda --batch 8 --frames 32 --size 224
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import sys
import time

MODELS = ("c2d_r50", "c2d_r50_nl5", "i3d_r50")


def multiply_adds(name: str, batch: int, frames: int, size: int) -> float:
    """Multiply-adds of one forward pass (FLOP counter / 2), counted on the meta device."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from nlnet.models.registry import create_model

    with torch.device("meta"):
        model = create_model(name, num_classes=400)
        x = torch.empty(batch, 3, frames, size, size)
    counter = FlopCounterMode(display=False)
    with counter:
        model(x)
    return counter.get_total_flops() / 2


def _measure(name: str, args: dict, queue) -> None:  # runs in a child process
    import torch

    from nlnet.models.registry import create_model

    torch.manual_seed(0)
    if args["threads"]:
        torch.set_num_threads(args["threads"])
    device = torch.device(args["device"])
    model = create_model(name, num_classes=400).to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    x = torch.randn(args["batch"], 3, args["frames"], args["size"], args["size"], device=device)
    y = torch.randint(0, 400, (args["batch"],), device=device)
    amp = args["amp"] if device.type == "cuda" else "none"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(args["warmup"]):
        step()
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(args["steps"]):
        t = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t)
    times.sort()
    median = times[len(times) // 2]
    if device.type == "cuda":
        peak_mb = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    queue.put({"step_s": median, "clips_per_s": args["batch"] / median, "peak_mb": peak_mb})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--size", type=int, default=112)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    p.add_argument("--amp", default="none", choices=("none", "bf16", "fp16"))
    p.add_argument("--json", help="write the results to this file")
    args = p.parse_args(argv)
    cfg = vars(args)
    ctx = mp.get_context("spawn")
    rows = []
    for name in args.models:
        macs = multiply_adds(name, args.batch, args.frames, args.size)
        paper_macs = multiply_adds(name, 1, 32, 224)  # the paper's 32 x 224 x 224 clip
        queue = ctx.Queue()
        proc = ctx.Process(target=_measure, args=(name, cfg, queue))
        proc.start()
        result = queue.get()
        proc.join()
        rows.append(
            {
                "model": name,
                "gmacs_per_clip": macs / args.batch / 1e9,
                "gmacs_32x224": paper_macs / 1e9,
                **result,
            }
        )
        print(f"  {name}: {result['clips_per_s']:.2f} clips/s", file=sys.stderr, flush=True)
    base = rows[0]
    print(
        f"\ntraining step, batch {args.batch} x 3 x {args.frames} x {args.size} x {args.size}, "
        f"device {args.device}, amp {args.amp}, median of {args.steps} steps"
    )
    header = (
        f"{'model':<14}{'GMACs/clip':>11}{'MAC ratio':>10}{'clips/s':>10}{'time ratio':>11}"
        f"{'peak MB':>10}{'MAC ratio @32x224':>19}"
    )
    print(header)
    for r in rows:
        r["mac_ratio"] = r["gmacs_per_clip"] / base["gmacs_per_clip"]
        r["time_ratio"] = r["step_s"] / base["step_s"]
        r["mac_ratio_32x224"] = r["gmacs_32x224"] / base["gmacs_32x224"]
        print(
            f"{r['model']:<14}{r['gmacs_per_clip']:>11.2f}{r['mac_ratio']:>10.2f}"
            f"{r['clips_per_s']:>10.2f}{r['time_ratio']:>11.2f}{r['peak_mb']:>10.0f}"
            f"{r['mac_ratio_32x224']:>19.2f}"
        )
    print(
        "(MAC ratio: forward multiply-adds relative to the first model; time ratio: training-step "
        "time relative to it; Table 2e of the paper: NL C2D 5-block 1.2x, I3D 1.8x FLOPs)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": cfg, "results": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
