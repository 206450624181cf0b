"""Image classification as a training task (``task: image_classification``): fine-tune ViT, Swin or a 2D
ResNet with a non-local block from ImageNet weights on a class-per-folder image set.

The data follow torchvision's ``ImageFolder`` conventions (``root/<split>/<class>/<image>``,
classes sorted by folder name); ``data.builtin: digits`` uses scikit-learn's 8x8 digit images
(upscaled, three channels) instead, so a smoke run needs no files.  Preprocessing is the usual
ImageNet recipe: random resized crop and horizontal flip for training, resize + center crop for
testing, normalised with the model's mean/std (``ModelCfg`` of the registry) unless the data
section gives its own.  The non-local block in a 2D ResNet (Section 6 of "Non-local Neural
Networks", Wang et al., CVPR 2018, arXiv:1711.07971) is the same block as in the video models.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from nlnet.data.images.config import ImageDataConfig
from nlnet.data.loader import skipped_count, usable_workers
from nlnet.data.preprocessing import Preprocessing
from nlnet.engine.config.schema import EvalConfig
from nlnet.engine.config.sections import data_section
from nlnet.engine.errors import DataError
from nlnet.engine.tasks import check_logits

__all__ = ["ImageClassificationTask"]


class ImageClassificationTask:
    """Images -> class scores; cross-entropy; top-1/top-5 accuracy (see the module docstring).

    Built by :meth:`from_config` from the config's sections, or directly from them:

    Args:
        data: the ``data`` section (:class:`ImageDataConfig`, or a mapping of its keys).
        mean, std: normalisation (default ``data.mean``/``data.std``, else ImageNet's);
            :meth:`from_config` gives the model's (``ModelCfg``) when the data section does not.
        seed: the seed of the built-in digits' train/val split (``train.seed``).
        evaluation: the ``eval`` section (``batch_size`` and ``workers`` of the test loader).
        class_names: the names stored in checkpoints (default: the dataset's classes).
    """

    name = "image_classification"
    classifies = True  # one class per item: a single class is refused
    data_config = ImageDataConfig

    def __init__(
        self,
        *,
        data: ImageDataConfig | Mapping[str, Any],
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        seed: int = 0,
        evaluation: EvalConfig | None = None,
        class_names: Sequence[str] | None = None,
    ) -> None:
        from nlnet.data.video.builder import collate_skip_bad
        from nlnet.functional.stats import IMAGENET_MEAN, IMAGENET_STD

        self.data = data_section(ImageDataConfig, data)
        mean = mean or self.data.mean or IMAGENET_MEAN
        std = std or self.data.std or IMAGENET_STD
        self.mean, self.std = [float(v) for v in mean], [float(v) for v in std]
        self.resize = self.data.resize or int(math.ceil(self.data.size * 8 / 7))
        self.seed = int(seed)
        self.evaluation = evaluation if evaluation is not None else EvalConfig()
        self.class_names = tuple(class_names) if class_names else None
        self.collate = collate_skip_bad
        self.classes: int | None = None  # the final class count (setup)

    @classmethod
    def from_config(cls, cfg: Any) -> ImageClassificationTask:
        """The task of an engine config: ``data``, the model's mean/std where ``data`` has
        none (``model.name``), ``train.seed``, ``eval`` and ``class_names``."""
        data = data_section(ImageDataConfig, cfg.data)
        mean, std = data.mean, data.std
        if mean is None or std is None:
            from nlnet.models.registry import model_facts

            try:
                facts = model_facts(cfg.model.name)
                mean, std = mean or facts.mean, std or facts.std
            except ValueError:
                pass  # an unregistered model: ImageNet's statistics (``__init__``)
        return cls(data=data, mean=mean, std=std, seed=cfg.train.seed, evaluation=cfg.eval,
                   class_names=cfg.class_names)  # fmt: skip

    def transform(self, mode: str) -> Any:
        """torchvision transforms of a split (``train``: random resized crop + flip)."""
        from nlnet.data.images.transforms import image_test_transform, image_train_transform

        d = self.data
        if mode != "train":  # the same view as nlnet.predict's ImageTransform
            return image_test_transform(self.resize, d.size, self.mean, self.std)
        return image_train_transform(d.size, d.min_scale, d.hflip, self.mean, self.std)

    def build_dataset(self, split: str, mode: str = "train") -> Dataset:
        """The images of ``split`` (``root/<split>`` or the built-in digits split;
        :func:`~nlnet.data.images.builder.build_image_dataset`)."""
        from nlnet.data.images.builder import build_image_dataset

        try:
            return build_image_dataset(self.data, split, self.transform(mode), self.seed)
        except ValueError as exc:
            raise DataError(str(exc)) from None

    def num_classes(self, dataset: Any) -> int | None:
        n = getattr(dataset, "num_classes", None)
        return n if isinstance(n, int) else None

    skipped = staticmethod(skipped_count)  # the collate function's count of bad items

    def loss(self, model: nn.Module, batch: Any, device: torch.device
             ) -> tuple[torch.Tensor | None, int]:  # fmt: skip
        images = batch["clip"]
        if images is None or images.shape[0] == 0:
            return None, 0
        logits = model(images.to(device, non_blocking=True))
        check_logits(logits, images.shape[0], self.classes)
        target = batch["target"].to(device, non_blocking=True)
        return F.cross_entropy(logits.float(), target.long()), int(images.shape[0])

    def setup(self, num_classes: int) -> None:
        """The final class count (the model's outputs are checked against it)."""
        self.classes = int(num_classes)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, dataset: Dataset, device: torch.device,
                 details: bool = False, **_: Any) -> dict[str, Any]:  # fmt: skip
        """``top1`` (and ``top5`` above 5 classes) and ``mean_class_acc`` (percent), ``count``
        and ``skipped`` over the dataset; ``details`` (``nlnet eval``): also
        ``per_class_top1`` and the ``confusion`` matrix."""
        from nlnet.engine.metrics import (
            classification_details,
            mean_class_accuracy,
            topk_accuracy,
        )

        was_training = model.training
        model.eval()
        ev = self.evaluation
        loader = DataLoader(dataset, batch_size=ev.batch_size, collate_fn=self.collate,
                            num_workers=usable_workers(ev.workers))  # fmt: skip
        scores, targets, skipped = [], [], 0
        try:
            for batch in loader:
                skipped += self.skipped(batch)
                if batch["clip"] is None:
                    continue
                scores.append(model(batch["clip"].to(device)).float().cpu())
                targets.append(batch["target"])
        finally:
            model.train(was_training)
        if not scores:
            return {"top1": math.nan, "count": 0, "skipped": skipped}
        s, t = torch.cat(scores), torch.cat(targets)
        # top-5 only above 5 classes (of 5 or fewer it is always 100, as for video)
        ks = (1, 5) if s.shape[1] > 5 else (1,)
        acc = topk_accuracy(s, t, ks)
        out = {**acc, "mean_class_acc": mean_class_accuracy(s, t), "count": int(s.shape[0]),
               "skipped": skipped}  # fmt: skip
        return {**out, **classification_details(s, t)} if details else out

    def metadata(self, dataset: Any) -> dict[str, Any]:
        names = self.class_names or getattr(dataset, "classes", None)
        prep = Preprocessing("image", self.mean, self.std, size=self.resize, crop=self.data.size)
        return {"class_names": [str(n) for n in names] if names else None, "preprocessing": prep}

    @staticmethod
    def summary(metrics: dict[str, Any]) -> str:
        keys = [k for k in ("top1", "top5", "mean_class_acc") if k in metrics]
        text = ", ".join(f"{k} {metrics[k]:.2f}" for k in keys)
        return f"{text} ({metrics.get('count', 0)} images, skipped {metrics.get('skipped', 0)})"
