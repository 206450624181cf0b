"""Segmenting new inputs: ``nlnet.segment`` and ``nlnet predict`` with segmentation checkpoints
(whole inputs and sliding windows, the training's label map undone, masks and overlays)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch


def _checkpoint(path: Path, name: str, data: dict, in_channels: int | None = None) -> Path:
    from nlnet.engine.checkpoint import save_checkpoint
    from nlnet.engine.tasks.segmentation import SegmentationTask
    from nlnet.models.registry import create_model, get_model_entry

    options = dict(get_model_entry(name).default_cfg.test_overrides)
    if in_channels is not None:
        options["in_channels"] = in_channels
    torch.manual_seed(0)
    model = create_model(name, num_classes=3, **options)
    meta = SegmentationTask(3, ["bg", "a", "b"], data=data).metadata(None)
    return save_checkpoint(path, model=model, model_name=name, num_classes=3,
                           model_options=options, **meta)  # fmt: skip


@pytest.fixture(scope="module")
def volume_ckpt(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("seg3d")
    data = {"kind": "volume", "patch": [8, 8, 8], "label_map": {4: 2}, "sliding_window": True}
    return _checkpoint(root / "unet3d.pt", "unet3d_nl", data, in_channels=2)


def _case(seed: int = 0, shape=(2, 12, 16, 16)) -> np.ndarray:
    g = np.random.default_rng(seed)
    vol = g.normal(size=shape).astype(np.float32)
    vol[:, :2] = 0  # background outside the "brain"
    return vol


def test_segment_runs_the_checkpoints_choice_and_matches_the_network(volume_ckpt):
    import nlnet
    from nlnet.data.segmentation.volumes import zscore_nonzero
    from nlnet.engine.tasks.segmentation import forward_padded

    model = nlnet.load_model(volume_ckpt)
    case = _case()
    (whole,) = nlnet.segment(model, [case], window=False)
    with torch.no_grad():
        ref = forward_padded(model, zscore_nonzero(torch.from_numpy(case))[None]).argmax(1)[0]
    assert whole.windows == 0 and np.array_equal(whole.mask, ref.numpy())
    (windowed,) = nlnet.segment(model, [case])  # the checkpoint evaluated with windows of 8^3
    # windows along 12, 16, 16 with overlap 0.25 (step 6): 2 x 3 x 3
    assert windowed.windows == 18 and windowed.mask.shape == (12, 16, 16)
    (big,) = nlnet.segment(model, [case], window=[16, 16, 16])  # a window holding the input
    assert big.windows == 0 and np.array_equal(big.mask, whole.mask)
    raw = windowed.raw_labels()  # the training's label map {4: 2} undone
    assert np.array_equal(raw == 4, windowed.mask == 2) and not (raw == 2).any()
    assert abs(sum(windowed.fractions().values()) - 1) < 1e-9


def test_segment_names_the_input_of_another_channel_count(volume_ckpt, tmp_path):
    import nlnet

    model = nlnet.load_model(volume_ckpt)
    np.save(tmp_path / "one.npy", _case(shape=(1, 8, 8, 8)))
    with pytest.raises(ValueError, match=r"one\.npy: 1 channel\(s\), the model takes 2"):
        nlnet.segment(model, [tmp_path / "one.npy"])
    with pytest.raises(ValueError, match="window: expected 3 sizes"):
        nlnet.segment(model, [_case()], window=[8, 8])


def test_predict_writes_masks_and_overlays(volume_ckpt, tmp_path, capsys):
    import nibabel
    from PIL import Image

    from nlnet.cli import main

    cases = tmp_path / "cases"
    cases.mkdir()
    np.save(cases / "c1.npy", _case(1))
    affine = np.diag([2.0, 2.0, 3.0, 1.0])
    nifti = np.moveaxis(_case(2), 0, -1)  # (D, H, W, C): NIfTI keeps the channels last
    nibabel.save(nibabel.Nifti1Image(nifti, affine), str(cases / "c2.nii.gz"))
    (cases / "broken.npy").write_bytes(b"junk")
    out = tmp_path / "out"
    rc = main(["predict", str(cases), "--checkpoint", str(volume_ckpt), "--output-dir", str(out),
               "--window", "none"])  # fmt: skip
    text = capsys.readouterr()
    assert rc == 1 and "broken.npy: skipped" in text.err  # a bad case: skipped and said
    mask = np.load(out / "c1_mask.npy")
    assert mask.shape == (12, 16, 16) and set(np.unique(mask)) <= {0, 1, 4}  # raw labels
    written = nibabel.load(str(out / "c2_mask.nii.gz"))
    assert written.shape == (12, 16, 16) and np.allclose(written.affine, affine)
    assert Image.open(out / "c1_overlay.png").size == (16, 16)
    assert "c1_mask.npy (whole;" in text.out


def test_predict_an_image_with_a_2d_checkpoint(tmp_path, capsys):
    from PIL import Image

    from nlnet.cli import main

    ckpt = _checkpoint(tmp_path / "unet2d.pt", "unet2d_nl", {"kind": "image", "crop": [16, 16]})
    rgb = np.random.default_rng(0).integers(0, 255, (20, 24, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(tmp_path / "photo.png")
    rc = main(["predict", str(tmp_path / "photo.png"), "--checkpoint", str(ckpt),
               "--output-dir", str(tmp_path / "o"), "--window", "patch"])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    mask = np.asarray(Image.open(tmp_path / "o" / "photo_mask.png"))
    assert mask.shape == (20, 24) and mask.max() < 3
    assert "windows;" in capsys.readouterr().out  # 20x24 on windows of 16x16
    assert np.asarray(Image.open(tmp_path / "o" / "photo_overlay.png")).shape == (20, 24, 3)
