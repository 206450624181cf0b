"""Image-classification items: an unreadable file is skipped, counted and named once."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from PIL import Image


def test_an_unreadable_image_is_named_once_and_skipped(tmp_path):
    from nlnet.data.images.dataset import ImageItems
    from nlnet.data.video.batches import collate_skip_bad

    good, bad = tmp_path / "good.png", tmp_path / "bad.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(good)
    bad.write_bytes(b"not a png")
    items = ImageItems([good, bad], [0, 1], ["a", "b"], transform=lambda im: torch.zeros(3, 8, 8))
    with pytest.warns(UserWarning, match=f"skipping image '{bad}'"):
        batch = collate_skip_bad([items[0], items[1]])
    assert batch["skipped"] == 1 and batch["index"].tolist() == [0] and 1 in items.bad
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # named already: silent the next time
        assert items[1] is None


@pytest.mark.parametrize("classes", [2, 7])
def test_image_evaluation_reports_top5_only_above_five_classes(classes, tmp_path):
    """The image task's metrics: top-1 and the mean class accuracy always, top-5 only above
    five classes (of five or fewer it is always 100), as the video task's."""
    from torch import nn

    from nlnet.engine.tasks.image import ImageClassificationTask

    root = tmp_path / "imgs"
    for c in range(classes):
        (root / "val" / f"c{c}").mkdir(parents=True)
        for i in range(2):
            pixels = np.full((16, 16, 3), 30 * c + i, np.uint8)
            Image.fromarray(pixels).save(root / "val" / f"c{c}" / f"{i}.png")
    task = ImageClassificationTask(data={"root": str(root), "size": 16, "hflip": False})
    val = task.build_dataset("val", "test")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, classes))
    metrics = task.evaluate(model, val, torch.device("cpu"))
    assert ("top5" in metrics) == (classes > 5) and metrics["count"] == 2 * classes
    assert 0 <= metrics["mean_class_acc"] <= 100
    assert ("top5" in task.summary(metrics)) == (classes > 5)
    details = task.evaluate(model, val, torch.device("cpu"), details=True)  # nlnet eval's
    matrix = np.array(details["confusion"])
    assert matrix.shape == (classes, classes) and matrix.sum(1).tolist() == [2] * classes
    hits = [100 * matrix[c, c] / 2 for c in range(classes)]
    assert details["per_class_top1"] == hits and "confusion" not in metrics


def test_sixteen_bit_float_and_rotated_images_read_as_they_look(tmp_path):
    """Pillow's own RGB conversion clips a 16-bit PNG at 255 (white) and a float image in
    [0, 1] to black, and ignores the EXIF orientation of phone photos."""
    from nlnet.data.images.dataset import read_rgb
    from nlnet.inference import _read_image

    g = (np.arange(40 * 40).reshape(40, 40) * 40).astype(np.uint16)
    Image.fromarray(g).save(tmp_path / "g16.png")
    x = np.asarray(read_rgb(tmp_path / "g16.png"))
    assert x.shape == (40, 40, 3) and np.abs(x[..., 0] - g / 257.0).max() <= 0.5
    f = np.linspace(0, 1, 400, dtype=np.float32).reshape(20, 20)
    Image.fromarray(f).save(tmp_path / "f.tif")
    assert np.abs(np.asarray(read_rgb(tmp_path / "f.tif"))[..., 1] - f * 255).max() <= 0.5
    photo = np.zeros((20, 60, 3), np.uint8)
    photo[:, :10] = 255  # a bright left edge, stored sideways: Orientation 6 (turn 90 degrees)
    im = Image.fromarray(photo)
    exif = im.getexif()
    exif[0x0112] = 6
    im.save(tmp_path / "r.jpg", exif=exif)
    shown = _read_image(tmp_path / "r.jpg")  # what predict reads
    assert shown.shape == (60, 20, 3) and shown[:10].mean() > 200 > shown[20:].mean()
