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
    parser.add_argument("videos", nargs="+", metavar="VIDEO", help="video files")
    parser.add_argument("--checkpoint", "-k", required=True, help="a .pt written by nlnet train")
    parser.add_argument("--topk", type=int, default=5, help="classes to print per video (5)")
    parser.add_argument("--classes", help="class-index file (.txt/.json) overriding the ckpt's")
    parser.add_argument(
        "--clips", type=int, help="clips per video (default: the ckpt's eval.clips)"
    )
    parser.add_argument("--crops", type=int, choices=(1, 3), help="spatial views per clip")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--json", action="store_true", help="print one JSON object per video")


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
    those stored in the checkpoint's config.
    """
    import torch

    from nlnet.data.datasets import DATASET_DEFAULTS, VideoClipDataset, collate_skip_bad
    from nlnet.engine.checkpoint import load_checkpoint, load_model_weights
    from nlnet.engine.config import config_from_dict, replace
    from nlnet.engine.distributed import resolve_device
    from nlnet.engine.evaluator import scores_from_logits
    from nlnet.engine.trainer import build_model

    if topk < 1:
        raise ValueError(f"--topk: expected a positive integer, got {topk}")
    ckpt = load_checkpoint(checkpoint)
    if not ckpt.get("config"):
        raise ValueError(f"checkpoint {checkpoint!r}: no config stored; was it written by nlnet?")
    cfg = config_from_dict(ckpt["config"])
    cfg = replace(cfg, **{"model.pretrained": None, "model.pretrained_2d": None})
    num_classes = int(ckpt.get("num_classes") or cfg.model.num_classes)
    if classes is not None:
        from nlnet.data.datasets import read_class_index

        names, _ = read_class_index(classes)
    else:
        names = ckpt.get("class_names") or [f"class_{i}" for i in range(num_classes)]
    if len(names) != num_classes:
        raise ValueError(
            f"--classes: {len(names)} names but the checkpoint's model has {num_classes} classes"
        )
    dev = resolve_device(device)
    model = build_model(cfg)
    load_model_weights(model, ckpt, model_name=cfg.model.name)
    model.to(dev).eval()
    d = {**DATASET_DEFAULTS, **cfg.data}
    clips = clips or cfg.eval.clips
    crops = crops or cfg.eval.crops
    dataset = VideoClipDataset(
        videos,
        [0] * len(videos),
        names,
        mode="test",
        num_frames=d["num_frames"],
        stride=d["stride"],
        test_scale=d["test_scale"],
        test_crop=d["test_crop"],
        test_clips=clips,
        test_crops=crops,
        mean=d["mean"],
        std=d["std"],
        backend=d["backend"],
        min_frames=1,  # a short video is still scored (its last frame is repeated)
        cache_file=None,
        decode_threads=d["decode_threads"],
    )
    multi_label = cfg.train.loss == "bce"
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

    try:
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
    except (ValueError, FileNotFoundError) as exc:
        print(f"nlnet predict: {exc}", file=sys.stderr)
        return 2
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
