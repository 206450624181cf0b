"""A training step with the field's speed options against the plain eager step, in one run.

The options that change speed but not numbers beyond float rounding (docs/training.md,
"Speed"): ``optim.implementation: fused`` (variant ``fused_sgd``: PyTorch's fused SGD kernel),
``train.subsample_1x1`` (the strided 1x1 shortcut convolutions as subsampling + 1x1
convolution), ``train.channels_last`` (weights, and so activations, in
``torch.channels_last_3d``) and ``train.compile`` (``torch.compile`` of the forward, backward by
AOTAutograd). The variant ``reference`` is the straightforward step the others are measured
against: the same model with PyTorch's own ``nn.MaxPool3d`` for its stem pools (nlnet's
default pools compute the same bits faster on the CPU, :mod:`nlnet.layers.pooling`) and
PyTorch's default SGD, the step of PySlowFast's and torchvision's training code. Each variant is a copy of the same
model (same seed) stepping with SGD on the same batch; the rounds are interleaved (one step of
each variant per round) so that the machine's load falls on all of them alike. Printed per
variant: the median step time, the ratio plain / variant (> 1: faster), the one-time compile
cost, the difference of its first step's loss from the plain step's (same weights: they
compute the same thing within float rounding), the relative difference of the whole state
after that one update, and the loss difference after the last step.

    python benchmarks/train_step_options.py                               # c2d_r50_nl5, CPU
    python benchmarks/train_step_options.py --variants reference eager compile channels_last
    python benchmarks/train_step_options.py --model c2d_tiny_nl1 --size 32 --rounds 10
    python benchmarks/train_step_options.py --device cuda --batch 8 --frames 32 --size 224

``--variants freeze_bn freeze_bn+fold``: fine-tuning with frozen BatchNorm (``train.freeze_bn``,
Sec. 5.1), plain and with each frozen BatchNorm folded into its convolution
(``train.fold_frozen_bn``).

``--model r3d_18`` is nlnet's R3D-18 (a ``ResNet3d`` of basic blocks,
:mod:`nlnet.models.video.torchvision_r3d`), and the variant ``torchvision`` is torchvision's own
``r3d_18`` with the same weights: an independent implementation of the same network, timed in
the same run (``--variants torchvision eager channels_last``: ratios against torchvision's step).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from nlnet.cli import HEAP_SETTINGS

VARIANTS = {
    # the model with PyTorch's own stem pools (nn.MaxPool3d) and SGD: the straightforward step
    "reference": {"reference": True},
    "eager": {},
    "fused_sgd": {"implementation": "fused"},
    "subsample_1x1": {"subsample_1x1": True},
    "fused_sgd+subsample_1x1": {"implementation": "fused", "subsample_1x1": True},
    "fused_sgd+subsample_1x1+compile": {
        "implementation": "fused",
        "subsample_1x1": True,
        "compile": "inductor",
    },
    "channels_last": {"channels_last": True},
    "compile": {"compile": "inductor"},
    "compile+channels_last": {"channels_last": True, "compile": "inductor"},
    "fused_sgd+subsample_1x1+compile+channels_last": {
        "implementation": "fused",
        "subsample_1x1": True,
        "compile": "inductor",
        "channels_last": True,
    },
    # bf16 autocast (a GPU's; on this CPU bf16 matmuls are ~300x slower: not for CPU timing)
    "bf16": {"bf16": True},
    "channels_last+bf16": {"channels_last": True, "bf16": True},
    "torchvision": {"torchvision": True},  # --model r3d_18 only
    # fine-tuning with frozen BatchNorm (Sec. 5.1): plain, and folded into the convolutions
    "freeze_bn": {"freeze_bn": True},
    "freeze_bn+fold": {"freeze_bn": True, "fold_frozen_bn": True},
}


#: the processes' allocation settings of ``--hugepages both`` (the first two) and ``all``
ALLOCATIONS: dict[str, dict[str, str]] = {
    "THP off": {"THP_MEM_ALLOC_ENABLE": "0"},  # PyTorch's and glibc's defaults
    "THP on": {"THP_MEM_ALLOC_ENABLE": "1"},
    # the nlnet command line's default: huge pages, and glibc keeps freed blocks (nlnet.cli)
    "THP+heap": {"THP_MEM_ALLOC_ENABLE": "1"} | {k: str(v) for k, (_, v) in HEAP_SETTINGS.items()},
}


def allocations(args: argparse.Namespace, argv: list[str]) -> int:
    """The variants in child processes under each allocation setting, in alternation; every
    median against the first variant's under PyTorch's and glibc's defaults."""
    child = [a for a in argv if not a.startswith("--hugepages") and a not in ("both", "all")]
    names = list(ALLOCATIONS)[: 2 if args.hugepages == "both" else 3]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_"))}
    for _ in range(args.repeats):
        for name in runs:
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp, "medians.json")
                env = {**clean, **ALLOCATIONS[name]}
                subprocess.run([sys.executable, __file__, *child, "--json", str(out)], env=env,
                               check=True, stdout=subprocess.DEVNULL)  # fmt: skip
                runs[name].append(json.loads(out.read_text()))
    med = {n: {v: statistics.median(r[v] for r in rs) for v in rs[0]} for n, rs in runs.items()}
    base = med[names[0]][args.variants[0]]
    print(f"\n{args.model} ({args.layout}), batch {args.batch} x 3 x {args.frames} x {args.size} x "
          f"{args.size}: median over {args.repeats} processes each of the per-process medians "
          f"({args.rounds} interleaved rounds)")  # fmt: skip
    print(f"{'variant':<34}" + "".join(f"{n + ' s':>12}{'ratio':>7}" for n in names))
    for v in med[names[0]]:
        print(f"{v:<34}" + "".join(f"{med[n][v]:>12.3f}{base / med[n][v]:>7.2f}" for n in names))
    print(f"(ratio: {args.variants[0]}'s step under {names[0]} / the variant's)")
    return 0


def build(name: str, options: dict, device: torch.device, width: int | None, x: torch.Tensor,
          layout: str = "registered"):  # fmt: skip
    """The model of ``name`` (seed 0) with ``options`` as the engine applies them, its SGD and
    the module the step calls."""
    from nlnet.engine.modeling import compiled_for_training, to_channels_last
    from nlnet.engine.optim import KERNELS
    from nlnet.models.registry import create_model

    torch.manual_seed(0)
    # no dropout: each variant would draw other masks from the one generator
    kwargs = {"width": width, "dropout": 0.0} if width else {"dropout": 0.0}
    if layout == "pyslowfast":
        from nlnet.models.pyslowfast import PYSLOWFAST_OPTIONS

        kwargs.update(PYSLOWFAST_OPTIONS)
    model = create_model(name, num_classes=400, **kwargs)
    if options.get("torchvision"):
        model = torchvision_twin(model)
    model = model.to(device).train()
    if options.get("reference"):
        from nlnet.layers.pooling import MaxPool3d

        for m in model.modules():
            if isinstance(m, MaxPool3d):
                m.__class__ = torch.nn.MaxPool3d
    if options.get("subsample_1x1"):
        from nlnet.engine.subsampling import subsample_strided_pointwise

        print(f"  subsampled {subsample_strided_pointwise(model)} strided 1x1 convolutions",
              file=sys.stderr)  # fmt: skip
    if options.get("channels_last"):
        to_channels_last(model)
    if options.get("freeze_bn"):
        import warnings

        from nlnet.engine.folding import fold_frozen_batchnorm
        from nlnet.engine.modeling import freeze_batchnorm

        with torch.no_grad():  # statistics of the batch, as a pre-trained model's would be
            for m in model.modules():
                if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                    m.momentum = None  # cumulative average: one pass sets them
                    m.reset_running_stats()
            model(x)
        with warnings.catch_warnings():  # the fresh blocks' norms stay trainable, as in train()
            warnings.simplefilter("ignore", RuntimeWarning)
            freeze_batchnorm(model)
        if options.get("fold_frozen_bn"):
            print(f"  folded {fold_frozen_batchnorm(model)} BatchNorm layers", file=sys.stderr)
    kernel = KERNELS[options.get("implementation", "default")]  # optim.implementation
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4, **kernel)
    return model, opt, compiled_for_training(model, options.get("compile", "none"))


def torchvision_twin(ours: torch.nn.Module) -> torch.nn.Module:
    """torchvision's own ``r3d_18`` holding the weights of nlnet's ``r3d_18`` (``ours``)."""
    from torchvision.models.video import r3d_18

    from nlnet.models.video.torchvision_r3d import r3d_state_from_torchvision

    if ours.conv1.out_channels != 64:
        raise SystemExit("--width: torchvision's r3d_18 has width 64 only")
    theirs = r3d_18(num_classes=400)
    names = dict(zip(r3d_state_from_torchvision(theirs.state_dict()), theirs.state_dict()))
    theirs.load_state_dict({names[k]: v for k, v in ours.state_dict().items()})
    return theirs


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="c2d_r50_nl5")
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS),
                   default=["reference", "eager", "fused_sgd", "subsample_1x1",
                            "fused_sgd+subsample_1x1"])  # fmt: skip
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--size", type=int, default=112)
    p.add_argument("--width", type=int, default=0, help="model width (0: the model's own)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    p.add_argument("--layout", choices=["registered", "pyslowfast"], default="registered",
                   help="pyslowfast: the C2D/I3D in PySlowFast's 8x8 layout (its pooling and "
                        "temporal strides, nlnet.models.pyslowfast)")  # fmt: skip
    p.add_argument("--hugepages", choices=["inherit", "both", "all"], default="inherit",
                   help="both: run the variants in child processes without and with "
                        "THP_MEM_ALLOC_ENABLE=1, alternating --repeats times, and compare every "
                        "median with the reference's without; all: also with glibc keeping "
                        "freed blocks (the nlnet command line's default, nlnet.cli)")  # fmt: skip
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", help=argparse.SUPPRESS)  # a child's medians, for --hugepages both
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.hugepages != "inherit":
        return allocations(args, list(sys.argv[1:] if argv is None else argv))
    if "torchvision" in args.variants and args.model != "r3d_18":
        p.error("--variants torchvision: only with --model r3d_18")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, 3, args.frames, args.size, args.size, generator=g).to(device)
    y = torch.randint(0, 400, (args.batch,), generator=g).to(device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    runs = {}
    for v in args.variants:
        model, opt, fwd = build(args.model, VARIANTS[v], device, args.width or None, x,
                                args.layout)  # fmt: skip
        runs[v] = {"model": model, "opt": opt, "fwd": fwd, "times": [], "losses": [],
                   "bf16": bool(VARIANTS[v].get("bf16"))}  # fmt: skip

    def step(r: dict) -> float:
        r["opt"].zero_grad(set_to_none=True)
        with torch.autocast(device.type, torch.bfloat16, enabled=r["bf16"]):
            loss = torch.nn.functional.cross_entropy(r["fwd"](x), y)
        loss.backward()
        r["opt"].step()
        return float(loss.detach())

    for v, r in runs.items():  # the first step compiles
        t = time.perf_counter()
        r["losses"].append(step(r))
        sync()
        r["first_s"] = time.perf_counter() - t
        r["first"] = [w.detach().clone() for w in r["model"].state_dict().values()]
        print(f"  {v}: first step {r['first_s']:.1f} s", file=sys.stderr, flush=True)
    for _ in range(args.rounds):
        for r in runs.values():
            t = time.perf_counter()
            r["losses"].append(step(r))
            sync()
            r["times"].append(time.perf_counter() - t)
    ref = runs[args.variants[0]]
    ref_s = statistics.median(ref["times"])
    if args.json:
        medians = {v: statistics.median(r["times"]) for v, r in runs.items()}
        Path(args.json).write_text(json.dumps(medians))
    print(f"\n{args.model} ({args.layout}), SGD step, batch {args.batch} x 3 x {args.frames} x "
          f"{args.size} x {args.size}, device {args.device}, threads {torch.get_num_threads()}, "
          f"THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE', '(unset)')}, "
          f"MALLOC_MMAP_MAX_={os.environ.get('MALLOC_MMAP_MAX_', '(unset)')}, "
          f"median of {args.rounds} interleaved rounds")  # fmt: skip
    print(f"{'variant':<32}{'step s':>8}{'ratio':>8}{'first step s':>14}{'|dloss| 1st':>13}"
          f"{'rel dstate 1st':>15}{'|dloss| last':>14}")  # fmt: skip
    for v, r in runs.items():
        med = statistics.median(r["times"])
        pairs = [(a, b) for a, b in zip(r["first"], ref["first"]) if a.is_floating_point()]
        dw = (sum(float((a - b).double().norm()) ** 2 for a, b in pairs)
              / sum(float(b.double().norm()) ** 2 for _, b in pairs)) ** 0.5  # fmt: skip
        print(f"{v:<32}{med:>8.3f}{ref_s / med:>8.2f}{r['first_s']:>14.1f}"
              f"{abs(r['losses'][0] - ref['losses'][0]):>13.2e}{dw:>15.2e}"
              f"{abs(r['losses'][-1] - ref['losses'][-1]):>14.2e}")  # fmt: skip
    print(
        f"(ratio: {args.variants[0]} step time / the variant's; > 1 is faster; |dloss| 1st: "
        "the first step's loss (same weights), rel dstate 1st: ||state - plain|| / ||plain|| "
        "over every weight and BN statistic after that one update; |dloss| last: after every step, where a few "
        "steps on one batch can grow rounding differences)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
