"""Benchmark: nlnet's non-local block against a straightforward explicit block, in one process.

For every case (map size x instantiation) the two blocks share their weights (the straightforward
one is written out below: three 1x1 convolutions, the explicit N x N' matrix, softmax or 1/N',
``W_z``, BatchNorm) and their outputs are checked to agree. Then, in the same process:

* time: inference (``no_grad``, eval) and training (forward + backward) are timed *interleaved*:
  repetition r runs A then B, repetition r + 1 runs B then A, and the table gives medians, so
  that load from other processes on a shared machine hits both alike;
* memory: the peak of live tensor bytes allocated by the block's operators (a dispatch-mode
  tracker: every tensor an operator returns is counted until its storage is freed), for
  inference and for training (activations saved for backward + gradients);
* the share of the machine's fp32 matmul rate that nlnet's block reaches (multiply-adds counted
  by ``FlopCounterMode``; the matmul rate is re-measured before every case).

Usage::

    python benchmarks/nonlocal_block.py --quick                  # 14x14 and 28x28
    python benchmarks/nonlocal_block.py --sizes 14x14,28x28 --inst embedded_gaussian --reps 3
    python benchmarks/nonlocal_block.py --sizes 56x56 --inst embedded_gaussian --no-sub
    python benchmarks/nonlocal_block.py --markdown docs/benchmarks/nonlocal_block.md

The table in ``docs/benchmarks/nonlocal_block.md`` comes from three runs (quiet machine):
``--sizes 14x14,28x28,56x56 --reps 5 --compile``, ``--sizes 112x112 --inst embedded_gaussian
dot_product --reps 3`` and ``--sizes 8x56x56 --inst embedded_gaussian --reps 3``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import weakref
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import (
    FlopCounterMode,
    register_flop_formula,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nlnet.functional.nonlocal_op import INSTANTIATIONS, choose_impl  # noqa: E402
from nlnet.layers.nonlocal_block import NonLocalNd  # noqa: E402

SIZES = ["14x14", "28x28", "56x56", "112x112", "8x56x56"]


def _4d(shape) -> tuple:
    return (1,) * (4 - len(shape)) + tuple(shape)


# FlopCounterMode has formulas for the CUDA attention kernels only; count the CPU flash kernel too.
@register_flop_formula(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu)
def _cpu_flash_flop(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(_4d(query), _4d(key), _4d(value))


@register_flop_formula(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward)
def _cpu_flash_bwd_flop(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(_4d(grad_out), _4d(query), _4d(key), _4d(value))


_CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
_BN = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}
_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}


class StraightforwardNonLocal(nn.Module):
    """The textbook block, written independently of nlnet: 1x1 convs, the N x N' matrix, W_z, BN."""

    def __init__(self, dim: int, c: int, d: int, instantiation: str, kernel: tuple) -> None:
        super().__init__()
        conv = _CONV[dim]
        self.inst, self.kernel, self.d = instantiation, kernel, d
        self.pool = _POOL[dim]
        if instantiation != "gaussian":
            self.theta, self.phi = conv(c, d, 1), conv(c, d, 1)
        self.g = conv(c, d, 1)
        if instantiation == "concatenation":
            self.w_f = nn.Parameter(torch.zeros(2 * d))
        self.W_z = conv(d, c, 1, bias=False)
        self.norm = _BN[dim](c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B = x.shape[0]
        x_hat = self.pool(x, self.kernel, self.kernel) if any(k > 1 for k in self.kernel) else x
        if self.inst == "gaussian":
            theta, phi = x.flatten(2), x_hat.flatten(2)
        else:
            theta, phi = (
                self.theta(x).flatten(2),
                self.phi(x_hat).flatten(2),
            )  # (B, d, N), (B, d, N')
        g = self.g(x_hat).flatten(2)  # (B, d, N')
        if self.inst in ("gaussian", "embedded_gaussian"):
            f = torch.bmm(theta.transpose(1, 2), phi) * theta.shape[1] ** -0.5
            attn = f.softmax(dim=-1)
        elif self.inst == "dot_product":
            attn = torch.bmm(theta.transpose(1, 2), phi) / phi.shape[-1]
        else:
            a = torch.einsum("bdn,d->bn", theta, self.w_f[: self.d])
            b = torch.einsum("bdn,d->bn", phi, self.w_f[self.d :])
            attn = F.relu(a.unsqueeze(-1) + b.unsqueeze(-2)) / phi.shape[-1]
        y = torch.bmm(g, attn.transpose(1, 2)).view(B, self.d, *x.shape[2:])  # (B, d, *grid)
        return self.norm(self.W_z(y)) + x


class PeakTensorMemory(TorchDispatchMode):
    """Peak bytes of the tensors that operators allocate while the mode is active."""

    def __init__(self, existing: tuple[torch.Tensor, ...] = ()) -> None:
        super().__init__()
        self.live: dict[int, list] = {}  # storage data_ptr -> [nbytes, number of tensors]
        self.now = self.peak = 0
        # views of tensors that existed before (the input, parameters, buffers) allocate nothing
        self.existing = {t.untyped_storage().data_ptr() for t in existing}

    def _release(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.now -= entry[0]
            del self.live[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                st = t.untyped_storage()
                key = st.data_ptr()
                if key == 0 or key in self.existing:
                    continue
                if key not in self.live:
                    self.live[key] = [st.nbytes(), 0]
                    self.now += st.nbytes()
                    self.peak = max(self.peak, self.now)
                self.live[key][1] += 1
                weakref.finalize(t, self._release, key)
        return out


def build(size: str, inst: str, channels: int, sub: bool, batch: int, seed: int = 0):
    """nlnet's block (auto path), the straightforward block with the same weights, and x."""
    grid = [int(s) for s in size.split("x")]
    dim = len(grid)
    torch.manual_seed(seed)
    block = NonLocalNd(dim, channels, instantiation=inst, sub_sample=sub)
    with torch.no_grad():
        block.norm.weight.fill_(1.0)  # a live output path, as after training
    ref = StraightforwardNonLocal(dim, channels, block.inter_channels, inst, block.kernel)
    ref.load_state_dict(block.state_dict())
    return block, ref, torch.randn(batch, channels, *grid)


def matmul_gflops(n: int = 1024, repeat: int = 5) -> float:
    """Median fp32 matmul rate of this machine now (GFLOP/s)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times) / 1e9


def _infer(model, x):
    with torch.no_grad():
        model(x)


def _train(model, x):
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()


def interleaved(models: dict, x: torch.Tensor, step, repeat: int) -> dict[str, float]:
    """Median seconds per call of ``step(model, x)``, alternating the order every repetition."""
    names = list(models)
    for name in names:  # warm-up
        step(models[name], x)
    times = {n: [] for n in names}
    for r in range(repeat):
        for name in names if r % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            step(models[name], x)
            times[name].append(time.perf_counter() - t0)
    return {n: statistics.median(t) for n, t in times.items()}


def peak_bytes(model, x, step) -> int:
    with PeakTensorMemory((x, *model.parameters(), *model.buffers())) as mem:
        step(model, x)
    return mem.peak


def flops(model, x, step) -> float:
    with FlopCounterMode(display=False) as counter:
        step(model, x)
    return float(counter.get_total_flops())


def block_path(block: NonLocalNd, x: torch.Tensor, training: bool) -> str:
    """What ``impl="auto"`` runs for ``x``: "reassociated" (explicit matrix, projections moved
    to the pooled grid), "reference" (explicit matrix) or "fast" (no N x N' matrix)."""
    with torch.set_grad_enabled(training):
        if block.plan(x.requires_grad_(training)).path == "reassociated":
            return "reassociated"
    x.requires_grad_(False)
    n = math.prod(x.shape[2:])
    n_keys = math.prod(s // k for s, k in zip(x.shape[2:], block.kernel))
    d = block.in_channels if block.instantiation == "gaussian" else block.inter_channels
    return choose_impl(
        block.instantiation, n, n_keys, d, block.inter_channels, device=x.device, training=training
    )


def run_case(size, inst, channels, sub, batch, repeat, compile_block: bool = False) -> dict:
    block, ref, x = build(size, inst, channels, sub, batch)
    block.eval(), ref.eval()
    with torch.no_grad():
        err = (block(x) - ref(x)).abs().max().item()
    models = {"straightforward": ref, "nlnet": block}
    if compile_block:  # an extra column: the same block (same parameters) under inductor
        # dynamo's cache is per code object: every case recompiles the same forward, so clear
        # it per case (else the recompile limit silently falls back to eager after 8 graphs)
        torch._dynamo.reset()
        models["compiled"] = torch.compile(block)
    res = {"max_abs_diff": err, "rate": matmul_gflops()}
    for phase, step, train in (("infer", _infer, False), ("train", _train, True)):
        for m in models.values():
            m.train(train)
        block.train(train)
        res[phase] = interleaved(models, x, step, repeat)
        res[phase + "_mem"] = {
            n: peak_bytes(m, x, step) for n, m in (("straightforward", ref), ("nlnet", block))
        }
        res[phase + "_flops"] = flops(block, x, step)
    res["path"] = {ph: block_path(block, x, t) for ph, t in (("infer", False), ("train", True))}
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="*", default=SIZES, help="e.g. 14x14 28x28 or 14x14,28x28")
    p.add_argument("--inst", nargs="*", default=list(INSTANTIATIONS), choices=INSTANTIATIONS)
    p.add_argument("--no-sub", action="store_true", help="keys on the full grid (no pooling)")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--channels", type=int, default=512)
    p.add_argument("--repeat", "--reps", type=int, default=5, help="interleaved repetitions")
    p.add_argument(
        "--threads", type=int, default=1, help="intra-op threads (1: robust on a shared CPU)"
    )
    p.add_argument("--quick", action="store_true", help="sizes 14x14 and 28x28 only")
    p.add_argument(
        "--compile", action="store_true", help="extra column: torch.compile(nlnet block)"
    )
    p.add_argument("--markdown", type=Path, help="append the table rows to this file")
    args = p.parse_args()
    if args.quick:
        args.sizes = ["14x14", "28x28"]
    args.sizes = [s for item in args.sizes for s in item.split(",") if s]
    torch.set_num_threads(args.threads)
    sub = not args.no_sub
    head = (
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; batch {args.batch}, "
        f"channels {args.channels}->{args.channels // 2}, keys {'pooled' if sub else 'full grid'}; "
        f"medians of {args.repeat} interleaved repetitions"
    )
    extra_head = " | compiled speed-up (infer / train)" if args.compile else ""
    lines = [
        head,
        "",
        "| size | N | instantiation | nlnet path (infer/train) | infer ms (straightforward / nlnet)"
        " | infer speed-up | train ms (straightforward / nlnet) | train speed-up"
        " | infer mem nlnet/straightforward | train mem nlnet/straightforward"
        " | % of matmul rate (infer / train)" + extra_head + " |",
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if args.compile else ""),
    ]
    print("\n".join(lines), flush=True)
    rows = []
    for size in args.sizes:
        n = math.prod(int(s) for s in size.split("x"))
        for inst in args.inst:
            r = run_case(size, inst, args.channels, sub, args.batch, args.repeat, args.compile)
            ti, tt = r["infer"], r["train"]
            mi, mt = r["infer_mem"], r["train_mem"]
            share = [
                100 * r[f"{ph}_flops"] / r[ph]["nlnet"] / 1e9 / r["rate"]
                for ph in ("infer", "train")
            ]
            row = [
                size, n, inst, f"{r['path']['infer']}/{r['path']['train']}",
                f"{1e3 * ti['straightforward']:.1f} / {1e3 * ti['nlnet']:.1f}",
                f"{ti['straightforward'] / ti['nlnet']:.2f}x",
                f"{1e3 * tt['straightforward']:.1f} / {1e3 * tt['nlnet']:.1f}",
                f"{tt['straightforward'] / tt['nlnet']:.2f}x",
                f"{mi['nlnet'] / mi['straightforward']:.2f} ({mi['nlnet'] / 2**20:.0f} MiB)",
                f"{mt['nlnet'] / mt['straightforward']:.2f} ({mt['nlnet'] / 2**20:.0f} MiB)",
                f"{share[0]:.0f}% / {share[1]:.0f}% of {r['rate']:.0f} GFLOP/s",
            ]  # fmt: skip
            if args.compile:  # straightforward time / compiled nlnet time
                row.append(
                    f"{ti['straightforward'] / ti['compiled']:.2f}x / "
                    f"{tt['straightforward'] / tt['compiled']:.2f}x"
                )
            if r["max_abs_diff"] > 1e-3:
                row[2] += f" (OUTPUTS DIFFER by {r['max_abs_diff']:.1e})"
            line = "| " + " | ".join(str(c) for c in row) + " |"
            rows.append(line)
            print(line, flush=True)
    if args.markdown:
        with args.markdown.open("a") as f:
            f.write("\n".join(lines + rows) + "\n\n")


if __name__ == "__main__":
    main()
