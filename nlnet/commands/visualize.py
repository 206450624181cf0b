"""Draw the attention maps of the non-local blocks of a trained model (Figures 1 and 3).

A model without non-local blocks but with transformer attention (ViT, Swin, the joint and
divided video transformers) gets one attention-rollout picture instead (``rollout.png``: the
class token's, or for Swin the pooled tokens', rollout over the patches, Abnar & Zuidema 2020),
drawn by :func:`nlnet.analysis.rollout.transformer_attention_figure`.

The model, its class names and its preprocessing come from the checkpoint
(:func:`nlnet.load_model`, :func:`nlnet.preprocessing`): a video classifier sees the clip that
``nlnet predict --clips 1`` scores (the centre clip, at the stored stride, test scale and crop),
an image classifier the image ``nlnet predict`` scores, so both name the same class.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

EXAMPLES = """examples:
  nlnet visualize --checkpoint runs/demo-*/c2d_tiny_nl1.pt --video clip.mp4
  nlnet visualize --checkpoint model.pt --video clip.mp4 --query 0,12,20 --output figs
  nlnet visualize --checkpoint image_model.pt --video photo.png --query 40,60
  nlnet visualize --checkpoint vit.pt --video photo.png      (a transformer: rollout.png)
The query is "t,y,x" (frame, row, column of the model input) for video, "y,x" for an image;
without --query the position whose attention is most concentrated is used. A transformer's
rollout has no query; ViT and the video transformers get the input resized to their size.
"""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="a checkpoint written by nlnet")
    parser.add_argument("--video", required=True, help="a video file, or an image for 2D models")
    parser.add_argument(
        "--query",
        action="append",
        default=None,
        help="t,y,x (video) or y,x (image) in input pixels; repeatable (default: the strongest)",
    )
    parser.add_argument(
        "--output", default="visualize", help="output folder (default: %(default)s)"
    )
    parser.add_argument("--block", default=None, help="non-local block name (default: all)")
    parser.add_argument("--top-k", type=int, default=20, help="arrows per query (default: 20)")
    parser.add_argument(
        "--frames", type=int, default=None, help="frames to sample (default: the checkpoint's)"
    )
    parser.add_argument("--size", type=int, default=None, help="resize frames to this square size")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (default: cpu)")


def _parse_query(text: str, ndim: int) -> tuple[int, ...]:
    from nlnet.engine.errors import DataError

    try:
        vals = tuple(int(v) for v in text.replace(" ", "").split(","))
    except ValueError as err:
        raise DataError(f"--query: expected integers like 't,y,x', got {text!r}") from err
    if len(vals) != ndim:
        raise DataError(f"--query: expected {ndim} numbers for this input, got {text!r}")
    return vals


def _fixed_side(model: Any) -> int | None:
    """The input side a transformer requires (ViT, video transformer), else ``None``."""
    if hasattr(model, "image_size") and isinstance(model.image_size, int):
        return model.image_size  # ViT
    size = getattr(model, "input_size", None)
    return int(size[-1]) if isinstance(size, tuple) and len(size) == 3 else None


def _rollout_picture(model: Any, inp: Any, frames: Any, args: argparse.Namespace, info) -> int:
    """The transformer branch: one attention-rollout figure, ``rollout.png``."""
    from nlnet.analysis.rollout import save_rollout_picture
    from nlnet.engine.errors import DataError

    for flag, value in (("--query", args.query), ("--block", args.block)):
        if value:
            raise DataError(
                f"{flag}: {info.model_name} has no non-local block; its picture is the "
                "attention rollout of the whole transformer, which has no query or block"
            )
    path = Path(args.output) / "rollout.png"
    label = save_rollout_picture(model, inp, frames, info.class_names, path,
                                 f"{info.model_name}  attention rollout")  # fmt: skip
    print(f"prediction: {label}")
    print(f"wrote {path}")
    return 0


def _check_kind(model_name: str) -> None:
    """Detectors take lists of images and return boxes: a one-line error naming what
    ``visualize`` takes (video/image classifiers, segmentation models)."""
    from nlnet.engine.checkpoint.model_loading import check_rebuildable
    from nlnet.engine.errors import CheckpointError
    from nlnet.models.registry import model_facts

    check_rebuildable({"model_name": model_name})  # a network of one's own: the Python way
    try:
        facts = model_facts(model_name)
    except ValueError as exc:
        raise CheckpointError(f"--checkpoint: {exc}") from None
    task = facts.task
    if facts.input_kind == "volume":
        raise CheckpointError(
            f"--checkpoint: nlnet visualize takes video/image classification and 2D segmentation "
            f"checkpoints; {model_name!r} segments 3D volumes (see nlnet eval for its Dice)"
        )
    if task == "detection":
        raise CheckpointError(
            f"--checkpoint: nlnet visualize takes video/image classification and segmentation "
            f"checkpoints; {model_name!r} is a detector (see nlnet eval for its AP)"
        )


def _label(logits: Any, names: list[str]) -> str:
    """The predicted class name, or for a per-pixel output its most frequent class."""
    if logits.dim() > 2:  # segmentation: (1, K, H, W)
        pred = int(logits.argmax(1)[0].flatten().mode().values)
        name = names[pred] if pred < len(names) else str(pred)
        return f"per-pixel map (most pixels: {name})"
    pred = int(logits.argmax(1)[0])
    return names[pred] if pred < len(names) else str(pred)


def _query_indices(mapping: Any, attn: Any, queries: list[str] | None) -> list[int]:
    """Flattened query cells of ``--query`` values (default: the strongest query)."""
    from nlnet.analysis.visualize import strongest_query
    from nlnet.engine.errors import DataError

    if not queries:
        return [strongest_query(attn)]
    out = []
    for text in queries:
        pos = _parse_query(text, len(mapping.input_size))
        try:
            out.append(mapping.query_index(pos))
        except ValueError:
            axes = "t,y,x" if len(pos) == 3 else "y,x"
            limits = ",".join(f"0..{n - 1}" for n in mapping.input_size)
            raise DataError(
                f"--query: {text!r} lies outside the model input ({axes} within {limits})"
            ) from None
    return out


def main(args: argparse.Namespace) -> int:
    import torch

    from nlnet.analysis.attention_record import (
        find_attention_layers,
        find_non_local_blocks,
        record_attention,
    )
    from nlnet.analysis.plotting import pyplot
    from nlnet.analysis.visualize import arrows_figure, heatmap_figure
    from nlnet.commands.common import device_arg, output_dir_arg
    from nlnet.engine.checkpoint import checkpoint_info, load_checkpoint
    from nlnet.engine.errors import DataError
    from nlnet.inference import load_model
    from nlnet.model_input import model_input

    video_path = Path(args.video)
    if not video_path.is_file():
        raise DataError(f"--video: no such file {str(video_path)!r}")
    if args.top_k < 1:
        raise DataError(f"--top-k: expected a positive integer, got {args.top_k}")
    for flag, value in (("--frames", args.frames), ("--size", args.size)):
        if value is not None and value < 1:
            raise DataError(f"{flag}: expected a positive integer, got {value}")
    output_dir_arg(args.output, "--output")
    device = device_arg(args.device)
    ckpt = load_checkpoint(args.checkpoint)
    info = checkpoint_info(ckpt)
    _check_kind(info.model_name)
    model = load_model(ckpt, device)
    transformer = not find_non_local_blocks(model) and bool(find_attention_layers(model))
    if not transformer and not find_non_local_blocks(model):
        raise DataError(
            f"--checkpoint: {info.model_name} has no non-local block or attention layer to draw "
            "(the picture is of attention weights)"
        )
    side = _fixed_side(model) if transformer else None
    inp, frames_np = model_input(video_path, model, info, frames=args.frames, size=args.size,
                                 side=side)  # fmt: skip
    inp = inp.to(device)
    if transformer:
        return _rollout_picture(model, inp, frames_np, args, info)
    if args.block is not None and args.block not in dict(find_non_local_blocks(model)):
        have = ", ".join(dict(find_non_local_blocks(model))) or "none"
        raise DataError(f"--block: no non-local block {args.block!r} in {info.model_name}; "
                        f"its blocks: {have}")  # fmt: skip
    with record_attention(model, args.block, to_cpu=True) as rec, torch.no_grad():
        logits = model(inp)
    label = _label(logits, info.class_names)
    maps = [(b, rec.maps[b][0], rec.mapping(b, inp.shape[2:])) for b in rec.names]  # (N, N')
    queries = {b: _query_indices(m, attn, args.query) for b, attn, m in maps}  # checked first
    out_dir = Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    plt = pyplot()
    written = []
    for bname, attn, mapping in maps:
        for q in queries[bname]:
            where = ",".join(str(int(round(c))) for c in mapping.query_center(q))
            title = f"{info.model_name}  {bname}  query ({where})  prediction: {label}"
            stem = out_dir / f"{bname.replace('.', '_')}_q{q}"
            for kind, fig in (
                (
                    "arrows",
                    arrows_figure(frames_np, attn[q], mapping, q, top_k=args.top_k, title=title),
                ),  # fmt: skip
                ("heatmap", heatmap_figure(frames_np, attn[q], mapping, q, title=title)),
            ):
                fig.savefig(f"{stem}_{kind}.png", dpi=120)
                plt.close(fig)
                written.append(f"{stem}_{kind}.png")
    print(f"prediction: {label}")
    for p in written:
        print(f"wrote {p}")
    return 0
