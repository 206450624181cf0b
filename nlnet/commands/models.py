"""List the registered models: name, parameters (millions), description."""

from __future__ import annotations

import argparse

EXAMPLES = """examples:
  nlnet models                 # all registered models with parameter counts
  nlnet models --filter r101   # only names containing "r101" (same as --filter '*r101*')
  nlnet models --filter 'c2d_r50_nl?'   # shell-style wildcards (fnmatch)
  nlnet models --no-params     # skip building the models (faster)
"""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``nlnet models``."""
    parser.add_argument(
        "--filter",
        default=None,
        help="shell-style pattern (c2d_*_nl5); without a wildcard: names containing it",
    )
    parser.add_argument(
        "--no-params", action="store_true", help="do not build the models to count parameters"
    )


def main(args: argparse.Namespace) -> int:
    """Print the registry as a table: name, parameters (millions), description."""
    import torch

    from nlnet.analysis.cost import count_params
    from nlnet.models.registry import get_model_entry, list_models

    names = list_models(args.filter)  # the registry's one matching rule (name_matches)
    if not names:
        print(f"no model matches {args.filter!r}")
        return 1
    width = max(len(n) for n in names)
    print(f"{'name':<{width}}  {'params':>8}  description")
    for n in names:
        entry = get_model_entry(n)
        params = ""
        if not args.no_params:
            with torch.device("meta"):
                params = f"{count_params(entry.builder()) / 1e6:.2f}M"
        print(f"{n:<{width}}  {params:>8}  {entry.description}")
    return 0
