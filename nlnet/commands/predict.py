"""Top-k classes of video files with a trained checkpoint (multi-clip testing, Section 4.1).

Each video is cut into ``--clips`` clips spread evenly over its length (the paper: 10); the clip
scores (softmax, or sigmoid for a multi-label model) are averaged and the ``--topk`` classes are
printed with their scores.  Class names come from the checkpoint (or ``--classes FILE``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

EXAMPLES = """examples:
  nlnet predict clip1.mp4 clip2.mp4 --checkpoint runs/mine/checkpoints/final.pt
  nlnet predict my_videos/val/*/*.mp4 --checkpoint final.pt --topk 3 --clips 10 --json
  nlnet predict video.mp4 --checkpoint k400.pt --classes kinetics_classes.txt --device cuda
"""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "videos", nargs="+", metavar="VIDEO", help="video files (image files for image models)"
    )
    parser.add_argument("--checkpoint", "-k", required=True, help="a .pt written by nlnet train")
    parser.add_argument("--topk", type=int, default=5, help="classes to print per video (5)")
    parser.add_argument("--classes", help="class-index file (.txt/.json) overriding the ckpt's")
    parser.add_argument(
        "--clips", type=int, help="clips per video (default: the ckpt's eval.clips)"
    )
    parser.add_argument("--crops", type=int, choices=(1, 3), help="spatial views per clip")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--json", action="store_true", help="print one JSON object per video")


_DENSE = {"instance_segmentation": "detection", "keypoints": "keypoint detection"}


def checkpoint_kind(model_name: str) -> str:
    """``"clip"`` or ``"image"`` for a classifier; a :class:`UserError` (one line) naming the
    checkpoints ``predict`` takes for the dense models (segmentation, detection)."""
    from nlnet.engine.errors import UserError
    from nlnet.models.registry import model_facts

    try:
        facts = model_facts(model_name)
    except ValueError as exc:
        raise UserError(f"--checkpoint: {exc}") from None
    if facts.task not in ("video_classification", "image_classification"):
        raise UserError(
            f"--checkpoint: nlnet predict takes video or image classification checkpoints; "
            f"{model_name!r} is a {_DENSE.get(facts.task, facts.task)} model (use nlnet eval, or "
            "nlnet visualize for its attention)"
        )
    return facts.input_kind


def predict_images(paths: list[str], model: Any, prep: dict[str, Any], names: list[str],
                   topk: int, device: Any) -> list[dict[str, Any]]:  # fmt: skip
    """Top-k classes of image files: resize + center crop + the checkpoint's normalisation."""
    import torch
    from PIL import Image, UnidentifiedImageError
    from torchvision import transforms as T

    size = int(prep.get("size") or 224)
    tf = T.Compose([T.Resize(int(prep.get("resize") or size), antialias=True),
                    T.CenterCrop(size), T.ToTensor(),
                    T.Normalize(prep.get("mean", (0.485, 0.456, 0.406)),
                                prep.get("std", (0.229, 0.224, 0.225)))])  # fmt: skip
    out: list[dict[str, Any]] = []
    for path in paths:
        try:
            x = tf(Image.open(path).convert("RGB"))[None]
        except (OSError, UnidentifiedImageError, ValueError) as exc:
            out.append({"video": path, "error": f"not a readable image ({exc})"})
            continue
        with torch.no_grad():
            scores = torch.softmax(model(x.to(device)).float(), dim=1)[0].cpu()
        values, idx = scores.topk(min(topk, len(names)))
        out.append({"video": path, "clips": 1,
                    "top": [(names[i], float(v)) for v, i in zip(values.tolist(), idx.tolist())]})  # fmt: skip
    return out


def predict_videos(
    videos: list[str],
    checkpoint: str,
    *,
    topk: int = 5,
    classes: str | None = None,
    clips: int | None = None,
    crops: int | None = None,
    device: str = "auto",
) -> list[dict[str, Any]]:
    """Score video files; returns ``[{"video", "top": [(name, score), ...]} | {"video", "error"}]``.

    The model and the test-time preprocessing (clip length, stride, test scale, normalisation) are
    those stored in the checkpoint (:func:`nlnet.engine.checkpoint.load_model`).
    """
    import torch

    from nlnet.data.datasets import VideoClipDataset, collate_skip_bad
    from nlnet.engine.checkpoint import checkpoint_info, load_checkpoint, load_model
    from nlnet.engine.distributed import resolve_device
    from nlnet.engine.errors import UserError
    from nlnet.engine.evaluator import scores_from_logits

    if topk < 1:
        raise UserError(f"--topk: expected a positive integer, got {topk}")
    for flag, value in (("--clips", clips), ("--crops", crops)):
        if value is not None and value < 1:
            raise UserError(f"{flag}: expected a positive integer, got {value}")
    ckpt = load_checkpoint(checkpoint)
    info = checkpoint_info(ckpt)
    kind = checkpoint_kind(info.model_name)
    num_classes = info.num_classes
    names = info.class_names
    if classes is not None:
        from nlnet.data.datasets import read_class_index

        try:
            names, _ = read_class_index(classes)
        except (ValueError, OSError) as exc:
            raise UserError(f"--classes: {exc}") from None
    if len(names) != num_classes:
        raise UserError(
            f"--classes: {len(names)} names but the checkpoint's model has {num_classes} classes"
        )
    dev = resolve_device(device)
    model = load_model(ckpt, dev)
    prep = info.preprocessing
    if kind == "image":
        return predict_images(videos, model, prep, names, topk, dev)
    test = (ckpt.get("config") or {}).get("eval") or {}
    clips = clips or int(test.get("clips", 10))
    crops = crops or int(test.get("crops", 1))
    dataset = VideoClipDataset(
        videos,
        [0] * len(videos),
        names,
        mode="test",
        num_frames=prep["num_frames"],
        stride=prep.get("stride", 1),
        test_scale=prep.get("size", 256),
        test_crop=prep.get("crop"),
        test_clips=clips,
        test_crops=crops,
        mean=prep["mean"],
        std=prep["std"],
        min_frames=1,  # a short video is still scored (its last frame is repeated)
        cache_file=None,
    )
    multi_label = info.multi_label
    sums = torch.zeros(len(videos), num_classes, dtype=torch.float64)
    counts = torch.zeros(len(videos), dtype=torch.long)
    with torch.no_grad():
        for i in range(len(dataset)):
            batch = collate_skip_bad([dataset[i]])
            if batch["clip"] is None:
                continue
            logits = model(batch["clip"].to(dev))  # (1, num_classes)
            sums[batch["index"]] += scores_from_logits(logits, multi_label).double().cpu()
            counts[batch["index"]] += 1
    out: list[dict[str, Any]] = []
    for v, path in enumerate(videos):
        if counts[v] == 0:
            reason = dataset.bad_videos.get(v, "no clip could be decoded")
            out.append({"video": path, "error": reason})
            continue
        scores = sums[v] / counts[v]
        values, idx = scores.topk(min(topk, num_classes))
        out.append(
            {
                "video": path,
                "clips": int(counts[v]),
                "top": [(names[i], float(s)) for s, i in zip(values.tolist(), idx.tolist())],
            }
        )
    return out


def main(args: argparse.Namespace) -> int:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bad videos are reported below
        results = predict_videos(
            args.videos,
            args.checkpoint,
            topk=args.topk,
            classes=args.classes,
            clips=args.clips,
            crops=args.crops,
            device=args.device,
        )
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
