"""One input file as a trained model takes it, and the frames to draw it on.

``nlnet visualize`` and ``nlnet inspect`` read a video or an image for a checkpoint's model: a
video or image classifier through the transform ``nlnet predict`` uses (one clip, one crop:
:class:`~nlnet.inference.VideoTransform`, :class:`~nlnet.inference.ImageTransform`), other models
(segmentation, a network of one's own) with the checkpoint's mean and std
(:class:`~nlnet.data.preprocessing.Preprocessing`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["classifier_input", "model_input", "normalize", "read_input", "volume_input"]


def read_input(path: Path, frames: int | None, size: int | None) -> Any:
    """uint8 (T, H, W, 3) from a video, or (1, H, W, 3) from an image file.

    Raises:
        DataError: the file cannot be read as an image or a video (named, with the reason).
    """
    import numpy as np
    import torch

    from nlnet.data.images.dataset import read_rgb
    from nlnet.data.video_io.backends import VideoDecodeError, open_video
    from nlnet.engine.errors import DataError
    from nlnet.inference import IMAGE_EXTENSIONS

    try:
        if path.suffix.lower() in IMAGE_EXTENSIONS:
            out = np.array(read_rgb(path))[None]  # a writable copy
        else:
            with open_video(path) as reader:
                n = reader.num_frames
                if frames is None or frames >= n:
                    out = reader.read_all().numpy()
                else:
                    idx = np.linspace(0, n - 1, frames).round().astype(int)
                    out = reader.get_frames(idx.tolist()).numpy()
    except (OSError, ValueError, SyntaxError, VideoDecodeError) as exc:  # Pillow's and PyAV's
        kind = "image" if path.suffix.lower() in IMAGE_EXTENSIONS else "video"
        raise DataError(f"{str(path)!r}: not a readable {kind} ({exc})") from None
    if size is not None:
        x = torch.from_numpy(out).permute(0, 3, 1, 2).float()
        x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear")
        out = x.clamp(0, 255).round().byte().permute(0, 2, 3, 1).numpy()
    return out


def normalize(frames: Any, preprocessing: Any) -> Any:
    """float (T, H, W, 3): ``(pixels / 255 - mean) / std`` with the checkpoint's mean/std
    (``preprocessing``: its :class:`~nlnet.data.preprocessing.Preprocessing`)."""
    import numpy as np
    import torch

    from nlnet.engine.errors import CheckpointError

    if preprocessing is None or preprocessing.mean is None:
        raise CheckpointError("checkpoint: no preprocessing (mean/std) stored")
    x = torch.from_numpy(np.array(frames)).float().div(255.0)
    return (x - torch.tensor(preprocessing.mean)) / torch.tensor(preprocessing.std)


def _read(transform: Any, path: Path, kind: str) -> Any:
    """``transform(path)``; a file that cannot be read is one ``DataError`` naming it."""
    from nlnet.data.video_io.backends import VideoDecodeError
    from nlnet.engine.errors import DataError

    try:
        return transform(path)
    except (OSError, ValueError, SyntaxError, VideoDecodeError) as exc:  # Pillow's, PyAV's
        raise DataError(f"{str(path)!r}: not a readable {kind} ({exc})") from None


def classifier_input(
    path: Path, info: Any, frames: int | None, size: int | None, side: int | None
) -> Any:
    """``(inp, frames)`` for a video or image classifier through the transform ``nlnet
    predict`` uses (one clip, one crop), or ``None`` for other models and inputs."""
    import torch

    from nlnet.data.images.dataset import is_animated
    from nlnet.inference import IMAGE_EXTENSIONS, ImageTransform, VideoTransform

    prep = info.preprocessing
    still = path.suffix.lower() in IMAGE_EXTENSIONS
    if prep is None:
        return None
    if still and prep.is_video:  # an animated GIF/WebP is a video (VideoTransform decodes it)
        try:
            still = not is_animated(path)
        except (OSError, ValueError, SyntaxError):  # unreadable: read_input names the file
            return None
    if prep.is_video and prep.size and not still:
        tf = VideoTransform.from_preprocessing(prep, clips=1, crops=1)
        if frames:
            tf = tf.replace(num_frames=frames)
        if side or size:
            tf = tf.replace(size=size or side, crop=size or side)
        inp = _read(tf, path, "video")  # (1, 3, T, H, W)
    elif prep.kind == "image" and prep.crop is not None and still:  # an image classifier's
        tf = ImageTransform.from_preprocessing(prep)
        if size:
            tf = tf.replace(size=size, crop=size)
        inp = _read(tf, path, "image")  # (1, 3, H, W)
    else:
        return None
    mean = torch.tensor(tf.mean).view(-1, *[1] * (inp.dim() - 2))
    std = torch.tensor(tf.std).view(-1, *[1] * (inp.dim() - 2))
    pixels = ((inp[0] * std + mean) * 255).round().clamp(0, 255).byte()
    frames = pixels.permute(1, 2, 3, 0) if inp.dim() == 5 else pixels.permute(1, 2, 0)[None]
    return inp, frames.numpy()


def volume_input(path: Path, model: Any) -> tuple[Any, Any]:
    """A volume file as a 3D segmentation network takes it, ``(1, C, D, H, W)`` z-scored per
    channel over its nonzero voxels and zero-padded as whole-volume testing pads it, and its
    first channel's slices as uint8 ``(D, H, W, 3)`` grey frames.

    Raises:
        DataError: not a volume file (``.npy``, ``.nii``, ``.nii.gz``), unreadable, or of
            other channels than the network takes.
    """
    import torch

    from nlnet.data.segmentation.volumes import VOLUME_EXTENSIONS, read_case, zscore_nonzero
    from nlnet.engine.errors import DataError
    from nlnet.engine.tasks.segmentation.task import pad_to_stride
    from nlnet.models.checks import model_in_channels

    if not str(path).lower().endswith(VOLUME_EXTENSIONS):
        raise DataError(
            f"{str(path)!r}: a volume model takes {', '.join(VOLUME_EXTENSIONS)} files (C, D, H, W)"
        )
    try:
        raw = torch.from_numpy(read_case([path], str(path)))
    except (OSError, ValueError) as exc:
        raise DataError(f"{str(path)!r}: not a readable volume ({exc})") from None
    takes = model_in_channels(model)
    if takes is not None and raw.shape[0] != takes:
        raise DataError(f"{str(path)!r}: {raw.shape[0]} channel(s), the model takes {takes}")
    x = zscore_nonzero(raw)
    first = x[0]
    lo, hi = float(first.min()), float(first.max())
    grey = ((first - lo) / max(hi - lo, 1e-8) * 255).round().byte()
    return pad_to_stride(model, x[None]), grey[..., None].expand(-1, -1, -1, 3).numpy()


def model_input(
    path: Path, model: Any, info: Any, *, frames: int | None = None, size: int | None = None,
    side: int | None = None,
) -> tuple[Any, Any]:  # fmt: skip
    """The model's input ``(1, 3, [T,] H, W)`` and the uint8 ``(T, H, W, 3)`` frames drawn.

    Args:
        path: a video or an image file.
        model, info: the network and its :class:`~nlnet.engine.checkpoint.CheckpointInfo`.
        frames: frames to sample (default: the checkpoint's clip length).
        size: a square side to resize the frames to (default: the checkpoint's test size).
        side: the input side a transformer requires (ViT), if any.
    """
    import torch

    from nlnet.engine.errors import DataError

    if getattr(info.preprocessing, "kind", None) == "volume":
        return volume_input(path, model)
    got = classifier_input(path, info, frames, size, side)
    if got is not None:
        return got
    frames_np = read_input(path, frames or getattr(info.preprocessing, "num_frames", None),
                           size or side)  # fmt: skip
    x = normalize(frames_np, info.preprocessing)  # (T, H, W, 3)
    if any(isinstance(m, torch.nn.Conv3d) for m in model.modules()):
        return x.permute(3, 0, 1, 2)[None], frames_np  # an image is a one-frame clip
    if frames_np.shape[0] != 1:
        raise DataError(
            f"--video: {str(path)!r} is a video of {frames_np.shape[0]} frames but "
            f"{info.model_name!r} is an image model; pass an image file (or --frames 1 for the "
            "middle frame)"
        )
    return x[0].permute(2, 0, 1)[None], frames_np  # (1, 3, H, W)
