"""List the registered models: name, parameters (millions), whether a video model sees the
order of frames (computed, :mod:`nlnet.analysis.time_order`), description."""

from __future__ import annotations

import argparse

EXAMPLES = """examples:
  nlnet models                 # all registered models with parameter counts
  nlnet models --filter r101   # only names containing "r101" (same as --filter '*r101*')
  nlnet models --filter 'c2d_r50_nl?'   # shell-style wildcards (fnmatch)
  nlnet models --no-params     # skip building the models (faster; no params, no time column)

time column: "order" = the model's output changes when the frames are reordered (it can tell
moving left from moving right); "blind" = exactly invariant to frame order (C2D with a temporal
average: classes that differ only in the order of frames are out of its reach); "-" = not a video
model. Computed on a narrow copy of each model with random weights.
"""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``nlnet models``."""
    parser.add_argument(
        "--filter",
        default=None,
        help="shell-style pattern (c2d_*_nl5); without a wildcard: names containing it",
    )
    parser.add_argument(
        "--no-params",
        action="store_true",
        help="do not build the models (no parameter count, no frame-order column)",
    )


def main(args: argparse.Namespace) -> int:
    """Print the registry as a table: name, parameters (millions), time, description."""
    import torch

    from nlnet.analysis.cost import count_params
    from nlnet.analysis.time_order import is_video_model, sees_frame_order
    from nlnet.models.registry import find_models, get_model_entry

    names = find_models(args.filter)  # a text without a wildcard: the names containing it
    if not names:
        print(f"no model matches {args.filter!r}")
        return 1
    width = max(len(n) for n in names)
    print(f"{'name':<{width}}  {'params':>8}  {'time':<5}  description")
    for n in names:
        entry = get_model_entry(n)
        params = time = ""
        if not args.no_params:
            with torch.device("meta"):
                params = f"{count_params(entry.builder()) / 1e6:.2f}M"
            time = "-" if not is_video_model(n) else "order" if sees_frame_order(n) else "blind"
        print(f"{n:<{width}}  {params:>8}  {time:<5}  {entry.description}")
    return 0
