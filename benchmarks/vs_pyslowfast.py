"""One SGD training step of PySlowFast's C2D R50 + non-local blocks against nlnet's, one process.

Developer benchmark. PySlowFast's (facebookresearch/SlowFast) ``configs/Kinetics/
C2D_NLN_8x8_R50.yaml`` is nlnet's ``c2d_r50_nl5`` in PySlowFast's layout
(``nlnet.models.pyslowfast``). Its model is built by its own ``slowfast.models.build_model``
(code unchanged) with ``NUM_GPUS 0``, 400 classes, dropout 0, ``DATA.NUM_FRAMES`` = ``--frames``
and ``DATA.TRAIN_CROP_SIZE`` = 32 x the res5 map (its head average-pools ``NUM_FRAMES // 2 x
(TRAIN_CROP_SIZE // 32)^2``: 128 for 112-pixel clips, 224 for 224, one 1x1x1 pool as nlnet's).
nlnet's variants come from ``benchmarks/train_step_options.py``'s own ``build()``
(``layout="pyslowfast"``) and get PySlowFast's weights (``import_pyslowfast(strict=True)``).

Check: PySlowFast's BatchNorm statistics and affine parameters and its convolution biases are
randomised (its zero-initialised final BatchNorms would hide the residual branches and
non-local blocks) and copied into every variant; eval-mode logits compared (PySlowFast's before
its eval head's softmax), in float32 and, for the first variant, float64. Then every model gets
PySlowFast's initialisation back and trains from it; each first step's loss is printed (in train
mode the randomised network is chaotic: a 1e-7 relative change of the input moves res5's output
by 1e-2, so it could not show agreement). Timing: ``--rounds`` interleaved rounds (one step
of each model per round, the first step, which compiles the compile variants, apart); per model
the median and PySlowFast's median / its. A step: forward, cross-entropy, backward, SGD (lr
0.01, momentum 0.9, weight decay 1e-4; PySlowFast's with PyTorch's default SGD kernel).

Sources (their commits are printed) and PySlowFast's pure-Python dependencies, outside the venv::

    git clone https://github.com/facebookresearch/SlowFast /tmp/psf/SlowFast
    git clone https://github.com/facebookresearch/pytorchvideo /tmp/psf/pytorchvideo
    .venv/bin/python -m pip install --target /tmp/psf/site --no-deps fvcore iopath \\
        simplejson yacs termcolor tabulate psutil portalocker
    .venv/bin/python benchmarks/vs_pyslowfast.py --slowfast /tmp/psf/SlowFast \\
        --pytorchvideo /tmp/psf/pytorchvideo --site /tmp/psf/site --size 112 --rounds 5
    ... --size 224 --variants reference eager fused_sgd+subsample_1x1+compile
"""

from __future__ import annotations

import argparse
import copy
import importlib
import importlib.machinery
import importlib.util
import os
import statistics
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

CONFIG = "configs/Kinetics/C2D_NLN_8x8_R50.yaml"


# benchmarks/train_step_options.py as shipped: its VARIANTS and build()
_spec = importlib.util.spec_from_file_location(
    "train_step_options", Path(__file__).resolve().with_name("train_step_options.py"))  # fmt: skip
TSO = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(TSO)
# the variants whose model keeps PySlowFast's parameter names and trains its BatchNorm
CHOICES = [v for v, o in TSO.VARIANTS.items() if not o.keys() & {"torchvision", "freeze_bn"}]


def stub_missing_imports() -> list[str]:
    """Import shim, not a part of the comparison: PySlowFast imports ``detectron2.layers.
    ROIAlign`` (its AVA detection head), ``cv2`` and ``pandas`` (its data loaders) at import
    time, and this network uses none of them. Each of those modules that fails to import gets an
    empty stand-in in ``sys.modules`` (with a ``__spec__``: torch._dynamo's ``find_spec`` scan
    rejects a module without); returns their names."""

    class ROIAlign:  # the stand-in's only name; the classification head never builds one
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("detectron2 is a stub here (vs_pyslowfast.py)")

    stubbed = []
    for name, attrs in [("cv2", {}), ("pandas", {}), ("detectron2", {}),
                        ("detectron2.layers", {"ROIAlign": ROIAlign})]:  # fmt: skip
        try:
            importlib.import_module(name)
        except ImportError:
            module = types.ModuleType(name)
            module.__spec__ = importlib.machinery.ModuleSpec(name, None)
            module.__dict__.update(attrs)
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)
            stubbed.append(name)
    return stubbed


def commit(path: Path) -> str:
    """The checked-out commit of the source tree ``path`` ('unknown' if not a git tree)."""
    run = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                         text=True, check=False)  # fmt: skip
    return run.stdout.strip() if run.returncode == 0 else "unknown"


def res5_map(size: int) -> int:
    """The res5 map's side for a ``size`` input: stem conv, stem pool, res3-5 each halve it."""
    for _ in range(5):
        size = (size + 1) // 2
    return size


def build_pyslowfast(slowfast: Path, size: int, frames: int) -> torch.nn.Module:
    """PySlowFast's model of ``CONFIG`` (seed 0), built by its ``build_model``, train mode."""
    from slowfast.config.defaults import assert_and_infer_cfg, get_cfg
    from slowfast.models import build_model

    cfg = get_cfg()
    cfg.merge_from_file(str(slowfast / CONFIG))
    crop = 32 * res5_map(size)  # the head pools TRAIN_CROP_SIZE // 32: the whole res5 map
    cfg.merge_from_list(["NUM_GPUS", 0, "MODEL.NUM_CLASSES", 400, "MODEL.DROPOUT_RATE", 0.0,
                         "DATA.NUM_FRAMES", frames, "DATA.TRAIN_CROP_SIZE", crop])  # fmt: skip
    torch.manual_seed(0)
    return build_model(assert_and_infer_cfg(cfg)).train()


@torch.no_grad()
def randomise(model: torch.nn.Module, seed: int = 2) -> None:
    """Every BatchNorm statistic and affine parameter, and every convolution bias, random."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=g))
            m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))
            m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g))
            m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
        elif isinstance(m, torch.nn.modules.conv._ConvNd) and m.bias is not None:
            m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))


@torch.no_grad()
def gap(psf: torch.nn.Module, ours: torch.nn.Module, x: torch.Tensor, bf16: bool = False) -> str:
    """Relative differences ``d`` of nlnet's eval-mode logits from PySlowFast's (taken before its
    eval head's softmax), elementwise max and norm."""
    out: dict[str, torch.Tensor] = {}
    hook = psf.head.projection.register_forward_hook(lambda m, i, o: out.setdefault("a", o))
    psf.eval()([x])
    hook.remove()
    with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
        b = ours.eval()(x).double()
    a = out["a"].reshape(b.shape).double()
    d = b - a
    rel_max, rel_norm = float(d.abs().max() / a.abs().max()), float(d.norm() / a.norm())
    return f"max |d| / max |PySlowFast| {rel_max:.2e}, ||d|| / ||PySlowFast|| {rel_norm:.2e}"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--slowfast", type=Path, required=True, help="PySlowFast's source root")
    p.add_argument("--pytorchvideo", type=Path, required=True, help="pytorchvideo's source root")
    p.add_argument("--site", type=Path, help="a directory of PySlowFast's dependencies")
    p.add_argument("--variants", nargs="+", choices=CHOICES,
                   default=["reference", "eager", "fused_sgd+subsample_1x1"])  # fmt: skip
    p.add_argument("--size", type=int, default=112)
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    return p


def add_sources(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The source roots first on ``sys.path``, ``--site`` last (the venv's torch wins)."""
    needs = [(args.slowfast, "slowfast/models/video_model_builder.py"),
             (args.pytorchvideo, "pytorchvideo/__init__.py")]  # fmt: skip
    for root, inner in needs:
        if not (root / inner).is_file():
            p.exit(2, f"vs_pyslowfast.py: no {inner} under {root} (see the module docstring)\n")
        sys.path.insert(0, str(root.resolve()))
    if args.site is not None:
        if not args.site.is_dir():
            p.exit(2, f"vs_pyslowfast.py: --site {args.site} is not a directory\n")
        sys.path.append(str(args.site.resolve()))


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    add_sources(p, args)
    torch.set_num_threads(args.threads)
    stubbed = stub_missing_imports()
    from nlnet.models.pyslowfast import import_pyslowfast

    with warnings.catch_warnings():  # pytorchvideo's and fvcore's deprecation warnings
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        psf = build_pyslowfast(args.slowfast, args.size, args.frames)
    initial = {k: t.clone() for k, t in psf.state_dict().items()}  # PySlowFast's own init
    randomise(psf)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, 3, args.frames, args.size, args.size, generator=g)
    y = torch.randint(0, 400, (args.batch,), generator=g)
    opt = torch.optim.SGD(psf.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    runs: dict[str, dict[str, Any]] = {
        "pyslowfast": {"model": psf, "opt": opt, "fwd": lambda t: psf([t]), "bf16": False}
    }
    for v in args.variants:
        model, opt, fwd = TSO.build("c2d_r50_nl5", TSO.VARIANTS[v], torch.device("cpu"), None,
                                    x, layout="pyslowfast")  # fmt: skip
        import_pyslowfast(model, psf.state_dict(), strict=True)  # in place: opt keeps its params
        runs[v] = {"model": model, "opt": opt, "fwd": fwd, "bf16": "bf16" in v}

    print(f"PySlowFast {CONFIG} vs nlnet c2d_r50_nl5 (pyslowfast layout), SGD step, batch "
          f"{args.batch} x 3 x {args.frames} x {args.size} x {args.size}, CPU, torch "
          f"{torch.__version__}, threads {torch.get_num_threads()}")  # fmt: skip
    print("THP_MEM_ALLOC_ENABLE=" + os.environ.get("THP_MEM_ALLOC_ENABLE", "(unset)")
          + " MALLOC_MMAP_MAX_=" + os.environ.get("MALLOC_MMAP_MAX_", "(unset)")
          + f"; import stubs: {', '.join(stubbed) or 'none'}")  # fmt: skip
    print(f"SlowFast {commit(args.slowfast)}, pytorchvideo {commit(args.pytorchvideo)}; "
          f"DATA.TRAIN_CROP_SIZE {32 * res5_map(args.size)}")  # fmt: skip

    # -- the same network: logits in eval mode (randomised BatchNorm statistics and biases) ---
    print("logits in eval mode, d = nlnet's - PySlowFast's:")
    for v, r in list(runs.items())[1:]:
        print(f"  {v}: {gap(psf, r['model'], x, r['bf16'])}")
    psf64 = copy.deepcopy(psf).double()
    ours64 = copy.deepcopy(runs[args.variants[0]]["model"]).double()
    import_pyslowfast(ours64, psf64.state_dict(), strict=True)  # conv_out's bias folded in f64
    print(f"  {args.variants[0]}, both in float64: {gap(psf64, ours64, x.double())}")
    del psf64, ours64
    psf.load_state_dict(initial)  # training starts from PySlowFast's initialisation
    for r in runs.values():
        if r["model"] is not psf:
            import_pyslowfast(r["model"], initial, strict=True)
        r["model"].train()

    # -- timing ---------------------------------------------------------------------------------
    def step(r: dict[str, Any]) -> float:
        r["opt"].zero_grad(set_to_none=True)
        with torch.autocast("cpu", torch.bfloat16, enabled=r["bf16"]):
            loss = F.cross_entropy(r["fwd"](x), y)
        loss.backward()
        r["opt"].step()
        return float(loss.detach())

    for v, r in runs.items():  # the first step (the compile variants compile in it)
        t = time.perf_counter()
        r["loss"] = step(r)
        r["first_s"], r["times"] = time.perf_counter() - t, []
        print(f"  {v}: first step {r['first_s']:.1f} s", file=sys.stderr, flush=True)
    for _ in range(args.rounds):
        for r in runs.values():
            t = time.perf_counter()
            step(r)
            r["times"].append(time.perf_counter() - t)

    base = runs["pyslowfast"]
    base_s = statistics.median(base["times"])
    print(f"\nmedian of {args.rounds} interleaved rounds (first step apart)")
    print(f"{'model':<34}{'step s':>8}{'PySlowFast/it':>15}{'first step s':>14}"
          f"{'loss, 1st step':>16}{'|dloss|':>10}")  # fmt: skip
    for v, r in runs.items():
        med = statistics.median(r["times"])
        print(f"{v:<34}{med:>8.3f}{base_s / med:>15.2f}{r['first_s']:>14.1f}"
              f"{r['loss']:>16.8f}{abs(r['loss'] - base['loss']):>10.1e}")  # fmt: skip
    print("(PySlowFast/it: PySlowFast's median / the model's, > 1: faster than PySlowFast; "
          "|dloss|: from PySlowFast's first-step loss, same weights and batch)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
