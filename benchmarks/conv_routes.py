"""Can a C2D's convolutions go faster by another route? Each convolution alone, three ways.

A C2D (the paper's Table 1) convolves every frame alone: its kernels are ``1 x k x k``. Such a
``conv3d`` is, in algebra, a ``conv2d`` over the frames stacked into the batch, and a
``1 x 1 x 1`` one is a matrix product. For each distinct convolution of a registered model (its
input shapes found by one forward pass on the meta device, so the real network's shapes), this
times forward + backward (input and weight gradients) of

* ``conv3d``: ``F.conv3d`` on ``(N, C, T, H, W)``, what the model runs (the reference);
* ``conv2d``: ``F.conv2d`` on ``(N T, C, H, W)``, as if the whole network kept frames in the
  batch (no layout change counted);
* ``conv2d+copies``: the same with the two layout changes a single layer would need;
* ``matmul`` (``1 x 1 x 1`` only): ``W @ x`` over ``(N, C, T H W)``;

in interleaved rounds, and prints each median, its ratio (``conv3d`` / route, > 1: faster) and
the step-weighted total over the model (each convolution times how often it occurs). On this
CPU every route runs oneDNN's or BLAS's kernels near the same speed (docs/benchmarks/
training_step.md "Where the time goes").

    python benchmarks/conv_routes.py --layout pyslowfast --size 224 --threads 2
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import torch
import torch.nn.functional as F


def conv_shapes(name: str, batch: int, frames: int, size: int, layout: str) -> Counter:
    """``(input shape, out channels, kernel, stride, padding) -> count`` of every conv3d with
    a temporal kernel of 1 in ``name``'s forward pass (run on the meta device)."""
    from nlnet.models.registry import create_model

    kwargs = {"dropout": 0.0}
    if layout == "pyslowfast":
        from nlnet.models.pyslowfast import PYSLOWFAST_OPTIONS

        kwargs.update(PYSLOWFAST_OPTIONS)
    with torch.device("meta"):
        model = create_model(name, num_classes=400, **kwargs)
    found: Counter = Counter()

    def record(m: torch.nn.Conv3d, args: tuple) -> None:
        if m.kernel_size[0] == 1 and m.stride[0] == 1 and m.groups == 1 and m.bias is None:
            key = (tuple(args[0].shape), m.out_channels, m.kernel_size, m.stride, m.padding)
            found[key] += 1

    for m in model.modules():
        if isinstance(m, torch.nn.Conv3d):
            m.register_forward_pre_hook(record)
    with torch.no_grad():
        model(torch.empty(batch, 3, frames, size, size, device="meta"))
    return found


def routes(key: tuple) -> dict:
    """The callables (forward + backward) of each route for one convolution."""
    shape, c_out, k, s, p = key
    n, c, t, h, w = shape
    x = torch.randn(shape, requires_grad=True)
    w3 = torch.randn(c_out, c, *k, requires_grad=True)
    x2 = x.detach().transpose(1, 2).reshape(n * t, c, h, w).contiguous().requires_grad_()
    w2 = w3.detach()[:, :, 0].contiguous().requires_grad_()
    wm = w3.detach()[:, :, 0, 0, 0].contiguous().requires_grad_()  # used for 1 x 1 x 1 only

    def backward(y: torch.Tensor) -> torch.Tensor:
        y.backward(torch.ones_like(y))
        for leaf in (x, w3, x2, w2, wm):
            leaf.grad = None  # no accumulation pass in the timing
        return y.detach()

    def conv3d() -> torch.Tensor:
        return backward(F.conv3d(x, w3, stride=s, padding=p))

    def conv2d() -> torch.Tensor:  # (N T, C', H', W') -> (N, C', T, H', W') for the check only
        y = backward(F.conv2d(x2, w2, stride=s[1:], padding=p[1:]))
        return y.view(n, t, c_out, *y.shape[-2:]).transpose(1, 2)

    def conv2d_copies() -> torch.Tensor:
        frames = x.transpose(1, 2).reshape(n * t, c, h, w)  # (N T, C, H, W): a copy
        y = F.conv2d(frames, w3[:, :, 0], stride=s[1:], padding=p[1:])
        return backward(y.view(n, t, c_out, *y.shape[-2:]).transpose(1, 2).contiguous())

    out = {"conv3d": conv3d, "conv2d": conv2d, "conv2d+copies": conv2d_copies}
    if k == (1, 1, 1) and s == (1, 1, 1):

        def matmul() -> torch.Tensor:
            y = torch.matmul(wm, x.flatten(2))  # (C', C) @ (N, C, T H W)
            return backward(y).view(n, c_out, t, h, w)

        out["matmul"] = matmul
    return out


def largest_difference(fns: dict) -> float:
    """The largest relative difference of any route's output from ``conv3d``'s (same inputs)."""
    ref = fns["conv3d"]()
    scale = ref.abs().max().clamp_min(1e-30)
    return max(float((fn() - ref).abs().max() / scale) for fn in fns.values())


def median_times(fns: dict, rounds: int) -> dict:
    """Median seconds of each callable over ``rounds`` interleaved rounds (after one warm-up)."""
    times: dict = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="c2d_r50_nl5")
    p.add_argument("--layout", choices=["registered", "pyslowfast"], default="registered")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--size", type=int, default=112)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    shapes = conv_shapes(args.model, args.batch, args.frames, args.size, args.layout)
    print(f"{args.model} ({args.layout}), batch {args.batch} x 3 x {args.frames} x {args.size}"
          f" x {args.size}, threads {torch.get_num_threads()}, median of {args.rounds} rounds,"
          " forward + backward; ratio: conv3d / route")  # fmt: skip
    totals: Counter = Counter()
    worst = 0.0
    print(f"{'input':>22} {'out':>5} {'k':>5} {'s':>3} {'x':>3} " + " ".join(
        f"{r:>19}" for r in ("conv3d", "conv2d", "conv2d+copies", "matmul")))  # fmt: skip
    for key, count in shapes.items():
        fns = routes(key)
        worst = max(worst, largest_difference(fns))
        med = median_times(fns, args.rounds)
        for name, t in med.items():
            totals[name] += count * t
        if "matmul" not in med:
            totals["matmul"] += count * med["conv3d"]  # the model's own where no product exists
        cells = [f"{med[r] * 1e3:9.1f} ms ({med['conv3d'] / med[r]:4.2f})" if r in med else
                 f"{'-':>19}" for r in ("conv3d", "conv2d", "conv2d+copies", "matmul")]  # fmt: skip
        shape, c_out, k, s, _ = key
        print(f"{'x'.join(map(str, shape)):>22} {c_out:>5} {k[1]:>5} {s[1]:>3} {count:>3} "
              + " ".join(cells))  # fmt: skip
    print(f"every route's output equals conv3d's to {worst:.1e} (relative, largest)")
    print("total (each convolution times its count; matmul: conv3d where not 1x1x1):")
    for name in ("conv3d", "conv2d", "conv2d+copies", "matmul"):
        print(f"  {name:>14}: {totals[name]:.3f} s  ratio {totals['conv3d'] / totals[name]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
