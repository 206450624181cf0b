"""Train C2D vs. non-local C2D on the built-in digits video task, in minutes on a CPU.

What it does and writes: :mod:`nlnet.demo.video`.
"""

from __future__ import annotations

import argparse

EXAMPLES = """examples:
  nlnet demo                       # default setting (a few minutes on a 2-core CPU)
  nlnet demo --seed 1              # another seed (data and initialisation)
  nlnet demo --variants            # also the space-only and time-only blocks (Table 2d)
  nlnet demo --quick               # a tiny smoke-test setting (seconds; numbers are meaningless)
  nlnet demo --task segmentation   # dense demo: seg_tiny vs. seg_tiny_nl on digit images (Sec. 5)
  nlnet demo --task super-resolution  # EDSR vs. EDSR + NL on scikit-image/-learn photographs
  nlnet demo --task unet           # U-Net vs. U-Net + bottleneck block on digit images
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
        "--task",
        choices=("same", "pointer", "match", "segmentation", "super-resolution", "unet"),
        default="same",
        help="which digits task (default: same; see nlnet.demo.digits); segmentation: the dense "
        "demo (nlnet.demo.dense)",
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument(
        "--threads",
        default="auto",
        help="CPU cores (default: auto). The video, super-resolution and U-Net demos train their "
        "models side by side, one PyTorch thread each (auto = the usable cores), so their figures "
        "do not depend on it; the segmentation demo: threads of one process (auto = idle cores)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def main(args: argparse.Namespace) -> int:
    from nlnet.demo.jobs import jobs_for
    from nlnet.engine.errors import UserError

    try:
        jobs_for(args.threads)  # the one check of --threads, before any work
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.task in ("super-resolution", "unet"):  # the practitioner's use cases
        from nlnet.demo.sr import cli_main

        return cli_main(args)
    if args.task == "segmentation":
        return _dense(args)
    from nlnet.demo.video_run import run_demo

    run_demo(args)
    return 0


def _dense(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    import torch

    from nlnet.demo.dense import DEMO_EPOCHS, run_dense_demo
    from nlnet.demo.digits_dense import DenseDigitsConfig
    from nlnet.demo.jobs import threads_for
    from nlnet.engine.errors import UserError

    try:  # more threads than idle cores make PyTorch's CPU kernels far slower when shared
        torch.set_num_threads(threads_for(args.threads))
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError("--device cuda: CUDA is not available on this machine")

    data = DenseDigitsConfig(size=48, num_train=16, num_val=4, num_test=8) if args.quick else None
    epochs = args.epochs or (1 if args.quick else DEMO_EPOCHS)
    out = Path(args.output_dir) / f"dense-demo-{time.strftime('%Y%m%d-%H%M%S')}-seed{args.seed}"
    run_dense_demo(
        "segmentation", [args.seed], out_dir=out, data=data, epochs=epochs,
        batch_size=4 if args.quick else 32,
        data_root=Path(args.cache_dir) / "dense" if args.cache_dir else None, device=args.device,
    )  # fmt: skip
    return 0
