"""Segmentation task: confusion matrix / mIoU by hand, loss and evaluation on the tiny task."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.data import DataLoader

from nlnet.data.digits.dense import DenseDigitsConfig, prepare_dense_digits
from nlnet.engine.tasks.segmentation import (
    SegmentationTask,
    confusion_matrix,
    iou_from_confusion,
    segmentation_metrics,
)
from nlnet.models import create_model


def test_miou_hand_computed():
    target = torch.tensor([[0, 0, 1, 1], [2, 2, 255, 1]])
    pred = torch.tensor([[0, 1, 1, 1], [2, 0, 0, 2]])
    conf = confusion_matrix(pred, target, num_classes=4)
    # rows true, cols predicted; the ignored pixel (255) is skipped
    expected = torch.tensor([[1, 1, 0, 0], [0, 2, 1, 0], [1, 0, 1, 0], [0, 0, 0, 0]])
    assert torch.equal(conf, expected)
    iou = iou_from_confusion(conf)
    # class 0: tp 1, fn 1, fp 1 -> 1/3; class 1: 2/(3+3-2) = 1/2; class 2: 1/(2+2-1) = 1/3
    assert iou[:3].tolist() == pytest.approx([1 / 3, 1 / 2, 1 / 3])
    assert math.isnan(iou[3])  # never present, never predicted: left out of the mean
    m = segmentation_metrics(conf, ["bg", "a", "b", "c"])
    assert m["mIoU"] == pytest.approx(100 * (1 / 3 + 1 / 2 + 1 / 3) / 3)
    assert m["pixel_acc"] == pytest.approx(100 * 4 / 7)
    assert m["iou_a"] == pytest.approx(50.0)
    # Dice = 2 tp / (|true| + |pred|): class 0 2/4, class 1 4/6, class 2 2/4 (= 2 IoU / (1 + IoU))
    assert m["dice_a"] == pytest.approx(100 * 2 / 3)
    assert m["mDice"] == pytest.approx(100 * (1 / 2 + 2 / 3 + 1 / 2) / 3)
    assert math.isnan(m["dice_c"])


def test_confusion_rejects_bad_labels():
    with pytest.raises(ValueError, match="class ids"):
        confusion_matrix(torch.tensor([0, 5]), torch.tensor([0, 1]), num_classes=3)
    with pytest.raises(ValueError, match="shape"):
        confusion_matrix(torch.zeros(2), torch.zeros(3), num_classes=3)


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory):
    cfg = DenseDigitsConfig(size=48, num_train=16, num_val=4, num_test=4, seed=2)
    return prepare_dense_digits(cfg, tmp_path_factory.mktemp("seg"))


@pytest.mark.parametrize("name", ["seg_tiny", "seg_tiny_nl"])
def test_training_steps_decrease_the_loss(tiny_root, name):
    torch.manual_seed(0)
    task = SegmentationTask(4, ["background", "cue", "match", "other"],
                            data={"root": str(tiny_root)})  # fmt: skip
    train, val = task.build_datasets()
    batch = task.collate([train[i] for i in range(8)])
    model = create_model(name)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(6):
        loss, n = task.loss(model, batch)
        assert n == 8
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]
    metrics = task.evaluate(model, DataLoader(val, batch_size=2, collate_fn=task.collate))
    names = ("background", "cue", "match", "other")
    assert set(metrics) == {"mIoU", "mDice", "pixel_acc"} | {
        f"{m}_{n}" for m in ("iou", "dice") for n in names
    }
    assert model.training  # evaluate restores the mode
    assert 0 <= metrics["pixel_acc"] <= 100


def test_build_datasets_needs_a_root():
    with pytest.raises(ValueError, match="data.root"):
        SegmentationTask(4).build_datasets()


@pytest.mark.parametrize("dim", [2, 3])
def test_deep_supervision_adds_half_the_bottleneck_classifiers_loss(tiny_root, dim):
    """``UNet(deep_supervision=True)``: in training mode ``{"out", "aux"}`` (the bottleneck's
    classifier up-sampled to the input size), in evaluation mode the logits alone; the task's
    loss is ``CE(out) + 0.5 CE(aux)`` (torchvision's references), for images and for the padded
    volumes, and the aux classifier and the block receive gradients."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    name, kw = ("unet2d_nl", {"base_channels": 4}) if dim == 2 else ("unet3d_nl", {"width": 2})
    model = create_model(name, num_classes=4, depth=2, deep_supervision=True, **kw)
    data = {"root": str(tiny_root)} if dim == 2 else {"root": str(tiny_root), "kind": "volume"}
    task = SegmentationTask(4, ["background", "cue", "match", "other"], data=data)
    size = (32, 32) if dim == 2 else (6, 16, 16)  # volumes: depth 6 padded to 8
    x = torch.randn(2, 3 if dim == 2 else 4, *size)
    y = torch.randint(0, 4, (2, *size))
    with torch.no_grad():
        loss = task.loss(model, {"image": x, "mask": y})[0]
        padded = F.pad(x, (0, 0, 0, 0, 0, 2)) if dim == 3 else x
        heads = model(padded)
        crop = (slice(None), slice(None), *(slice(0, n) for n in size))
        expect = F.cross_entropy(heads["out"][crop], y) + 0.5 * F.cross_entropy(
            heads["aux"][crop], y
        )
    assert set(heads) == {"out", "aux"} and heads["aux"].shape == heads["out"].shape
    assert torch.allclose(loss, expect) and loss.ndim == 0
    model.bottleneck[-1].norm.weight.data.fill_(0.5)  # the block's output in use
    task.loss(model, {"image": x, "mask": y})[0].backward()
    assert model.aux_classifier.weight.grad.abs().sum() > 0
    assert model.bottleneck[-1].theta.weight.grad.abs().sum() > 0
    assert torch.is_tensor(model.eval()(padded))  # tests and exports as a plain model


def _picture_folder(root, mask_mode: str, mask_ext: str = ".png") -> None:
    """``root/{train,val}/{images,masks}`` of 8 x 8 pictures with masks saved as ``mask_mode``."""
    import numpy as np
    from PIL import Image

    for split in ("train", "val"):
        for kind in ("images", "masks"):
            (root / split / kind).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(np.full((8, 8, 3), 40 * i, np.uint8)).save(
                root / split / "images" / f"{i}.png"
            )
            labels = np.zeros((8, 8), np.uint8)
            labels[2:5, 2:5] = 1
            mask = Image.fromarray(labels * 255).convert(mask_mode)
            mask.save(root / split / "masks" / f"{i}{mask_ext}")


def test_masks_saved_as_colour_pictures_or_jpeg_are_named_before_training(tmp_path):
    """Masks that are colour pictures (no class ids) are refused before training with the
    first mask's reason, not as "no readable label; set model.num_classes"; JPEG masks are
    named where their PNG is looked for."""
    from nlnet.data.segmentation.config import SegmentationDataConfig
    from nlnet.engine.errors import DataError
    from nlnet.engine.tasks.segmentation.labels import classes_in_masks

    _picture_folder(tmp_path / "rgb", "RGB")
    with pytest.raises(DataError, match=r"no training mask is readable, e.g. mask .*0.png: "
                                        r"expected a single-channel PNG of class ids, got 3"):  # fmt: skip
        classes_in_masks(SegmentationDataConfig(root=str(tmp_path / "rgb")))
    _picture_folder(tmp_path / "jpg", "L", ".jpg")
    with pytest.raises(DataError, match=r"without a mask in .*e.g. 0.png \(found 0.jpg: masks "
                                        r"are PNG files of class ids"):  # fmt: skip
        classes_in_masks(SegmentationDataConfig(root=str(tmp_path / "jpg")))
