"""Show the non-local block on a synthetic video tensor: each instantiation, shapes and cost.

Builds one block per instantiation for a res4-like feature map (1024 channels, 4x14x14, as in
Figure 2 of the paper) on the meta device, so it runs instantly without allocating memory, and
prints the output shape, the parameter count and the multiply-adds (FLOPs / 2, the paper's
convention), with and without the spatial subsampling of Sec. 3.3.
"""

from __future__ import annotations

import argparse

import torch
from torch.utils.flop_counter import FlopCounterMode

from nlnet.functional.nonlocal_op import INSTANTIATIONS
from nlnet.layers.nonlocal_block import NonLocal3d

EXAMPLES = """examples:
  nlnet showcase
  nlnet showcase --channels 512 --size 8x28x28
"""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--channels", type=int, default=1024, help="input channels (default 1024)")
    parser.add_argument("--size", default="4x14x14", help="feature map T x H x W (default 4x14x14)")
    parser.add_argument("--batch", type=int, default=1)


def block_cost(block: torch.nn.Module, x: torch.Tensor) -> tuple[tuple[int, ...], int, float]:
    """Output shape, parameter count and multiply-adds of one forward pass of ``block``."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = block(x)
    params = sum(p.numel() for p in block.parameters())
    return tuple(out.shape), params, counter.get_total_flops() / 2


def main(args: argparse.Namespace) -> int:
    from nlnet.engine.errors import UserError

    try:
        size = tuple(int(s) for s in args.size.lower().split("x"))
    except ValueError:
        size = ()
    if len(size) != 3 or min(size) < 1 or args.channels < 1 or args.batch < 1:
        raise UserError(
            f"--size/--channels/--batch: expected T x H x W and counts >= 1, got --size "
            f"{args.size!r} --channels {args.channels} --batch {args.batch}"
        )
    x = torch.empty(args.batch, args.channels, *size, device="meta")
    print(f"input {tuple(x.shape)} (B, C, T, H, W); N = {size[0] * size[1] * size[2]} positions\n")
    print(
        f"{'instantiation':<18} {'sub_sample':<11} {'output shape':<24} {'params':>10} {'mult-adds':>12}"
    )
    for inst in INSTANTIATIONS:
        for sub in (False, True):
            block = NonLocal3d(args.channels, instantiation=inst, sub_sample=sub).to("meta")
            shape, params, madds = block_cost(block.eval(), x)
            print(
                f"{inst:<18} {str(block.kernel):<11} {str(shape):<24} {params:>10,} {madds / 1e9:>10.3f} G"
            )
    return 0
