"""Eager vs ``torch.compile`` (inductor) for the non-local block and a tiny video model.

Inference (``torch.no_grad``, eval mode), float32, on the CPU (or ``--device cuda``). For each
case: one-time compile cost, then the median of ``--repeats`` timed calls of each variant in the
same process; the printed ratio is eager time / compiled time (> 1: compile is faster), and the
largest output difference checks that both compute the same thing.

    python benchmarks/compile.py [--threads N] [--repeats 20] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def _time(fn, x: torch.Tensor, repeats: int, device: torch.device) -> float:
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(x)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(name: str, model: torch.nn.Module, x: torch.Tensor, repeats: int, device) -> dict:
    model = model.to(device).eval()
    x = x.to(device)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        t0 = time.perf_counter()
        out_c = compiled(x)  # compiles
        compile_s = time.perf_counter() - t0
        out_e = model(x)
        for _ in range(3):  # warm-up
            model(x)
            compiled(x)
        eager = _time(model, x, repeats, device)
        comp = _time(compiled, x, repeats, device)
    return {
        "case": name,
        "input": "x".join(map(str, x.shape)),
        "eager_ms": 1e3 * eager,
        "compiled_ms": 1e3 * comp,
        "ratio": eager / comp,
        "compile_s": compile_s,
        "max_abs_diff": (out_c - out_e).abs().max().item(),
    }


def main() -> None:
    from nlnet.layers import NonLocal3d
    from nlnet.models import create_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    cases = []
    for inst in ("embedded_gaussian", "dot_product"):
        block = NonLocal3d(64, instantiation=inst)
        torch.nn.init.ones_(block.norm.weight)  # not the identity
        cases.append((f"NonLocal3d(64, {inst})", block, torch.randn(4, 64, 4, 14, 14)))
    for name in ("c2d_tiny_nl1", "vivit_tiny"):
        model = create_model(name, num_classes=2, width=8)
        cases.append((name, model, torch.randn(8, 3, 4, 32, 32)))
    print(f"torch {torch.__version__}, device {device}, {args.threads} thread(s), "
          f"median of {args.repeats}")  # fmt: skip
    header = f"{'case':<34} {'input':<16} {'eager ms':>9} {'compiled ms':>12} {'ratio':>6} "
    print(header + f"{'compile s':>10} {'max diff':>9}")
    for name, model, x in cases:
        r = bench(name, model, x, args.repeats, device)
        print(
            f"{r['case']:<34} {r['input']:<16} {r['eager_ms']:>9.2f} {r['compiled_ms']:>12.2f} "
            f"{r['ratio']:>6.2f} {r['compile_s']:>10.1f} {r['max_abs_diff']:>9.1e}",
            flush=True,
        )


if __name__ == "__main__":
    main()
