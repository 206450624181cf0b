"""task: super_resolution through the engine (one step, checkpoint, eval, export) and its metrics."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from nlnet.data.super_resolution.config import SuperResolutionData
from nlnet.engine.config import ConfigError, config_from_dict
from nlnet.engine.config.sections import data_section
from nlnet.engine.tasks.super_resolution import SuperResolutionTask, rgb_to_y, sr_metrics

TINY = {"n_resblocks": 1, "n_feats": 8, "upscale": 2}


def _photos(root):
    """Two small 8-bit images per split (smooth gradients + stripes), written as PNG files."""
    from PIL import Image

    yy, xx = np.mgrid[0:40, 0:48]
    for split, phase in (("train", 0.0), ("test", 1.0)):
        (root / split).mkdir(parents=True)
        for k in range(2):
            img = np.stack([xx * 5, yy * 6, 127 + 120 * np.sin((xx + yy) / (2 + k) + phase)], -1)
            Image.fromarray(img.clip(0, 255).astype(np.uint8)).save(root / split / f"{k}.png")
    return root


def _sr_config(tmp_path, **data):
    return config_from_dict({
        "task": "super_resolution",
        "model": {"name": "edsr_baseline_nl", "overrides": TINY},
        "data": {"source": "folder", "root": str(tmp_path / "photos"), "patch": 12,
                 "num_patches": 4, "eval_tile": 32, "eval_max_tiles": 1, **data},
        "optim": {"optimizer": "adamw", "lr": 1e-3, "weight_decay": 0.0, "max_iters": 1,
                  "steps": []},
        "train": {"batch_size": 2, "workers": 0, "ckpt_every": 1, "val_split": "test",
                  "device": "cpu", "progress": False, "log_every": 1},
        "eval": {"batch_size": 1, "workers": 0, "split": "test"},
        "output_dir": str(tmp_path / "run"),
    })  # fmt: skip


def test_one_step_checkpoint_eval_and_export(tmp_path, capsys):
    from nlnet.cli import main
    from nlnet.engine.checkpoint import build_model_from_checkpoint as load_model
    from nlnet.engine.checkpoint import checkpoint_info
    from nlnet.engine.evaluation import evaluate
    from nlnet.engine.loop import train

    _photos(tmp_path / "photos")
    cfg = _sr_config(tmp_path)
    out = train(cfg)
    assert out["iterations"] == 1
    val = out["val"]
    assert val["images"] == 2  # one tile of each test image
    assert 15 < val["bicubic_psnr_y"] < 60 and 0 < val["bicubic_ssim_y"] <= 1
    assert np.isfinite(val["psnr_y"])
    ckpt = tmp_path / "run" / "checkpoints" / "final.pt"
    info = checkpoint_info(ckpt)
    assert info.model_options["upscale"] == 2 and info.preprocessing.upscale == 2
    model = load_model(ckpt)
    assert model(torch.rand(1, 3, 8, 8)).shape == (1, 3, 16, 16)
    again = evaluate(cfg, ckpt)
    assert again["psnr_y"] == pytest.approx(val["psnr_y"], abs=1e-6)
    path = tmp_path / "sr.pt2"
    capsys.readouterr()  # the training's console lines
    rc = main(["export", "--checkpoint", str(ckpt), "--format", "exported", "--output", str(path),
               "--input-size", "3x16x16"])  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["check_ok"] and path.is_file()


@pytest.mark.filterwarnings("ignore:divide by zero")  # PSNR of identical images: inf
def test_y_channel_psnr_ssim_known_values():
    gen = torch.Generator().manual_seed(0)
    hr = (torch.rand(3, 40, 40, generator=gen) * 255).round() / 255  # an 8-bit image
    psnr, ssim = sr_metrics(hr, hr, border=2)
    assert psnr == float("inf") and ssim == pytest.approx(1.0)
    y = rgb_to_y(hr)
    assert y.min() >= 16 - 1e-9 and y.max() <= 235 + 1e-9  # BT.601 studio range
    base = torch.full((3, 20, 20), 128 / 255)
    off = base + 2 / 255  # gray + 2 levels: Y moves by 2 * 219/255 everywhere
    p, _ = sr_metrics(off, base, border=0)
    diff = 2 * 219.0 / 255
    assert p == pytest.approx(10 * np.log10(255**2 / diff**2), abs=1e-6)
    # the border crop drops the outer pixels: an error only there does not count
    noisy = hr.clone()
    noisy[:, :2] = 1 - noisy[:, :2]
    assert sr_metrics(noisy, hr, border=2)[0] == float("inf")
    assert sr_metrics(noisy, hr, border=0)[0] < 30


def test_data_section_errors_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="data.pacth"):
        data_section(SuperResolutionData, {"pacth": 4})
    with pytest.raises(ConfigError, match="data.root"):
        data_section(SuperResolutionData, {"source": "folder"})
    with pytest.raises(ConfigError, match="data.source"):
        data_section(SuperResolutionData, {"source": "web"})
    task = SuperResolutionTask.from_config(
        _sr_config(tmp_path, source="folder", root=str(tmp_path / "none"))
    )
    from nlnet.engine.errors import DataError

    with pytest.raises(DataError, match="no such folder"):
        task.build_dataset("train")


def test_self_similar_source_cuts_each_photo_into_disjoint_bands():
    """``source: self_similar``: each photograph's train / val / test bands, put back together
    along the cut axis, are the whole photograph exactly once (no test pixel trained on); the
    task builds training patches from the train bands and val / test tiles from the others,
    and the built-in source, which has no val split, says so in one line."""
    import skimage.data

    from nlnet.data.super_resolution.dataset import (
        SELF_SIMILAR_PHOTOS,
        band_bounds,
        self_similar_photos,
    )
    from nlnet.engine.errors import DataError

    bands = {split: self_similar_photos(split) for split in ("train", "val", "test")}
    for k, name in enumerate(SELF_SIMILAR_PHOTOS):
        image = np.asarray(getattr(skimage.data, name)())
        axis = int(image.shape[1] > image.shape[0])
        parts = [bands[split][k][1][..., 0] for split in ("train", "val", "test")]
        assert all(p.shape[axis] > 0 for p in parts)
        np.testing.assert_array_equal(np.concatenate(parts, axis=axis), image)
        assert bands["test"][k][0].startswith(f"{name}[")
    assert band_bounds(10, "train") == (0, 6) and band_bounds(10, "test") == (8, 10)
    with pytest.raises(ValueError, match="split"):
        band_bounds(10, "extra")

    task = SuperResolutionTask(
        data={"source": "self_similar", "patch": 12, "num_patches": 2, "eval_tile": 64,
              "eval_max_tiles": 8}
    )  # fmt: skip
    patch = task.build_dataset("train")[0]
    assert patch["lr"].shape == (3, 12, 12) and patch["hr"].shape == (3, 24, 24)
    val, test = task.build_dataset("val", "test"), task.build_dataset("test", "test")
    assert len(val) == len(test) == 28  # 8 tiles of each texture band, 2 of each text band
    assert not torch.equal(val[0]["hr"], test[0]["hr"])
    with pytest.raises(DataError, match="'val'"):
        SuperResolutionTask(data={"source": "builtin"}).build_dataset("val", "test")
