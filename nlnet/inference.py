"""Inference from a checkpoint in three calls: the model, its preprocessing, predictions.

```python
import nlnet

model = nlnet.load_model("runs/mine/checkpoints/final.pt")      # eval mode, weights loaded
transform = nlnet.preprocessing("runs/mine/checkpoints/final.pt")
clips = transform("video.mp4")           # (clips x crops, 3, T, H, W), the test views
result = nlnet.predict(model, ["video.mp4"])[0]
result.top(5)                            # [("class name", score), ...]
```

An image classifier's checkpoint works the same way: :func:`preprocessing` returns an
:class:`ImageTransform` (resize, centre crop, normalisation) and :func:`predict` takes image files.

Everything a checkpoint written by ``nlnet train`` (or ``nlnet demo``) needs at test time is
stored in it: the registry name and build options of the network, the class names, and the
test-time preprocessing (clip length, frame stride, shorter side, crop, mean/std) together with
the multi-clip protocol of its config (``eval.clips`` x ``eval.crops``); both transforms are read
from the one :class:`~nlnet.data.preprocessing.Preprocessing` of the checkpoint.  A video is scored as in
"Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971) Section 4.1, *Inference*:
``clips`` clips spread evenly over the video, the shorter side resized (256 in the paper), the
network run fully-convolutionally (or on ``crops`` crops), and the softmax scores (per-category
sigmoid for a multi-label model, Section 5.2) averaged over the views.  ``nlnet predict`` is
this module on the command line.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from nlnet.data.images.dataset import animated_frames
from nlnet.data.images.transforms import image_test_transform
from nlnet.data.preprocessing import Preprocessing
from nlnet.data.video.sampling import make_sampler
from nlnet.data.video.transforms import TestTransform
from nlnet.data.video_io.backends import VideoDecodeError, open_video
from nlnet.engine.checkpoint import (
    CheckpointInfo,
    build_model_from_checkpoint,
    checkpoint_info,
    load_checkpoint,
    load_model_weights,
)
from nlnet.engine.distributed import resolve_device
from nlnet.engine.errors import CheckpointError, DataError
from nlnet.engine.tasks.video.evaluation import scores_from_logits
from nlnet.functional.stats import IMAGENET_MEAN, IMAGENET_STD

__all__ = [
    "ImageTransform",
    "InputWarning",
    "VideoTransform",
    "Prediction",
    "load_model",
    "preprocessing",
    "predict",
]

PathLike = str | os.PathLike
Checkpoint = PathLike | Mapping[str, Any]
Video = PathLike | torch.Tensor | np.ndarray

#: File extensions read as still images (by Pillow), not as videos.
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


class InputWarning(UserWarning):
    """An input the model can score but not as it was trained: a video shorter than one clip,
    or a still image given to a video model (the warning names the file)."""


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
        sampling: ``"window"`` (frames ``stride`` apart) or ``"segments"`` (one frame per
            segment of the whole video; ``data.sampling``).
    """

    num_frames: int
    stride: int = 1
    size: int = 256
    crop: int | tuple[int, ...] | None = None
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    clips: int = 10
    crops: int = 1
    sampling: str = "window"

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
    def from_preprocessing(
        cls, prep: Preprocessing, *, clips: int | None = None, crops: int | None = None
    ) -> VideoTransform:
        """The transform of a video model's :class:`~nlnet.data.preprocessing.Preprocessing`."""
        if not prep.is_video:
            raise ValueError("preprocessing: no num_frames (not a video model's)")
        return cls(num_frames=prep.num_frames, stride=prep.stride or 1, size=prep.size or 256,
                   crop=prep.crop, mean=prep.mean, std=prep.std, clips=clips or 10,
                   crops=crops or 1, sampling=prep.sampling)  # fmt: skip

    @classmethod
    def from_checkpoint(
        cls, checkpoint: Checkpoint, *, clips: int | None = None, crops: int | None = None
    ) -> VideoTransform:
        """The preprocessing stored in a checkpoint (``clips``/``crops``: its ``eval`` config).

        Raises:
            CheckpointError: the checkpoint stores no video preprocessing (an image model's,
                or a bare state dict).
        """
        ckpt = load_checkpoint(checkpoint)
        prep = checkpoint_info(ckpt).preprocessing
        if prep is None or not prep.is_video:
            where = "checkpoint" if isinstance(checkpoint, Mapping) else f"{str(checkpoint)!r}"
            raise CheckpointError(
                f"{where}: stores no video preprocessing (no num_frames); use "
                "nlnet.preprocessing(checkpoint) (an image model's gives an ImageTransform) or "
                "build nlnet.inference.VideoTransform(num_frames=..., size=..., mean=..., std=...)"
            )
        test = (ckpt.get("config") or {}).get("eval") or {}
        return cls.from_preprocessing(
            prep,
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
                ``(frames, H, W, 3)`` tensor or numpy array (e.g. from
                :func:`nlnet.data.video_io.backends.read_frames`).  A still image file is a
                one-frame video (with an :class:`InputWarning`), as is a video shorter than one
                clip (its frames are repeated); an animated GIF, WebP or PNG is the video of
                its frames.

        Returns:
            ``(clips * crops, 3, num_frames, H', W')`` float32, normalised.

        Raises:
            VideoDecodeError: the file is missing, corrupt or has no video stream.
            ValueError: an array that is not ``uint8`` ``(frames, H, W, C)``.
        """
        transform = TestTransform(self.size, self.crop, self.crops, self.mean, self.std)
        return torch.stack(
            [transform(frames, c) for frames in self.clips_of(video) for c in range(self.crops)]
        )

    def clips_of(self, video: Video) -> list[torch.Tensor]:
        """The ``clips`` sampled clips of a video, ``uint8`` ``(num_frames, H, W, C)`` each
        (before resizing and cropping): what :meth:`__call__` turns into views."""
        if isinstance(video, np.ndarray):
            video = torch.from_numpy(np.ascontiguousarray(video))
        if isinstance(video, torch.Tensor):
            if video.ndim != 4 or video.dtype != torch.uint8 or video.shape[0] < 1:
                raise ValueError(
                    "video: expected a file path or uint8 frames of shape (frames, H, W, C), "
                    f"got a {video.dtype} array of shape {tuple(video.shape)}"
                )
            if video.shape[-1] != len(self.mean):
                first = " (channels first? permute it to (frames, H, W, C))" if (
                    video.shape[1] == len(self.mean)) else ""  # fmt: skip
                raise ValueError(
                    f"video: expected frames (frames, H, W, {len(self.mean)}), got shape "
                    f"{tuple(video.shape)}{first}"
                )
            self._warn_short(video.shape[0], "video frames")
            return [video[idx] for idx in self._indices(video.shape[0])]
        if not isinstance(video, (str, os.PathLike)):
            raise TypeError(
                f"video: expected a file path or a uint8 array, got {type(video).__name__}"
            )
        if Path(video).suffix.lower() in IMAGE_EXTENSIONS:
            moving = animated_frames(video)  # an animated GIF/WebP: a video
            if moving is not None:
                return self.clips_of(moving)
            warnings.warn(
                f"{str(video)!r}: a still image given to a video model ({self.num_frames}-frame "
                "clips); it is scored as a clip of that one frame repeated",
                InputWarning,
                stacklevel=3,
            )
            frames = torch.from_numpy(_read_image(video))[None]
            return [frames[idx] for idx in self._indices(1)]
        with open_video(video) as reader:
            self._warn_short(reader.num_frames, repr(str(video)))
            return [reader.get_frames(idx) for idx in self._indices(reader.num_frames)]

    def _warn_short(self, num_frames: int, what: str) -> None:
        if self.sampling == "segments":  # one frame per segment: any length spans the video
            return
        span = (self.num_frames - 1) * self.stride + 1
        if 0 < num_frames < span:
            warnings.warn(
                f"{what}: {num_frames} frame(s), shorter than one clip ({self.num_frames} frames "
                f"at stride {self.stride} span {span}); frames are repeated to fill the clip",
                InputWarning,
                stacklevel=4,
            )

    def _indices(self, num_frames: int) -> list[torch.Tensor]:
        if num_frames < 1:
            raise ValueError("video: it has no frame")
        sampler = make_sampler(self.sampling, self.num_frames, self.stride, False, self.clips)
        return [sampler(num_frames, k) for k in range(self.clips)]


def _read_image(path: PathLike) -> np.ndarray:
    """An image file as ``uint8`` ``(H, W, 3)`` RGB (Pillow)."""
    from nlnet.data.images.dataset import read_rgb

    return np.array(read_rgb(path))


@dataclass(frozen=True)
class ImageTransform:
    """The test-time input pipeline of an image classifier: an image -> one normalised view.

    The ImageNet recipe: the shorter side resized to ``size``, the centre ``crop x crop`` kept
    and normalised, returned as a ``(1, C, crop, crop)`` float tensor (one view, so that
    :func:`predict` treats images and videos alike).

    Attributes:
        size: shorter side after resizing (``crop * 8 / 7`` by default in training configs).
        crop: side of the square centre crop given to the model.
        mean: per-channel mean on the ``[0, 1]`` pixel scale.
        std: per-channel standard deviation on the ``[0, 1]`` pixel scale.
    """

    size: int
    crop: int
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD

    @classmethod
    def from_preprocessing(cls, prep: Preprocessing) -> ImageTransform:
        """The transform of an image model's :class:`~nlnet.data.preprocessing.Preprocessing`."""
        crop = (prep.crop_hw() or (224, 224))[0]
        return cls(size=prep.size or crop, crop=crop, mean=prep.mean, std=prep.std)

    views = 1  # one view per image

    def replace(self, **changes: Any) -> ImageTransform:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def __call__(self, image: PathLike | np.ndarray | torch.Tensor | Any) -> torch.Tensor:
        """Turn one image (a file, a PIL image or ``uint8`` ``(H, W, 3)`` pixels) into
        ``(1, 3, crop, crop)`` float32, normalised.

        Raises:
            OSError: the file is missing or not an image Pillow reads.
        """
        from PIL import Image

        if isinstance(image, (str, os.PathLike)):
            image = _read_image(image)
        if not isinstance(image, Image.Image):
            pixels = np.asarray(image)
            if pixels.ndim != 3 or pixels.dtype != np.uint8:
                raise ValueError(
                    "image: expected a file path, a PIL image or uint8 pixels of shape (H, W, C), "
                    f"got a {pixels.dtype} array of shape {tuple(pixels.shape)}"
                )
            image = Image.fromarray(pixels)
        tf = image_test_transform(self.size, self.crop, self.mean, self.std)
        return tf(image.convert("RGB"))[None]


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


def load_model(
    checkpoint: Checkpoint, device: str | torch.device = "cpu", *, model: nn.Module | None = None
) -> nn.Module:
    """Build the network a checkpoint was trained as, load its weights, eval mode.

    The one public way from a checkpoint to a model (the engine's
    :func:`~nlnet.engine.checkpoint.build_model_from_checkpoint` plus what prediction needs).
    The model carries what :func:`predict` needs as ``model.nlnet_info`` (a
    :class:`~nlnet.engine.checkpoint.CheckpointInfo`: class names, preprocessing, multi-label)
    and ``model.nlnet_transform`` (a :class:`VideoTransform` or :class:`ImageTransform`, or
    ``None`` for a checkpoint that is not a classifier's).

    Args:
        checkpoint: a ``.pt`` file written by ``nlnet train``/``demo`` or a loaded checkpoint.
        device: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``.
        model: the network to load the weights into (strictly), instead of rebuilding the
            registered one: needed for a checkpoint of a network of your own
            (``train(cfg, model=...)``).

    Raises:
        CheckpointError: the file is missing, corrupted or does not rebuild a registered model
            (or holds a network of your own and no ``model`` was given).
    """
    ckpt = load_checkpoint(checkpoint)
    if model is None:
        model = build_model_from_checkpoint(ckpt, resolve_device(device))
    else:
        load_model_weights(model, ckpt)
        model = model.to(resolve_device(device)).eval()
    model.nlnet_info = checkpoint_info(ckpt)
    try:
        model.nlnet_transform = preprocessing(ckpt)
    except (CheckpointError, ValueError):
        model.nlnet_transform = None
    return model


def save_pretrained(checkpoint: Checkpoint, directory: PathLike) -> Path:
    """Write a checkpoint's network as ``directory/config.json`` + ``model.safetensors`` (the
    layout of timm's and Hugging Face's ``save_pretrained``): the weights without pickle, the
    name, classes and preprocessing as JSON. :func:`load_model` reads the folder back.

    Raises:
        CheckpointError: an unreadable checkpoint, or one of a network of your own class.
    """
    from nlnet.engine.checkpoint import check_rebuildable
    from nlnet.engine.checkpoint.pretrained import save_pretrained as write

    ckpt = load_checkpoint(checkpoint)
    check_rebuildable(ckpt, checkpoint)
    return write(ckpt, directory)


def preprocessing(
    checkpoint: Checkpoint, *, clips: int | None = None, crops: int | None = None
) -> VideoTransform | ImageTransform:
    """The test-time preprocessing stored in a checkpoint.

    A video classifier's is a :class:`VideoTransform`, an image classifier's an
    :class:`ImageTransform`; both are read from the checkpoint's one
    :class:`~nlnet.data.preprocessing.Preprocessing`.

    Args:
        checkpoint: a ``.pt`` file written by ``nlnet train``/``demo`` or a loaded checkpoint.
        clips: clips per video (default: the checkpoint's ``eval.clips``, else 10).
        crops: spatial views per clip, 1 or 3 (default: the checkpoint's ``eval.crops``).

    Raises:
        CheckpointError: the checkpoint is not a video or image classifier's (e.g. a
            segmentation model's, or a bare state dict).
        ValueError: ``clips`` or ``crops`` given for an image classifier.
    """
    ckpt = load_checkpoint(checkpoint)
    info = checkpoint_info(ckpt)
    prep = info.preprocessing
    if prep is not None and prep.is_video:
        return VideoTransform.from_checkpoint(ckpt, clips=clips, crops=crops)
    # a network of one's own is not registered: its run's config names the task
    task = _task(info.model_name) or (ckpt.get("config") or {}).get("task")
    if prep is not None and task == "image_classification":
        if (clips, crops) != (None, None):
            name = "clips" if clips is not None else "crops"
            raise ValueError(f"{name}: views of a video clip; the checkpoint's model "
                             f"{info.model_name!r} classifies images (one resized, cropped view)")  # fmt: skip
        return ImageTransform.from_preprocessing(prep)
    where = "checkpoint" if isinstance(checkpoint, Mapping) else f"{str(checkpoint)!r}"
    what = "is not a video or image classifier's" if prep is not None else "stores none"
    raise CheckpointError(
        f"{where}: its preprocessing {what} ({info.model_name}; a checkpoint that stores no "
        "preprocessing cannot be fed); build nlnet.inference.VideoTransform(...) or "
        "ImageTransform(...)"
    )


def _task(model_name: str) -> str | None:
    from nlnet.models.registry import model_facts

    try:
        return model_facts(model_name).task
    except ValueError:  # not registered
        return None


def _resolve(
    model: nn.Module | Checkpoint,
    transform: VideoTransform | ImageTransform | None,
    class_names: Sequence[str] | None,
    device: str | torch.device,
) -> tuple[nn.Module, VideoTransform | ImageTransform, list[str], bool, torch.device]:
    dev = resolve_device(device)
    if not isinstance(model, nn.Module):
        model = load_model(model, dev)
    info: CheckpointInfo | None = getattr(model, "nlnet_info", None)
    transform = transform or getattr(model, "nlnet_transform", None)
    if transform is None:
        raise ValueError(
            "transform: the model carries no preprocessing; pass transform=nlnet.preprocessing(ckpt)"
            " or a nlnet.inference.VideoTransform(...) / ImageTransform(...)"
        )
    names = list(class_names) if class_names is not None else (info.class_names if info else [])
    return model.to(dev).eval(), transform, names, bool(info and info.multi_label), dev


#: Failures of a video file (missing, corrupt, no frames, decoder errors): skipped on request.
_DECODE_ERRORS = (VideoDecodeError, ValueError, RuntimeError, OSError)


def predict(
    model: nn.Module | Checkpoint,
    videos: Video | Sequence[Video],
    *,
    transform: VideoTransform | ImageTransform | None = None,
    class_names: Sequence[str] | None = None,
    multi_label: bool | None = None,
    batch_size: int = 1,
    device: str | torch.device = "cpu",
    skip_errors: bool = False,
) -> list[Prediction]:
    """Score videos with multi-clip testing (Section 4.1): one :class:`Prediction` per video.

    An image classifier's checkpoint scores images the same way (one view each).

    Args:
        model: a checkpoint path (or loaded checkpoint), or a model from :func:`load_model`; any
            other ``nn.Module`` taking ``(B, 3, T, H, W)`` clips works with ``transform=``.
        videos: one or several video files or ``uint8`` ``(frames, H, W, 3)`` tensors or numpy
            arrays; for an image classifier, image files or ``uint8`` ``(H, W, 3)`` arrays.
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
    single = (str, os.PathLike, torch.Tensor, np.ndarray)
    items = [videos] if isinstance(videos, single) else list(videos)
    given = class_names is not None
    with torch.no_grad():
        return [
            _predict_one(net, transform, names, multi, dev, v, batch_size, given, skip_errors)
            for v in items
        ]


def _predict_one(
    net: nn.Module,
    transform: VideoTransform | ImageTransform,
    names: list[str],
    multi: bool,
    dev: torch.device,
    video: Video,
    batch_size: int,
    names_given: bool,
    skip_errors: bool,
) -> Prediction:
    path = str(video) if isinstance(video, (str, os.PathLike)) else None
    try:
        views = transform(video)
    except _DECODE_ERRORS as exc:
        if path is None:
            raise
        reason = getattr(exc, "reason", None) or f"{type(exc).__name__}: {exc}"
        if not skip_errors:
            what = "image" if isinstance(transform, ImageTransform) else "video"
            raise DataError(f"{what} {path!r}: {reason}") from exc
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
