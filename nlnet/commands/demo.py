"""Train C2D vs. non-local C2D on the built-in digits video task, in minutes on a CPU.

What it does and writes: :mod:`nlnet.demo.video`.
"""

from __future__ import annotations

import argparse
from typing import Any

EXAMPLES = """examples:
  nlnet demo                       # default setting (a few minutes on a 2-core CPU)
  nlnet demo --seed 1              # another seed (data and initialisation)
  nlnet demo --variants            # also the space-only and time-only blocks (Table 2d)
  nlnet demo --quick               # a tiny smoke-test setting (seconds; numbers are meaningless)
  nlnet demo --seeds 0-9           # every reported seed, then the seed table (mean, std, min)
  nlnet demo --seeds 100-104 --split val  # the screening seeds: validation figures only
  nlnet demo --seeds 100-104 --split val --set epochs=6  # screen a recipe change
  nlnet demo --seeds 0-9 --report  # the table from the runs already in --output-dir
  nlnet demo --seeds 100-129 --prepare  # clips and 2D pre-training of the seeds, cached
  nlnet demo --seeds 100-129 --split val --report --perturb init_noise=1e-6  # rounding check
  nlnet demo --task order          # the order control: C2D + NL cannot tell, a temporal block can
  nlnet demo --task segmentation   # dense demo: seg_tiny vs. seg_tiny_nl on digit images (Sec. 5)
  nlnet demo --task segmentation --set freeze_backbone=false  # the backbone trained too
  nlnet demo --task super-resolution  # EDSR + NL vs. equal-cost EDSR on self-similar photos
  nlnet demo --task unet           # U-Net vs. U-Net + bottleneck block on digit images
  nlnet demo --task segmentation --seeds 0-19  # a dense demo's seed table (its bar, +10 mIoU)
  nlnet demo --device cuda --output-dir runs
"""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="seed of data and training (0)")
    parser.add_argument("--output-dir", default="runs", help="parent of the run directory (runs)")
    parser.add_argument(
        "--cache-dir", default=None, help="dataset cache (default $NLNET_CACHE or ~/.cache/nlnet)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny smoke-test setting")
    parser.add_argument(
        "--variants", action="store_true", help="also train the space-only and time-only blocks"
    )
    parser.add_argument("--epochs", type=int, default=None, help="override the number of epochs")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="change one recipe setting of the demo (repeatable), e.g. --set lr=3e-3 "
        "--set task.num_train=8000, or --task segmentation --set freeze_backbone=false: how "
        "recipes are screened (docs/demo.md, Protocol)",
    )  # fmt: skip
    parser.add_argument(
        "--seeds", default=None, help="run these seeds (e.g. 0-9 or 0,2,5-7) and write the seed "
        "table <output-dir>/demo-seeds-<task>-<split>.md (the dense demos: "
        "dense-seeds-<task>-<split>.md)",
    )  # fmt: skip
    parser.add_argument(
        "--report", action="store_true",
        help="with --seeds: write the table from the newest runs in --output-dir, train nothing",
    )  # fmt: skip
    parser.add_argument(
        "--prepare", action="store_true",
        help="with --seeds: write each seed's clips and 2D pre-training into the cache, train "
        "nothing (later runs of those seeds train only the video models)",
    )  # fmt: skip
    parser.add_argument(
        "--perturb", default=None, metavar="KEY=VALUE",
        help="with --seeds --report: compare each seed's pass/fail with the runs that also had "
        "--set KEY=VALUE (e.g. init_noise=1e-6): the protocol's rounding check",
    )  # fmt: skip
    parser.add_argument(
        "--split", choices=("test", "val"), default="test",
        help="the figures of the seed table: test (reported seeds) or val (screening seeds)",
    )  # fmt: skip
    parser.add_argument(
        "--task",
        choices=("same", "pointer", "match", "order", "segmentation", "super-resolution", "unet"),
        default="same",
        help="which digits task (default: same; see nlnet.data.digits.video); segmentation: the dense "
        "demo (nlnet.demo.dense)",
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument(
        "--threads",
        default="auto",
        help="CPU cores (default: auto = the usable cores). The demos train their models side by "
        "side, one PyTorch thread each, so their figures do not depend on it",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bars (there are none when stderr is not a terminal)",
    )


def main(args: argparse.Namespace) -> int:
    import sys

    from nlnet.commands.common import device_arg, output_dir_arg
    from nlnet.engine.errors import UserError
    from nlnet.engine.jobs import jobs_for

    # a bar redraws itself with "\r": only on a terminal, never in a log file or a pipe
    args.no_progress = args.no_progress or not sys.stderr.isatty()
    output_dir_arg(args.output_dir)
    args.device = str(device_arg(args.device))  # "auto" -> the device it resolves to
    try:
        jobs_for(args.threads)  # the one check of --threads, before any work
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.task in DENSE_TASKS:
        settings = _dense_settings(args)
        if getattr(args, "seeds", None) is not None:
            return _dense_seeds(args, settings)
    if getattr(args, "seeds", None) is not None:
        from nlnet.demo.video_run import run_seeds

        run_seeds(args)
        return 0
    if getattr(args, "report", False):
        raise UserError("--report: needs --seeds (which seeds' runs to table)")
    if getattr(args, "perturb", None):
        raise UserError("--perturb: needs --seeds and --report")
    if getattr(args, "prepare", False):
        raise UserError("--prepare: needs --seeds (which seeds to prepare)")
    if getattr(args, "split", "test") != "test":
        raise UserError("--split: needs --seeds (the split of the seed table)")
    if args.task in DENSE_TASKS:
        return _dense_demo(args, settings)
    from nlnet.demo.video_run import run_demo

    run_demo(args)
    return 0


#: The demos of :mod:`nlnet.demo.dense` and :mod:`nlnet.demo.sr`.
DENSE_TASKS = ("segmentation", "super-resolution", "unet")


def _dense_settings(args: argparse.Namespace) -> Any:
    """A dense demo's settings from ``--quick``, ``--set`` and ``--epochs``: the one reading,
    before any work (:func:`nlnet.demo.settings.dense_settings`)."""
    from nlnet.demo.settings import dense_settings
    from nlnet.engine.errors import UserError

    changes = list(args.overrides)
    if args.epochs and args.task == "super-resolution":
        raise UserError("--epochs: the super-resolution demo trains for steps; use --set steps=N")
    if args.epochs:
        changes.append(f"epochs={args.epochs}")
    try:
        return dense_settings(args.task, changes, args.quick)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _data_root(args: argparse.Namespace) -> Any:
    """The dense digits folders under ``--cache-dir`` (None: the default cache)."""
    from pathlib import Path

    return Path(args.cache_dir) / "dense" if args.cache_dir else None


def _dense_demo(args: argparse.Namespace, settings: Any) -> int:
    """``--task segmentation|unet|super-resolution``: both models side by side, one thread each
    (``--threads`` jobs), into ``<output-dir>/<task>-demo-<timestamp>-seed<k>/``."""
    import time
    from pathlib import Path

    from nlnet.engine.jobs import jobs_for

    name = "dense" if args.task == "segmentation" else args.task
    out = Path(args.output_dir) / f"{name}-demo-{time.strftime('%Y%m%d-%H%M%S')}-seed{args.seed}"
    run = dict(out_dir=out, device=args.device, jobs=jobs_for(args.threads))
    if args.task == "super-resolution":
        from nlnet.demo.sr import run_sr_demo

        run_sr_demo([args.seed], settings=settings, **run)
    else:
        from nlnet.demo.dense import run_dense_demo

        run_dense_demo([args.seed], settings, data_root=_data_root(args), **run)
    print(f"outputs in {out}")
    return 0


def _dense_seeds(args: argparse.Namespace, settings: Any) -> int:
    """``--seeds`` of a dense demo: the one seed runner (:mod:`nlnet.demo.seeds`)."""
    from pathlib import Path

    from nlnet.analysis.seeds import parse_seeds
    from nlnet.demo.seeds import run_seed_table
    from nlnet.engine.errors import UserError
    from nlnet.engine.jobs import jobs_for

    for flag in ("prepare", "perturb"):
        if getattr(args, flag, None):
            raise UserError(f"--{flag}: for the video tasks' seeds, not --task {args.task}")
    try:
        path = run_seed_table(
            args.task, parse_seeds(args.seeds), Path(args.output_dir), jobs_for(args.threads),
            settings, split=args.split, report=args.report, device=args.device,
            data_root=_data_root(args),
        )  # fmt: skip
    except ValueError as exc:
        raise UserError(str(exc)) from None
    print(f"{path.read_text()}\nwritten to {path}")
    return 0
