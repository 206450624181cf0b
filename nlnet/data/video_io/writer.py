"""Writing RGB frames to a video file with PyAV (:func:`write_video`).

Used to make test videos and demo clips; the codecs are lossy, so a test reads the file back to
get the exact frames a decoder sees.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from nlnet.data.video_io.pyav import convert_frame
from nlnet.data.video_io.reader import PathLike


def _default_codec() -> str:
    import av

    return "libx264" if "libx264" in av.codecs_available else "mpeg4"


def write_video(
    path: PathLike,
    frames: torch.Tensor | np.ndarray,
    fps: float = 25.0,
    *,
    codec: str | None = None,
    gop_size: int | None = None,
    bframes: int | None = None,
    crf: int | None = None,
    pix_fmt: str = "yuv420p",
    preset: str | None = None,
) -> Path:
    """Writes RGB frames to a video file with PyAV (H.264 when available, else MPEG-4 Part 2).

    The codecs are lossy: read the file back to get the exact frames a decoder sees.

    Args:
        path: output file, e.g. ``"clip.mp4"``; the parent folder is created.
        frames: ``uint8`` ``(T, H, W, 3)`` tensor or array; ``H`` and ``W`` must be even for
            ``pix_fmt="yuv420p"``.
        fps: frame rate.
        codec: FFmpeg encoder name; default ``"libx264"`` if PyAV's FFmpeg has it, else ``"mpeg4"``.
        gop_size: keyframe interval (frames); None keeps the encoder default.
        bframes: maximum consecutive B-frames; None keeps the encoder default.
        crf: libx264 constant rate factor (0-51, lower is better); None keeps the default.
            ``crf=0`` with ``pix_fmt="yuv444p"`` is near-lossless (only the RGB/YUV rounding).
        pix_fmt: encoder pixel format, ``"yuv420p"`` (default, plays everywhere) or e.g.
            ``"yuv444p"`` (libx264).
        preset: libx264 speed preset (e.g. ``"ultrafast"``); None keeps the default.

    Returns:
        The path written.

    Raises:
        ValueError: ``frames`` has the wrong shape, dtype or odd sizes, or ``fps`` is not positive.
    """
    import av

    if isinstance(frames, torch.Tensor):
        frames = frames.detach().cpu().numpy()
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must have shape (T, H, W, 3), got {tuple(frames.shape)}")
    if frames.dtype != np.uint8:
        raise ValueError(f"frames must be uint8, got {frames.dtype}")
    t, h, w, _ = frames.shape
    if t < 1:
        raise ValueError("frames must hold at least one frame")
    if pix_fmt == "yuv420p" and (h % 2 or w % 2):
        raise ValueError(f"frames need even H and W for pix_fmt='yuv420p', got H={h} W={w}")
    if fps <= 0:
        raise ValueError(f"fps must be positive, got {fps}")
    codec = codec or _default_codec()
    if codec not in av.codecs_available:
        raise ValueError(f"codec {codec!r} is not available in PyAV's FFmpeg")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from fractions import Fraction

    rate = Fraction(fps).limit_denominator(1001)
    options: dict[str, str] = {}
    if crf is not None and codec == "libx264":
        options["crf"] = str(int(crf))
    if preset is not None and codec == "libx264":
        options["preset"] = str(preset)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(codec, rate=rate, options=options)
        stream.width, stream.height, stream.pix_fmt = w, h, pix_fmt
        if gop_size is not None:
            stream.codec_context.gop_size = int(gop_size)
        if bframes is not None:
            stream.codec_context.max_b_frames = int(bframes)
        for array in frames:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(array), format="rgb24")
            frame = convert_frame(frame, pix_fmt)  # the encoder's conversion, a kept context
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
