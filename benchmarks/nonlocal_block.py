"""Benchmark: the non-local block's fast paths against a straightforward explicit-matrix block.

For every case (feature-map size x subsampling x instantiation) this measures, in a fresh
subprocess each so that peak memory is the case's own:

* forward (no grad) and forward+backward median wall time,
* peak resident memory above the process's baseline (``ru_maxrss``),
* multiply-adds counted by ``FlopCounterMode`` and the achieved GFLOP/s,

for nlnet's block (``impl="auto"``: the path it picks by size, and ``impl="fast"``) and for
:class:`ExplicitNonLocal` below, the textbook implementation with three convolutions, the explicit
``N x N'`` matrix and ``W_z`` (same weights, outputs checked to agree). The fp32 matmul rate of this
machine is measured in the same run and printed next to the achieved rates.

Usage::

    python benchmarks/nonlocal_block.py                      # the full table (slow: ~30 min on 2 cores)
    python benchmarks/nonlocal_block.py --quick              # small sizes only
    python benchmarks/nonlocal_block.py --sizes 8x28x28 112x112 --inst embedded_gaussian
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nlnet.functional.nonlocal_op import INSTANTIATIONS, choose_impl  # noqa: E402
from nlnet.layers.nonlocal_block import NonLocalNd  # noqa: E402

IMAGE_SIZES = ["14x14", "28x28", "56x56", "112x112"]
VIDEO_SIZES = ["4x14x14", "8x28x28", "8x56x56"]


class ExplicitNonLocal(nn.Module):
    """The straightforward block: 1x1 convs, explicit N x N' matrix, softmax or 1/N', W_z, BN.

    Shares the parameters of an :class:`~nlnet.layers.nonlocal_block.NonLocalNd` (pool before
    phi/g), so both compute the same function.
    """

    def __init__(self, block: NonLocalNd) -> None:
        super().__init__()
        self.b = block
        self.pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[block.dim]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = self.b
        B, C = x.shape[:2]
        x_hat = self.pool(x, b.kernel, b.kernel) if b.subsampled else x
        if b.instantiation == "gaussian":
            theta, phi = x.flatten(2), x_hat.flatten(2)
        else:
            theta, phi = b.theta(x).flatten(2), b.phi(x_hat).flatten(2)  # (B, d, N), (B, d, N')
        g = b.g(x_hat).flatten(2)  # (B, d, N')
        if b.instantiation in ("gaussian", "embedded_gaussian"):
            f = torch.bmm(theta.transpose(1, 2), phi) * theta.shape[1] ** -0.5
            attn = f.softmax(dim=-1)
        elif b.instantiation == "dot_product":
            attn = torch.bmm(theta.transpose(1, 2), phi) / phi.shape[-1]
        else:
            d = theta.shape[1]
            a = torch.einsum("bdn,d->bn", theta, b.w_f[:d])
            c = torch.einsum("bdn,d->bn", phi, b.w_f[d:])
            attn = F.relu(a.unsqueeze(-1) + c.unsqueeze(-2)) / phi.shape[-1]
        y = torch.bmm(g, attn.transpose(1, 2)).view(B, -1, *x.shape[2:])  # (B, d, *grid)
        return b.norm(b.W_z(y)) + x


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _build(args: dict) -> tuple[nn.Module, torch.Tensor]:
    size = [int(s) for s in args["size"].split("x")]
    dim = len(size)
    block = NonLocalNd(
        dim,
        args["channels"],
        instantiation=args["inst"],
        sub_sample=args["sub"],
        impl="fast" if args["path"] == "fast" else "auto",
    )
    with torch.no_grad():
        block.norm.weight.fill_(1.0)  # a live output path, as after training
    model = ExplicitNonLocal(block) if args["path"] == "explicit" else block
    x = torch.randn(args["batch"], args["channels"], *size)
    return model, x


def _count_madds(args: dict) -> tuple[float, float]:
    with torch.device("meta"):
        model, x = _build(args)
    x.requires_grad_(True)
    with FlopCounterMode(display=False) as fwd:
        out = model(x)
    with FlopCounterMode(display=False) as bwd:
        out.sum().backward()
    return fwd.get_total_flops() / 2, (fwd.get_total_flops() + bwd.get_total_flops()) / 2


def worker(args: dict) -> dict:
    """Run one phase ("fwd" or "train") of one case in this process and return its measurements.

    Each phase runs in its own process, so ``ru_maxrss`` is the peak of that phase alone.
    """
    torch.manual_seed(0)
    model, x = _build(args)
    res: dict = {}
    base = _rss_mib()
    times = []
    if args["phase"] == "fwd":
        with torch.no_grad():
            for _ in range(args["repeat"] + 1):
                t0 = time.perf_counter()
                out = model(x)
                times.append(time.perf_counter() - t0)
        out = out.double()
        # Positive quantities: a plain sum cancels (BN outputs sum to ~0) and magnifies noise.
        res["checksum"] = [float(out.abs().sum()), float(out.square().sum())]
    else:
        x.requires_grad_(True)
        for _ in range(args["repeat"] + 1):
            model.zero_grad(set_to_none=True)
            x.grad = None
            t0 = time.perf_counter()
            model(x).sum().backward()
            times.append(time.perf_counter() - t0)
        res["madds_fwd"], res["madds_train"] = _count_madds(args)
        # The machine may be shared: the reference rate is measured in the same process, now.
        res["matmul_gflops"] = matmul_gflops()
    res["ms"] = 1e3 * statistics.median(times[1:])
    res["peak_mib"] = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base, 0.0)
    return res


def matmul_gflops(n: int = 2048, repeat: int = 5) -> float:
    """Median fp32 matmul rate of this machine (GFLOP/s)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times) / 1e9


def explicit_bytes(size: str, batch: int, channels: int, sub: bool) -> float:
    """Rough peak of the explicit path: logits, weights and their gradients, N x N' each."""
    dims = [int(s) for s in size.split("x")]
    n = 1
    for s in dims:
        n *= s
    n_keys = n // 4 if sub else n
    return 4.0 * 4 * batch * n * n_keys + 16 * batch * channels * n


def _run_phase(case: dict, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--worker", json.dumps(case)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout {timeout:.0f}s"}
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1][:60]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_case(case: dict, timeout: float) -> dict:
    """Forward (no grad) and forward+backward of one case, each in a fresh process."""
    fwd = _run_phase({**case, "phase": "fwd"}, timeout)
    if "error" in fwd:
        return fwd
    train = _run_phase({**case, "phase": "train"}, timeout)
    if "error" in train:
        return train
    return {
        "fwd_ms": fwd["ms"],
        "train_ms": train["ms"],
        "peak_mib": train["peak_mib"],
        "checksum": fwd["checksum"],
        "madds_train": train["madds_train"],
        "matmul_gflops": train["matmul_gflops"],
    }


def _agree(a: list[float], b: list[float]) -> bool:
    """fp32 outputs of two paths agree (sum of |z| and of z^2 to 1e-3 relative)."""
    return all(abs(x - y) <= 1e-3 * max(abs(x), abs(y), 1.0) for x, y in zip(a, b))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="*", default=IMAGE_SIZES + VIDEO_SIZES)
    p.add_argument("--inst", nargs="*", default=list(INSTANTIATIONS), choices=INSTANTIATIONS)
    p.add_argument("--sub", choices=["both", "on", "off"], default="both")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--channels", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--max-explicit-gib", type=float, default=12.0, help="skip larger explicit runs")
    p.add_argument("--timeout", type=float, default=900.0, help="per-case seconds")
    p.add_argument("--quick", action="store_true", help="sizes 14x14, 28x28, 4x14x14 only")
    p.add_argument("--markdown", type=Path, help="also write the table to this file")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    if args.quick:
        args.sizes = ["14x14", "28x28", "4x14x14"]
    rate = matmul_gflops()
    lines = [
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, fp32 matmul "
        f"{rate:.0f} GFLOP/s (2048^3, median of 5); batch {args.batch}, channels "
        f"{args.channels}->{args.channels // 2}; times are medians of {args.repeat}; "
        "peak MiB: resident memory of forward+backward above the process baseline; "
        "% of matmul rate: against the fp32 matmul rate measured in the same process.",
        "",
        "| size | N | sub | instantiation | path | fwd ms | fwd+bwd ms | peak MiB | GFLOP/s "
        "(fwd+bwd) | % of matmul rate | explicit/this time | this/explicit mem |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    subs = {"both": [False, True], "on": [True], "off": [False]}[args.sub]
    for size in args.sizes:
        n = 1
        for s in size.split("x"):
            n *= int(s)
        for sub in subs:
            for inst in args.inst:
                base = {"size": size, "sub": sub, "inst": inst, "batch": args.batch,
                        "channels": args.channels, "repeat": args.repeat}  # fmt: skip
                results = {}
                est = explicit_bytes(size, args.batch, args.channels, sub) / 2**30
                n_keys = n // 4 if sub else n
                d = args.channels if inst == "gaussian" else args.channels // 2
                cpu = torch.device("cpu")
                auto = choose_impl(
                    inst, n, n_keys, d, args.channels // 2, device=cpu, training=True
                )
                # "fast" is run separately only where "auto" trains on the explicit path.
                paths = (
                    ("explicit", "auto", "fast") if auto == "reference" else ("explicit", "auto")
                )
                for path in paths:
                    if path == "explicit" and est > args.max_explicit_gib:
                        results[path] = {"error": f"skipped (~{est:.0f} GiB)"}
                    else:
                        results[path] = run_case({**base, "path": path}, args.timeout)
                ref = results["explicit"]
                for path, r in results.items():
                    if "error" in r:
                        row = [size, n, sub, inst, path, r["error"], "", "", "", "", "", ""]
                    else:
                        gflops = 2 * r["madds_train"] / (r["train_ms"] / 1e3) / 1e9
                        speed = mem = ""
                        if path != "explicit" and "error" not in ref:
                            speed = f"{ref['train_ms'] / r['train_ms']:.2f}x"
                            mem = f"{100 * r['peak_mib'] / max(ref['peak_mib'], 1):.0f}%"
                            if not _agree(r["checksum"], ref["checksum"]):
                                speed += " (OUTPUTS DIFFER)"
                        row = [size, n, sub, inst, path, f"{r['fwd_ms']:.0f}", f"{r['train_ms']:.0f}",
                               f"{r['peak_mib']:.0f}", f"{gflops:.0f}", f"{100 * gflops / r['matmul_gflops']:.0f}%",
                               speed, mem]  # fmt: skip
                    line = "| " + " | ".join(str(c) for c in row) + " |"
                    lines.append(line)
                    print(line, flush=True)
    if args.markdown:
        args.markdown.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
