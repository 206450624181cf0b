"""Inference from a checkpoint in three calls: the model, its preprocessing, predictions.

::

    import nlnet

    model = nlnet.load_model("runs/mine/checkpoints/final.pt")      # eval mode, weights loaded
    transform = nlnet.preprocessing("runs/mine/checkpoints/final.pt")
    clips = transform("video.mp4")           # (clips x crops, 3, T, H, W), the test views
    result = nlnet.predict(model, ["video.mp4"])[0]
    result.top(5)                            # [("class name", score), ...]

Everything a checkpoint written by ``nlnet train`` (or ``nlnet demo``) needs at test time is
stored in it: the registry name and build options of the network, the class names, and the
test-time preprocessing (clip length, frame stride, shorter side, crop, mean/std) together with
the multi-clip protocol of its config (``eval.clips`` x ``eval.crops``).  A video is scored as in
"Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971) Section 4.1, *Inference*:
``clips`` clips spread evenly over the video, the shorter side resized (256 in the paper), the
network run fully-convolutionally (or on ``crops`` crops), and the softmax scores (per-category
sigmoid for a multi-label model, Section 5.2) averaged over the views.

``nlnet predict`` is this module on the command line.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from nlnet.data.video.sampling import UniformClipSampler
from nlnet.data.video.transforms import IMAGENET_MEAN, IMAGENET_STD, TestTransform
from nlnet.data.video_io.backends import VideoDecodeError, open_video
from nlnet.engine.checkpoint import CheckpointInfo, checkpoint_info, load_checkpoint
from nlnet.engine.checkpoint import load_model as _load_checkpoint_model
from nlnet.engine.distributed import resolve_device
from nlnet.engine.errors import CheckpointError, DataError
from nlnet.engine.tasks.video_eval import scores_from_logits

__all__ = ["VideoTransform", "Prediction", "load_model", "preprocessing", "predict"]

PathLike = str | os.PathLike
Checkpoint = PathLike | Mapping[str, Any]
Video = PathLike | torch.Tensor


@dataclass(frozen=True)
class VideoTransform:
    """The test-time input pipeline of a model: a video file or frames -> its test views.

    Calling it on a video returns the ``clips * crops`` views the model is scored on, as one
    ``(views, C, T, H, W)`` float tensor (view ``k * crops + c`` is crop ``c`` of clip ``k``).

    Attributes:
        num_frames: frames per clip (``T``; 32 in the paper).
        stride: temporal stride between sampled frames (2 in the paper: 32 of 64 frames).
        size: shorter side after resizing (256 in the paper; 320 for Charades).
        crop: square crop size, or ``None`` to run on the whole resized frame
            (fully-convolutional testing, Section 4.1).
        mean: per-channel mean on the ``[0, 1]`` pixel scale.
        std: per-channel standard deviation on the ``[0, 1]`` pixel scale.
        clips: clips spread evenly over the video (10 in the paper).
        crops: spatial views per clip (1, or 3 crops along the longer side).
    """

    num_frames: int
    stride: int = 1
    size: int = 256
    crop: int | None = None
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    clips: int = 10
    crops: int = 1

    def __post_init__(self) -> None:
        for name in ("num_frames", "stride", "size", "clips"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        if self.crops not in (1, 3):
            raise ValueError(f"crops: expected 1 or 3, got {self.crops!r}")
        if len(self.mean) != len(self.std):
            raise ValueError(f"mean/std: expected equal lengths, got {self.mean} and {self.std}")
        object.__setattr__(self, "mean", tuple(float(v) for v in self.mean))
        object.__setattr__(self, "std", tuple(float(v) for v in self.std))

    @property
    def views(self) -> int:
        """Views per video: ``clips * crops``."""
        return self.clips * self.crops

    @classmethod
    def from_checkpoint(
        cls, checkpoint: Checkpoint, *, clips: int | None = None, crops: int | None = None
    ) -> VideoTransform:
        """The preprocessing stored in a checkpoint (``clips``/``crops``: its ``eval`` config).

        Raises:
            CheckpointError: the checkpoint stores no preprocessing (a bare state dict).
        """
        ckpt = load_checkpoint(checkpoint)
        prep = checkpoint_info(ckpt).preprocessing
        if not prep.get("num_frames"):
            where = "checkpoint" if isinstance(checkpoint, Mapping) else f"{str(checkpoint)!r}"
            what = "an image model's" if prep else "no"
            raise CheckpointError(
                f"{where}: stores {what} preprocessing, not a video classifier's (no num_frames);"
                " nlnet.predict scores video classifiers: build a transform with "
                "nlnet.inference.VideoTransform(num_frames=..., size=..., mean=..., std=...)"
            )
        test = (ckpt.get("config") or {}).get("eval") or {}
        return cls(
            num_frames=int(prep["num_frames"]),
            stride=int(prep.get("stride", 1)),
            size=int(prep.get("size", 256)),
            crop=None if prep.get("crop") is None else int(prep["crop"]),
            mean=tuple(prep.get("mean", IMAGENET_MEAN)),
            std=tuple(prep.get("std", IMAGENET_STD)),
            clips=int(clips or test.get("clips", 10)),
            crops=int(crops or test.get("crops", 1)),
        )

    def replace(self, **changes: Any) -> VideoTransform:
        """A copy with some fields changed, e.g. ``transform.replace(clips=1)``."""
        return dataclasses.replace(self, **changes)

    def __call__(self, video: Video) -> torch.Tensor:
        """Turn one video into its test views.

        Args:
            video: a video file (decoded with PyAV), or its frames as decoded: a ``uint8``
                ``(frames, H, W, 3)`` tensor (e.g. from :func:`nlnet.data.video_io.backends.read_frames`).

        Returns:
            ``(clips * crops, 3, num_frames, H', W')`` float32, normalised.

        Raises:
            VideoDecodeError: the file is missing, corrupt or has no video stream.
            ValueError: a tensor that is not ``uint8`` ``(frames, H, W, C)``.
        """
        transform = TestTransform(self.size, self.crop, self.crops, self.mean, self.std)
        if isinstance(video, torch.Tensor):
            if video.ndim != 4 or video.dtype != torch.uint8 or video.shape[0] < 1:
                raise ValueError(
                    "video: expected a file path or uint8 frames of shape (frames, H, W, C), "
                    f"got a {video.dtype} tensor of shape {tuple(video.shape)}"
                )
            clips = [video[idx] for idx in self._indices(video.shape[0])]
        elif isinstance(video, (str, os.PathLike)):
            with open_video(video) as reader:
                clips = [reader.get_frames(idx) for idx in self._indices(reader.num_frames)]
        else:
            raise TypeError(
                f"video: expected a file path or a uint8 tensor, got {type(video).__name__}"
            )
        views = [transform(frames, c) for frames in clips for c in range(self.crops)]
        return torch.stack(views)

    def _indices(self, num_frames: int) -> list[torch.Tensor]:
        if num_frames < 1:
            raise ValueError("video: it has no frame")
        sampler = UniformClipSampler(self.num_frames, self.stride, self.clips)
        return [sampler(num_frames, k) for k in range(self.clips)]


@dataclass(frozen=True)
class Prediction:
    """The scores of one video.

    Attributes:
        video: the file path (``None`` for a tensor input).
        scores: ``(num_classes,)`` float64 scores averaged over the views (softmax, or
            per-category sigmoid for a multi-label model); ``None`` when ``error`` is set.
        class_names: the name of each score.
        views: number of views that were scored.
        error: why the video could not be scored (only with ``skip_errors=True``).
    """

    video: str | None
    scores: torch.Tensor | None
    class_names: list[str] = field(default_factory=list)
    views: int = 0
    error: str | None = None

    def top(self, k: int = 5) -> list[tuple[str, float]]:
        """The ``k`` best classes as ``(name, score)``, best first."""
        if self.scores is None:
            raise ValueError(f"video {self.video!r} has no scores: {self.error}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k: expected a positive integer, got {k!r}")
        values, idx = self.scores.topk(min(k, self.scores.numel()))
        return [(self.class_names[i], float(v)) for v, i in zip(values.tolist(), idx.tolist())]

    @property
    def label(self) -> str:
        """The best class's name."""
        return self.top(1)[0][0]


def load_model(checkpoint: Checkpoint, device: str | torch.device = "cpu") -> nn.Module:
    """Build the network a checkpoint was trained as, load its weights, eval mode.

    The model carries what :func:`predict` needs as ``model.nlnet_info`` (a
    :class:`~nlnet.engine.checkpoint.CheckpointInfo`: class names, preprocessing, multi-label)
    and ``model.nlnet_transform`` (a :class:`VideoTransform`, or ``None``).

    Args:
        checkpoint: a ``.pt`` file written by ``nlnet train``/``demo`` or a loaded checkpoint.
        device: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``.

    Raises:
        CheckpointError: the file is missing, corrupted or does not rebuild a registered model.
    """
    ckpt = load_checkpoint(checkpoint)
    model = _load_checkpoint_model(ckpt, resolve_device(device))
    model.nlnet_info = checkpoint_info(ckpt)
    try:
        model.nlnet_transform = VideoTransform.from_checkpoint(ckpt)
    except (CheckpointError, ValueError):
        model.nlnet_transform = None
    return model


def preprocessing(
    checkpoint: Checkpoint, *, clips: int | None = None, crops: int | None = None
) -> VideoTransform:
    """The test-time preprocessing stored in a checkpoint (see :class:`VideoTransform`).

    Args:
        checkpoint: a ``.pt`` file written by ``nlnet train``/``demo`` or a loaded checkpoint.
        clips: clips per video (default: the checkpoint's ``eval.clips``, else 10).
        crops: spatial views per clip, 1 or 3 (default: the checkpoint's ``eval.crops``).
    """
    return VideoTransform.from_checkpoint(checkpoint, clips=clips, crops=crops)


def _resolve(
    model: nn.Module | Checkpoint,
    transform: VideoTransform | None,
    class_names: Sequence[str] | None,
    device: str | torch.device,
) -> tuple[nn.Module, VideoTransform, list[str], bool, torch.device]:
    dev = resolve_device(device)
    if not isinstance(model, nn.Module):
        model = load_model(model, dev)
    info: CheckpointInfo | None = getattr(model, "nlnet_info", None)
    transform = transform or getattr(model, "nlnet_transform", None)
    if transform is None:
        raise ValueError(
            "transform: the model carries no preprocessing; pass transform=nlnet.preprocessing(ckpt)"
            " or a nlnet.inference.VideoTransform(...)"
        )
    names = list(class_names) if class_names is not None else (info.class_names if info else [])
    return model.to(dev).eval(), transform, names, bool(info and info.multi_label), dev


#: Failures of a video file (missing, corrupt, no frames, decoder errors): skipped on request.
_DECODE_ERRORS = (VideoDecodeError, ValueError, RuntimeError, OSError)


def predict(
    model: nn.Module | Checkpoint,
    videos: Video | Sequence[Video],
    *,
    transform: VideoTransform | None = None,
    class_names: Sequence[str] | None = None,
    multi_label: bool | None = None,
    batch_size: int = 1,
    device: str | torch.device = "cpu",
    skip_errors: bool = False,
) -> list[Prediction]:
    """Score videos with multi-clip testing (Section 4.1): one :class:`Prediction` per video.

    Args:
        model: a checkpoint path (or loaded checkpoint), or a model from :func:`load_model`; any
            other ``nn.Module`` taking ``(B, 3, T, H, W)`` clips works with ``transform=``.
        videos: one or several video files or ``uint8`` ``(frames, H, W, 3)`` tensors.
        transform: the preprocessing (default: the checkpoint's).
        class_names: names of the outputs (default: the checkpoint's; ``class_<i>`` otherwise).
        multi_label: sigmoid instead of softmax scores (default: the checkpoint's loss).
        batch_size: views per forward pass.
        device: where the model runs (``cpu``, ``cuda``, ``cuda:N``, ``auto``).
        skip_errors: return a :class:`Prediction` with ``error`` set for a video that cannot be
            decoded instead of raising.

    Raises:
        DataError: a video cannot be decoded (without ``skip_errors``).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected a positive integer, got {batch_size!r}")
    net, transform, names, stored_multi, dev = _resolve(model, transform, class_names, device)
    multi = stored_multi if multi_label is None else bool(multi_label)
    items = [videos] if isinstance(videos, (str, os.PathLike, torch.Tensor)) else list(videos)
    given = class_names is not None
    with torch.no_grad():
        return [
            _predict_one(net, transform, names, multi, dev, v, batch_size, given, skip_errors)
            for v in items
        ]


def _predict_one(
    net: nn.Module,
    transform: VideoTransform,
    names: list[str],
    multi: bool,
    dev: torch.device,
    video: Video,
    batch_size: int,
    names_given: bool,
    skip_errors: bool,
) -> Prediction:
    path = None if isinstance(video, torch.Tensor) else str(video)
    try:
        views = transform(video)
    except _DECODE_ERRORS as exc:
        if path is None:
            raise
        reason = getattr(exc, "reason", None) or f"{type(exc).__name__}: {exc}"
        if not skip_errors:
            raise DataError(f"video {path!r}: {reason}") from exc
        return Prediction(path, None, names, 0, reason)
    total = torch.zeros((), dtype=torch.float64)
    for start in range(0, views.shape[0], batch_size):
        logits = net(views[start : start + batch_size].to(dev))
        total = total + scores_from_logits(logits, multi).double().sum(0).cpu()
    scores = total / views.shape[0]
    if len(names) != scores.numel():
        if names_given:
            raise ValueError(
                f"class_names: {len(names)} names but the model has {scores.numel()} outputs"
            )
        names = [f"class_{i}" for i in range(scores.numel())]
    return Prediction(path, scores, names, int(views.shape[0]))
