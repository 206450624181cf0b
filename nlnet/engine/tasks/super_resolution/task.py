"""Single-image super-resolution as a training task: L1 loss, PSNR / SSIM on the Y channel.

Selected by ``task: super_resolution``. The model maps a low-resolution RGB image in [0, 1] to one
``upscale`` times larger (EDSR / RCAN: :mod:`nlnet.models.edsr`, :mod:`nlnet.models.rcan`); the
factor is the model's ``upscale`` option (``model.overrides.upscale``, default the registry's).

Loss: the mean absolute error (L1), as EDSR (Sec. 4.2) and RCAN train.

Evaluation, the usual protocol of the SR papers (EDSR Sec. 4.1, RCAN Sec. 4.1): outputs clamped
to [0, 1] and rounded to 8 bits; both images converted to the luma channel Y of ITU-R BT.601
(``Y = 16 + (65.481 R + 128.553 G + 24.966 B)`` on [0, 1] RGB, range 16..235); ``upscale`` pixels
cropped at each border; PSNR (``data_range=255``) and SSIM (Wang et al. 2004: Gaussian window
sigma 1.5, ``K1 = 0.01``, ``K2 = 0.03``, population covariance) from **scikit-image**
(``skimage.metrics.peak_signal_noise_ratio`` / ``structural_similarity``), averaged over the test
images. The same numbers for plain bicubic up-sampling of the input are reported beside them
(``bicubic_psnr_y`` / ``bicubic_ssim_y``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from nlnet.data.loader import skipped_count
from nlnet.data.preprocessing import Preprocessing
from nlnet.data.super_resolution.config import SuperResolutionData
from nlnet.engine.config.sections import data_section
from nlnet.engine.errors import DataError

__all__ = ["SuperResolutionTask", "rgb_to_y", "sr_metrics"]


def rgb_to_y(rgb: np.ndarray | torch.Tensor) -> np.ndarray:
    """``(3, H, W)`` RGB in [0, 1] -> ``(H, W)`` float64 BT.601 luma in [16, 235]."""
    x = rgb.detach().cpu().double().numpy() if isinstance(rgb, torch.Tensor) else np.asarray(rgb)
    return 16.0 + 65.481 * x[0] + 128.553 * x[1] + 24.966 * x[2]


def _quantize(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(0, 1).mul(255).round().div(255)


def sr_metrics(sr: torch.Tensor, hr: torch.Tensor, border: int) -> tuple[float, float]:
    """PSNR (dB) and SSIM on Y with ``border`` pixels cropped (scikit-image's metrics)."""
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    y_sr, y_hr = rgb_to_y(_quantize(sr)), rgb_to_y(hr)
    if border > 0:
        y_sr, y_hr = y_sr[border:-border, border:-border], y_hr[border:-border, border:-border]
    psnr = peak_signal_noise_ratio(y_hr, y_sr, data_range=255.0)
    ssim = structural_similarity(
        y_hr, y_sr, data_range=255.0, gaussian_weights=True, sigma=1.5,
        use_sample_covariance=False,
    )  # fmt: skip
    return float(psnr), float(ssim)


class SuperResolutionTask:
    """Super-resolution for the engine (see the module docstring).

    Built by :meth:`from_config` from the config's sections, or directly from them:

    Args:
        data: the ``data`` section (:class:`SuperResolutionData`, or a mapping of its keys).
        upscale: the model's up-sampling factor (:meth:`from_config`: ``model.overrides.upscale``,
            else the registry's default for ``model.name``, else 2).
    """

    name = "super_resolution"
    data_config = SuperResolutionData
    words = ("patch", "image")  # a training item, its source (the loop's messages)

    def __init__(
        self, *, data: SuperResolutionData | Mapping[str, Any] | None = None, upscale: int = 2
    ) -> None:
        self.data = data_section(SuperResolutionData, data)
        self.upscale = int(upscale)

    @classmethod
    def from_config(cls, cfg: Any) -> SuperResolutionTask:
        """The task of an engine config: ``data`` and the factor of ``model``."""
        from nlnet.models.registry import get_model_entry

        try:
            default = get_model_entry(cfg.model.name).default_cfg.get("upscale", 2)
        except ValueError:
            default = 2
        return cls(data=cfg.data, upscale=dict(cfg.model.overrides).get("upscale", default))

    def build_dataset(self, split: str, mode: str = "train") -> Dataset:
        """Training patches (``mode="train"``) or test tiles of ``split``
        (:func:`~nlnet.data.super_resolution.builder.build_sr_dataset`)."""
        from nlnet.data.super_resolution.builder import build_sr_dataset

        try:
            return build_sr_dataset(self.data, split, mode, self.upscale)
        except (ValueError, FileNotFoundError, OSError) as exc:
            raise DataError(f"data (split {split!r}): {exc}") from None

    def num_classes(self, dataset: Any) -> int | None:
        return 3  # output channels (RGB): the models' num_classes

    @staticmethod
    def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
        """``{"lr", "hr", "index", "skipped"}`` from ``{"lr", "hr", "index"}`` items."""
        return {
            "lr": torch.stack([it["lr"] for it in items]),
            "hr": torch.stack([it["hr"] for it in items]),
            "index": torch.tensor([it["index"] for it in items]),
            "skipped": 0,
        }

    skipped = staticmethod(skipped_count)  # the collate function's count of bad items

    def loss(
        self, model: nn.Module, batch: Any, device: torch.device
    ) -> tuple[torch.Tensor | None, int]:
        """L1 between the model's output and the high-resolution target."""
        lr, hr = batch["lr"], batch["hr"]
        if lr.shape[0] == 0:
            return None, 0
        sr = model(lr.to(device, non_blocking=True))
        return F.l1_loss(sr.float(), hr.to(device, non_blocking=True)), int(lr.shape[0])

    @torch.no_grad()
    def evaluate(
        self, model: nn.Module, dataset: Dataset, device: Any = None, **_: Any
    ) -> dict[str, Any]:
        """Mean ``psnr_y`` / ``ssim_y`` of the model and of bicubic up-sampling (one image at a
        time: test images may differ in size)."""
        was_training = model.training
        model.eval()
        device = device or next(model.parameters()).device
        rows = []
        try:
            for i in range(len(dataset)):
                item = dataset[i]
                lr, hr = item["lr"], item["hr"]
                sr = model(lr[None].to(device)).float().cpu()[0]
                bic = F.interpolate(lr[None], scale_factor=self.upscale, mode="bicubic",
                                    align_corners=False)[0]  # fmt: skip
                rows.append((*sr_metrics(sr, hr, self.upscale), *sr_metrics(bic, hr, self.upscale)))
        finally:
            model.train(was_training)
        if not rows:
            raise DataError("super_resolution: the evaluation split has no image")
        m = np.asarray(rows).mean(0)
        return {
            "psnr_y": float(m[0]), "ssim_y": float(m[1]),
            "bicubic_psnr_y": float(m[2]), "bicubic_ssim_y": float(m[3]),
            "images": len(rows),
        }  # fmt: skip

    def metadata(self, dataset: Any) -> dict[str, Any]:
        return {
            "class_names": None,
            "preprocessing": Preprocessing("super_resolution", upscale=self.upscale),
        }

    @staticmethod
    def summary(metrics: dict[str, Any]) -> str:
        return (
            f"PSNR-Y {metrics['psnr_y']:.2f} dB, SSIM-Y {metrics['ssim_y']:.4f} "
            f"(bicubic {metrics['bicubic_psnr_y']:.2f} dB)"
        )
