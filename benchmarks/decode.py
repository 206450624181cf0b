"""Decoding throughput: PyAV against torchcodec, full decode against seek-to-clip.

Writes synthetic Kinetics-like videos (default: 300 frames of 256x340 and of 256x320, H.264, a
keyframe every 60 frames), then measures for every available backend of :mod:`nlnet.data.video_io.backends`:

* ``probe ms``: opening the file and counting its frames (packet headers only);
* ``full fps``: frames per second of a sequential decode of the whole file;
* ``clip/s full``: training clips per second if every clip decoded the whole file;
* ``clip/s seek``: training clips per second when only the clip's frames are decoded (seek to the
  keyframe before the clip, decode forward, stop after its last frame) -- what the datasets do;
* ``seek gain``: ``clip/s seek`` / ``clip/s full``;
* ``vs pyav``: ``clip/s seek`` relative to PyAV.

and then dataset items per second (``nlnet.data.video.builder``: decoding plus the Section 4.1
transforms at the paper's sizes) for training and test clips (``--no-pipeline`` skips this),
and the decoded-clip cache (``data.clip_cache``, :mod:`nlnet.data.video_io.clip_cache`) side by side with the
plain decoders: the same ``--clips`` fixed test clips read twice through a dataset with no
cache, the memory cache and the disk cache (``cold``: the pass that fills it; ``warm``: the
pass that reads it back), plus torchvision's and pytorchvideo's own readers on the same clips
when they import (torchvision >= 0.22 dropped ``torchvision.io.read_video``; the benchmark says
which readers it could not import). ``--no-cache`` skips this.

Clips are the paper's training clips ("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971), Section 4.1: 64 consecutive
frames, every other one dropped), at random positions with a fixed seed; each clip opens the file
anew, as a data-loader worker does.

Two frame widths are measured by default because torchcodec converts YUV to RGB with swscale only
when a row is 32-byte aligned and otherwise falls back to a much slower filtergraph path
(torchcodec pull request #229); Kinetics' usual 340-pixel width is not aligned.

Usage::

    python benchmarks/decode.py                       # defaults
    python benchmarks/decode.py --frames 120 --clips 10 --height 128 --width 170   # quick
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from nlnet.data.video.sampling import train_clip_indices
from nlnet.data.video_io.backends import available_backends, open_video, write_video


def make_video(path: Path, frames: int, height: int, width: int, gop: int, fps: float) -> Path:
    """A moving textured pattern (so that inter-frame coding does real work)."""
    rng = np.random.default_rng(0)
    blocks = (height // 8 + 1, (width + 2 * frames) // 8 + 1, 3)
    base = rng.integers(0, 256, size=blocks, dtype=np.uint8)
    base = np.kron(base, np.ones((8, 8, 1), np.uint8))  # 8x8 blocks
    yy, xx = np.mgrid[0:height, 0:width]
    video = np.empty((frames, height, width, 3), np.uint8)
    for t in range(frames):
        shifted = base[:height, 2 * t : 2 * t + width]
        wave = (40 * np.sin((xx + 3 * t) / 9.0) * np.cos((yy - t) / 7.0)).astype(np.int16)
        video[t] = np.clip(shifted.astype(np.int16) + wave[..., None], 0, 255).astype(np.uint8)
    return write_video(path, video, fps=fps, gop_size=gop)


def timed(fn, repeats: int) -> float:
    """Best wall time of ``repeats`` calls (seconds)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_backend(path: Path, backend: str, args: argparse.Namespace) -> dict[str, float]:
    def probe():
        with open_video(path, backend, args.threads) as r:
            return r.num_frames

    n = probe()

    def full():
        with open_video(path, backend, args.threads) as r:
            return r.read_all()

    g = torch.Generator().manual_seed(0)
    clips = [
        train_clip_indices(n, args.clip_len, args.stride, generator=g) for _ in range(args.clips)
    ]

    def seek_clips():
        for idx in clips:
            with open_video(path, backend, args.threads) as r:
                r.get_frames(idx)

    t_probe = timed(probe, args.repeats)
    t_full = timed(full, args.repeats)
    t_seek = timed(seek_clips, args.repeats)
    return {
        "probe_ms": 1000 * t_probe,
        "full_fps": n / t_full,
        "clips_full": 1.0 / t_full,
        "clips_seek": args.clips / t_seek,
        "frames_seek": args.clips * args.clip_len / t_seek,
    }


def bench_pipeline(path: Path, backend: str, args: argparse.Namespace) -> tuple[float, float]:
    """Items/s of a one-video dataset: training clips (scale jitter [256, 320], 224 crop, flip)
    and test clips (shorter side 256, full frame)."""
    import shutil
    import warnings

    from nlnet.data.video.builder import build_dataset

    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "train" / "c" / path.name
        target.parent.mkdir(parents=True)
        shutil.copy(path, target)
        cfg = {
            "type": "folder",
            "root": tmp,
            "num_frames": args.clip_len,
            "stride": args.stride,
            "backend": backend,
            "seed": 0,
            "cache": False,
            "min_frames": 1,
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            train = build_dataset(cfg, "train")
            test = build_dataset(cfg, "train", mode="test")

        def run_train():
            for epoch in range(args.clips):
                train.set_epoch(epoch)
                train[0]

        def run_test():
            for i in range(min(args.clips, len(test))):
                test[i]

        t_train = timed(run_train, args.repeats)
        t_test = timed(run_test, args.repeats)
    return args.clips / t_train, min(args.clips, len(test)) / t_test


def _third_party_readers() -> dict[str, object]:
    """Clip readers of other libraries that import here: ``name -> fn(path, indices)``."""
    readers: dict[str, object] = {}
    try:
        from torchvision.io import read_video  # removed in torchvision 0.22+

        def tv(path: Path, idx: torch.Tensor) -> torch.Tensor:
            frames = read_video(str(path), pts_unit="sec", output_format="THWC")[0]
            return frames[idx.clamp(max=len(frames) - 1)]

        readers["torchvision"] = tv
    except ImportError:
        print("torchvision.io.read_video: not importable here (removed in torchvision 0.22+)")
    try:
        from pytorchvideo.data.encoded_video import EncodedVideo

        def ptv(path: Path, idx: torch.Tensor) -> torch.Tensor:
            video = EncodedVideo.from_path(str(path), decode_audio=False)
            fps = float(video._container.streams.video[0].average_rate)  # noqa: SLF001
            start, end = int(idx.min()) / fps, (int(idx.max()) + 1) / fps
            return video.get_clip(start, end)["video"]

        readers["pytorchvideo"] = ptv
    except ImportError:
        print("pytorchvideo: not importable here (pip install pytorchvideo)")
    return readers


def bench_cache(path: Path, backend: str, args: argparse.Namespace) -> dict[str, tuple]:
    """Clips/s of ``args.clips`` fixed test clips read twice (cold, warm) per cache kind."""
    import shutil
    import warnings

    from nlnet.data.video.builder import build_dataset

    out: dict[str, tuple] = {}
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "v" / "c" / path.name
        target.parent.mkdir(parents=True)
        shutil.copy(path, target)
        for kind in (None, "memory", "disk"):
            cfg = {"type": "folder", "root": tmp, "num_frames": args.clip_len,
                   "stride": args.stride, "backend": backend, "cache": False, "min_frames": 1,
                   "clip_cache": kind,
                   "clip_cache_dir": str(Path(tmp) / f"clips-{backend}")}  # fmt: skip
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ds = build_dataset(cfg, "v", mode="test", clips=args.clips)
            n = len(ds)
            times = []
            for _ in range(2):
                t0 = time.perf_counter()
                for i in range(n):
                    video, idx = _view_indices(ds, i)
                    ds.decoder(ds.videos[video], idx)  # the decoder part (with its cache) only
                times.append(time.perf_counter() - t0)
            out[kind or "none"] = (n / times[0], n / times[1])
    return out


def _view_indices(ds, i: int) -> tuple[int, torch.Tensor]:
    video, clip, _ = ds.video_index(i)
    return video, ds.sampler(ds.frame_counts[video], clip)


def print_cache_table(videos: list[tuple[str, Path]], args: argparse.Namespace) -> None:
    from nlnet.data.video.sampling import UniformClipSampler

    print()
    print(f"decoded-clip cache (data.clip_cache): {args.clips} fixed test clips, read twice")
    head = f"{'video':<22} {'reader':<24} {'cold clip/s':>12} {'warm clip/s':>12} {'vs none':>8}"
    print(head)
    print("-" * len(head))
    readers = _third_party_readers()
    for label, path in videos:
        for backend in available_backends():
            rows = bench_cache(path, backend, args)
            base = rows["none"][1]
            for kind, (cold, warm) in rows.items():
                print(f"{label:<22} {backend + ' + ' + kind:<24} {cold:>12.2f} {warm:>12.2f} "
                      f"{warm / base:>7.1f}x")  # fmt: skip
        with open_video(path, "pyav", 1) as r:
            n = r.num_frames
        sampler = UniformClipSampler(args.clip_len, args.stride, args.clips)
        clips = [sampler(n, k) for k in range(args.clips)]
        for name, fn in readers.items():
            t = timed(lambda fn=fn, p=path, cl=clips: [fn(p, idx) for idx in cl], 2)
            print(f"{label:<22} {name:<24} {args.clips / t:>12.2f} {'':>12} {'':>8}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--frames", type=int, default=300, help="frames in the test video")
    p.add_argument("--sizes", default="256x340,256x320", help="comma-separated HxW list")
    p.add_argument("--gop", type=int, default=60, help="keyframe interval of the test video")
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--clip-len", type=int, default=32, help="T (Section 4.1: 32)")
    p.add_argument("--stride", type=int, default=2, help="s (Section 4.1: 2)")
    p.add_argument("--clips", type=int, default=10, help="random clips per measurement")
    p.add_argument("--repeats", type=int, default=2, help="best of this many runs")
    p.add_argument("--threads", type=int, default=1, help="FFmpeg threads per decoder")
    p.add_argument(
        "--no-pipeline",
        dest="pipeline",
        action="store_false",
        help="skip the dataset-item measurement (decode + scale/crop/flip/normalise)",
    )
    p.add_argument(
        "--no-cache",
        dest="cache",
        action="store_false",
        help="skip the decoded-clip cache measurement",
    )
    p.add_argument(
        "--video", type=Path, default=None, help="use this file instead of a synthetic one"
    )
    args = p.parse_args(argv)

    print(
        f"clips: {args.clips} random clips of {args.clip_len} frames at stride {args.stride}, "
        f"FFmpeg threads per decoder={args.threads}, best of {args.repeats}"
    )
    header = (
        f"{'video':<22} {'backend':<11} {'probe ms':>9} {'full fps':>9} {'clip/s full':>12} "
        f"{'clip/s seek':>12} {'seek gain':>10} {'vs pyav':>8}"
    )
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as tmp:
        if args.video is not None:
            videos = [(args.video.name[:22], args.video)]
        else:
            videos = []
            for size in args.sizes.split(","):
                h, w = (int(v) for v in size.lower().split("x"))
                path = make_video(Path(tmp) / f"{h}x{w}.mp4", args.frames, h, w, args.gop, args.fps)
                videos.append((f"{args.frames}f {h}x{w} gop{args.gop}", path))
        pipeline_rows: list[tuple[str, Path]] = []
        for label, path in videos:
            results = {b: bench_backend(path, b, args) for b in available_backends()}
            base = results["pyav"]["clips_seek"]
            for name, r in results.items():
                print(
                    f"{label:<22} {name:<11} {r['probe_ms']:>9.1f} {r['full_fps']:>9.0f} "
                    f"{r['clips_full']:>12.2f} {r['clips_seek']:>12.2f} "
                    f"{r['clips_seek'] / r['clips_full']:>9.2f}x {r['clips_seek'] / base:>7.2f}x"
                )
            if args.pipeline:
                pipeline_rows.append((label, path))
        if pipeline_rows:
            print()
            print("dataset items (decode + Section 4.1 transforms, one process, paper sizes):")
            for label, path in pipeline_rows:
                for name in available_backends():
                    train, test = bench_pipeline(path, name, args)
                    print(
                        f"{label:<22} {name:<11} train clip/s {train:6.2f}   "
                        f"test clip/s {test:6.2f}"
                    )
        if args.cache:
            print_cache_table(videos, args)
    if "torchcodec" not in available_backends():
        print("torchcodec: not available here (pip install torchcodec + FFmpeg shared libraries)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
