"""Parameters and multiply-adds of a registered model (per stage and per non-local block)."""

from __future__ import annotations

import argparse

from nlnet.analysis.cost import (
    TABLE2E_PAPER,
    mask_rcnn_like_cost,
    model_cost,
    parse_input_size,
    table2e,
)

EXAMPLES = """examples:
  nlnet cost --checkpoint runs/mine/checkpoints/final.pt   # the trained model, its clip size
  nlnet cost c2d_r50 --input 32x224x224
  nlnet cost c2d_r50_nl5 --input 32x224x224 --compare c2d_r101
  nlnet cost resnet50_nl_coco --input 800x1333
  nlnet cost --table2e          # Table 2e (R101) and the R50 5-block vs R101 baseline figures
  nlnet cost --coco             # one block in a Mask R-CNN-like ResNet-50 at 800x1333
"""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``nlnet cost``."""
    parser.add_argument("model", nargs="?", help="registered model name (see `nlnet models`)")
    parser.add_argument(
        "--input",
        default=None,
        help="input size TxHxW (video) or HxW (image); default: the model's input_size",
    )
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="count the model stored in this checkpoint (its name, options and clip size)",
    )
    parser.add_argument("--compare", default=None, help="print ratios to this model")
    parser.add_argument("--num-classes", type=int, default=None, help="classifier outputs")
    parser.add_argument(
        "--table2e", action="store_true", help="reproduce Table 2e (R101, 32x224x224)"
    )
    parser.add_argument(
        "--coco", action="store_true", help="one block in a Mask R-CNN-like R50 at 800x1333"
    )
    parser.add_argument(
        "--device",
        default="meta",
        help="counting always runs on the meta device; accepted for CLI uniformity",
    )


def _default_input(name: str) -> tuple[int, ...]:
    from nlnet.models.registry import get_model_entry

    size = tuple(get_model_entry(name).default_cfg.input_size)
    return size[1:]


def _channels(name: str) -> int:
    """Input channels of a model: the first entry of its registered ``input_size`` (3 if none;
    e.g. 4 MRI modalities for ``unet3d``)."""
    from nlnet.models.registry import get_model_entry

    return int(get_model_entry(name).default_cfg.get("input_size", (3,))[0])


def _print_table2e(size: tuple[int, ...]) -> None:
    ratios = table2e(size)
    print(f"Table 2e, relative to c2d_r101, input {'x'.join(map(str, size))}")
    print(f"{'model':<16} {'params':>8} {'paper':>6} {'FLOPs':>8} {'paper':>6}")
    paper = {**TABLE2E_PAPER, "c2d_r50_nl5": (0.7, 0.8)}
    for name, (p, f) in ratios.items():
        pp, pf = paper[name]
        print(f"{name:<16} {p:>7.2f}x {pp:>5.1f}x {f:>7.2f}x {pf:>5.1f}x")


def main(args: argparse.Namespace) -> int:
    """Run ``nlnet cost``."""
    if args.table2e:
        _print_table2e(parse_input_size(args.input) if args.input else (32, 224, 224))
    if args.coco:
        size = parse_input_size(args.input) if args.input else (800, 1333)
        if len(size) != 2:
            size = (800, 1333)
        with_nl = mask_rcnn_like_cost(50, size)
        print(f"Mask R-CNN-like ResNet-50-FPN at {size[0]}x{size[1]} (GMACs)")
        for k, v in with_nl.items():
            print(f"  {k:<10} {v / 1e9:9.2f}")
        print(
            f"  one non-local block: +{with_nl['non_local'] / (with_nl['total'] - with_nl['non_local']):.1%} "
            f"of the model, +{with_nl['non_local'] / (with_nl['backbone'] - with_nl['non_local']):.1%} "
            "of the backbone"
        )
    kw = {} if args.num_classes is None else {"num_classes": args.num_classes}
    size = parse_input_size(args.input) if args.input else None
    if args.checkpoint:
        from nlnet.engine.checkpoint import checkpoint_info

        info = checkpoint_info(args.checkpoint)
        args.model = info.model_name
        kw = {"num_classes": info.num_classes, **info.model_options, **kw}
        prep = info.preprocessing
        if size is None and prep is not None and prep.is_video and prep.size:
            size = (prep.num_frames, *(prep.crop_hw() or (prep.size, prep.size)))
    if args.model is None:
        if not (args.table2e or args.coco):
            print("nlnet cost: give a MODEL, --table2e or --coco")
            return 2
        return 0
    from nlnet.engine.config import ConfigError
    from nlnet.models.registry import get_model_entry

    try:
        get_model_entry(args.model)
    except ValueError as exc:
        raise ConfigError(f"MODEL: {exc}") from None
    size = size or _default_input(args.model)
    if get_model_entry(args.model).default_cfg.family == "detection":
        from nlnet.analysis.detection_cost import detector_cost_table

        print(detector_cost_table(args.model, size))  # a detector cannot run whole on meta
        return 0
    rep = model_cost(args.model, size, in_channels=_channels(args.model), **kw)
    print(rep.table())
    if args.compare:
        other = model_cost(args.compare, size, in_channels=_channels(args.compare), **kw)
        print(
            f"relative to {args.compare}: params {rep.params / other.params:.2f}x, "
            f"MACs {rep.macs / other.macs:.2f}x"
        )
    return 0
