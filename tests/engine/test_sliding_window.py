"""Sliding-window inference: window positions and count, averaged overlaps, the same prediction
as the whole image for a model of local context, MONAI's function where installed, and the
segmentation evaluation that uses it (``data.sliding_window``)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from nlnet.engine.tasks.segmentation.sliding_window import sliding_window_inference, window_starts


def test_window_starts_step_count_and_last_window_flush():
    # step int(8 * 0.75) = 6; ceil((23 - 8) / 6) + 1 = 4 windows, the last one ends at 23
    assert window_starts(23, 8, 0.25) == [0, 6, 12, 15]
    assert window_starts(16, 8, 0.5) == [0, 4, 8]  # step 4, ceil(8 / 4) + 1
    assert window_starts(16, 8, 0.0) == [0, 8]  # no overlap: tiles
    assert window_starts(8, 8, 0.25) == [0] and window_starts(5, 8, 0.25) == [0]
    with pytest.raises(ValueError, match="overlap"):
        window_starts(10, 4, 1.0)


def test_window_count_and_averaging_of_overlaps():
    x = torch.zeros(2, 1, 10, 23)
    seen: list[tuple[int, ...]] = []

    def predictor(w):  # each window's logits: its call number (one window per call)
        seen.append(tuple(w.shape))
        return torch.full((w.shape[0], 1, *w.shape[2:]), float(len(seen)))

    out = sliding_window_inference(x, (8, 8), predictor, overlap=0.25)
    # rows: [0, 2] (2 windows), columns: [0, 6, 12, 15] (4): 8 windows, batch of 2 each
    assert len(seen) == 8 and set(seen) == {(2, 1, 8, 8)}
    assert out.shape == (2, 1, 10, 23)
    starts = [(r, c) for r in (0, 2) for c in (0, 6, 12, 15)]  # the order of the calls
    for i, j in [(0, 0), (5, 7), (9, 22), (3, 14), (1, 13)]:
        covering = [k + 1 for k, (r, c) in enumerate(starts) if r <= i < r + 8 and c <= j < c + 8]
        assert out[0, 0, i, j] == pytest.approx(sum(covering) / len(covering))


def test_batched_windows_and_inputs_smaller_than_the_window():
    net = nn.Conv2d(3, 4, 1)
    x = torch.randn(1, 3, 6, 30)  # height below the window: padded, then cropped back
    with torch.no_grad():
        whole = net(x)
    calls = []
    out = sliding_window_inference(x, (8, 8), lambda w: calls.append(w.shape[0]) or net(w), 0.5, 3)
    assert out.shape == whole.shape and torch.allclose(out, whole, atol=1e-6)
    assert calls == [3, 3, 1]  # 7 windows along the width (step 4), 3 per call


def local_model(channels: int = 3, classes: int = 5) -> nn.Module:
    """Logits of each pixel from that pixel alone (1x1 convolutions): no context, so windows
    cannot change them."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(channels, 8, 1), nn.ReLU(), nn.Conv2d(8, classes, 1)).eval()


def test_local_model_same_prediction_by_windows_as_whole():
    model = local_model()
    x = torch.randn(2, 3, 37, 53)
    with torch.no_grad():
        whole = model(x)
    out = sliding_window_inference(x, (16, 16), model, overlap=0.25)
    assert torch.allclose(out, whole, atol=1e-5)
    assert torch.equal(out.argmax(1), whole.argmax(1))


def test_3d_volumes_against_monai():
    monai_inferers = pytest.importorskip(
        "monai.inferers", reason="MONAI not installed (pip install 'nlnet[medical]')"
    )
    torch.manual_seed(1)
    net = nn.Conv3d(2, 3, 3, padding=1).eval()  # context at window borders: not exact vs whole
    x = torch.randn(2, 2, 13, 17, 20)
    for overlap in (0.25, 0.5, 0.0):
        ours = sliding_window_inference(x, (8, 8, 8), net, overlap=overlap, batch_size=2)
        with torch.no_grad():
            ref = monai_inferers.sliding_window_inference(
                x, (8, 8, 8), 2, net, overlap=overlap, mode="constant"
            )
        assert torch.allclose(ours, ref, atol=1e-5), overlap


class WindowOnly(nn.Module):
    """A local (per-pixel) model that accepts only inputs of the training crop's size."""

    def __init__(self, crop) -> None:
        super().__init__()
        self.crop, self.net, self.calls = tuple(crop), local_model(), 0

    def forward(self, x):
        assert tuple(x.shape[2:]) == self.crop, x.shape
        self.calls += 1
        return self.net(x)


def test_segmentation_evaluation_uses_windows_when_the_image_exceeds_the_crop(tmp_path):
    from nlnet.data.digits.dense import DenseDigitsConfig, prepare_dense_digits
    from nlnet.engine.tasks.segmentation import SegmentationTask

    root = prepare_dense_digits(
        DenseDigitsConfig(size=48, num_train=2, num_val=3, num_test=2), tmp_path
    )
    data = {"root": str(root), "crop": [16, 24], "sliding_window": True, "window_overlap": 0.25}
    windowed = SegmentationTask(5, data=data, eval_batch_size=3)
    whole = SegmentationTask(5, data={"root": str(root)}, eval_batch_size=3)
    val = whole.build_dataset("val", "test")
    model = WindowOnly((16, 24))
    got = windowed.evaluate(model, val)
    # 48x48 images: rows [0, 12, 24, 32], columns [0, 18, 24]: 12 windows, one call each
    assert model.calls == len(window_starts(48, 16, 0.25)) * len(window_starts(48, 24, 0.25)) == 12
    assert got == pytest.approx(whole.evaluate(model.net, val), nan_ok=True, rel=0, abs=0)
    assert math.isfinite(got["mIoU"])
