"""Top-k classes of video files with a trained checkpoint (multi-clip testing, Section 4.1),
or the masks of images and volumes with a segmentation checkpoint.

Each video is cut into ``--clips`` clips spread evenly over its length (the paper: 10); the clip
scores (softmax, or sigmoid for a multi-label model) are averaged and the ``--top-k`` classes are
printed with their scores.  Class names come from the checkpoint (or ``--classes FILE``).  A
segmentation checkpoint writes a mask and an overlay per input into ``--output-dir``
(:mod:`nlnet.commands.predict_masks`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

EXAMPLES = """examples:
  nlnet predict clip1.mp4 clip2.mp4 --checkpoint runs/mine/checkpoints/final.pt
  nlnet predict my_videos/val/*/*.mp4 --checkpoint final.pt --top-k 3 --clips 10 --json
  nlnet predict my_videos/val --checkpoint final.pt     (every video under the folder)
  nlnet predict video.mp4 --checkpoint k400.pt --classes kinetics_classes.txt --device cuda
  nlnet predict case_017.nii.gz --checkpoint unet3d.pt --output-dir masks --window 64,64,64
  nlnet predict photos/ --checkpoint seg.pt      (a segmentation checkpoint: masks + overlays)
"""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "videos",
        nargs="+",
        metavar="VIDEO",
        help="video files (image files for image models; images or volumes for segmentation "
        "models), or folders of them",
    )
    parser.add_argument("--checkpoint", "-k", required=True, help="a .pt written by nlnet train")
    parser.add_argument("--top-k", type=int, default=5, help="classes to print per video (5)")
    parser.add_argument("--topk", type=int, dest="top_k", help=argparse.SUPPRESS)  # old spelling
    parser.add_argument("--classes", help="class-index file (.txt/.json) overriding the ckpt's")
    parser.add_argument(
        "--clips", type=int, help="clips per video (default: the ckpt's eval.clips)"
    )
    parser.add_argument("--crops", type=int, choices=(1, 3), help="spatial views per clip")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--json", action="store_true", help="print one JSON object per video")
    seg = parser.add_argument_group("segmentation checkpoints")
    seg.add_argument("--output-dir", default="predictions",
                     help="where masks and overlays go (predictions)")  # fmt: skip
    seg.add_argument("--window", help="sliding window: auto (as the checkpoint's evaluation), "
                     "none (whole inputs), patch (the training's), or sizes like 64,64,64")  # fmt: skip
    seg.add_argument("--overlap", type=float, default=None,
                     help="overlap of neighbouring windows (default: the checkpoint's, or 0.25)")  # fmt: skip


_DENSE = {"super_resolution": "super-resolution"}


def checkpoint_kind(model_name: str) -> str:
    """``"clip"`` or ``"image"`` for a classifier, ``"segmentation"`` for a segmentation
    model; a :class:`UserError` (one line) naming the command for detection models."""
    from nlnet.engine.checkpoint.model_loading import check_rebuildable
    from nlnet.engine.errors import UserError
    from nlnet.models.registry import model_facts

    check_rebuildable({"model_name": model_name})  # a network of one's own: the Python way
    try:
        facts = model_facts(model_name)
    except ValueError as exc:
        raise UserError(f"--checkpoint: {exc}") from None
    if facts.task == "segmentation":
        return "segmentation"
    if facts.task not in ("video_classification", "image_classification"):
        raise UserError(
            f"--checkpoint: nlnet predict takes classification and segmentation checkpoints; "
            f"{model_name!r} is a {_DENSE.get(facts.task, facts.task)} model (use nlnet eval, "
            "or nlnet visualize for its attention)"
        )
    return facts.input_kind


def predict_videos(
    videos: list[str],
    checkpoint: Any,
    *,
    topk: int = 5,
    classes: str | None = None,
    clips: int | None = None,
    crops: int | None = None,
    device: Any = "auto",
) -> list[dict[str, Any]]:
    """Score video (or, for an image model, image) files; returns
    ``[{"video", "top": [(name, score), ...]} | {"video", "error"}]``.

    A thin wrapper of the Python inference API (:func:`nlnet.inference.predict`): the model and
    the test-time preprocessing (clip length, stride, test scale, normalisation, clips x crops;
    an image model's resize and crop) are those stored in the checkpoint.
    """
    from nlnet.engine.checkpoint import checkpoint_info, load_checkpoint
    from nlnet.engine.errors import UserError
    from nlnet.inference import load_model, predict, preprocessing

    if topk < 1:
        raise UserError(f"--top-k: expected a positive integer, got {topk}")
    for flag, value in (("--clips", clips), ("--crops", crops)):
        if value is not None and value < 1:
            raise UserError(f"{flag}: expected a positive integer, got {value}")
    ckpt = load_checkpoint(checkpoint)  # verified once, names the file in its errors
    info = checkpoint_info(ckpt)
    checkpoint_kind(info.model_name)
    names = info.class_names
    if classes is not None:
        from nlnet.data.video.builder import read_class_index

        try:
            names, _ = read_class_index(classes)
        except (ValueError, OSError) as exc:
            raise UserError(f"--classes: {exc}") from None
    if len(names) != info.num_classes:
        raise UserError(
            f"--classes: {len(names)} names but the checkpoint's model has {info.num_classes} classes"
        )
    model = load_model(ckpt, device)
    try:
        transform = preprocessing(ckpt, clips=clips, crops=crops)  # the one the Python API uses
    except ValueError as exc:  # clips/crops of an image model: the option's name
        raise UserError(f"--{exc}") from None
    results = predict(
        model, videos, transform=transform, class_names=names, device=device, skip_errors=True
    )
    out: list[dict[str, Any]] = []
    for r in results:
        if r.error is not None:
            out.append({"video": r.video, "error": r.error})
        else:
            out.append({"video": r.video, "clips": r.views, "top": r.top(topk)})
    return out


def main(args: argparse.Namespace) -> int:
    import warnings

    from nlnet.commands.common import device_arg, expand_inputs

    device = device_arg(args.device)
    from nlnet.engine.checkpoint import checkpoint_info, load_checkpoint

    ckpt = load_checkpoint(args.checkpoint)  # verified once, names the file in its errors
    if checkpoint_kind(checkpoint_info(ckpt).model_name) == "segmentation":
        from nlnet.commands.predict_masks import predict_masks

        return predict_masks(args, ckpt, device)
    videos = expand_inputs(args.videos)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = predict_videos(
            videos,
            ckpt,
            topk=args.top_k,
            classes=args.classes,
            clips=args.clips,
            crops=args.crops,
            device=device,
        )
    from nlnet.inference import InputWarning

    for w in caught:  # a short video, an image given to a video model: one line each
        if issubclass(w.category, InputWarning):
            print(f"nlnet predict: warning: {w.message}", file=sys.stderr)
    failed = 0
    for r in results:
        if "error" in r:
            failed += 1
            print(f"{r['video']}: skipped ({r['error']})", file=sys.stderr)
            continue
        if args.json:
            print(json.dumps({"video": r["video"], "top": [[n, round(s, 6)] for n, s in r["top"]]}))
            continue
        print(r["video"])
        width = max(len(n) for n, _ in r["top"])
        for rank, (name, score) in enumerate(r["top"], 1):
            print(f"  {rank}. {name:<{width}}  {score:.4f}")
    return 1 if failed else 0
