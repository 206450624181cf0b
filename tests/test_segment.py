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


def test_raw_labels_only_where_the_label_map_is_one_to_one():
    from nlnet.segmentation import Segmentation

    mask = np.array([[0, 1], [2, 3]])
    assert Segmentation("x", mask, list("abcd"), {4: 3}).raw_labels().tolist() == [[0, 1], [2, 4]]
    for merged in ({3: 0}, {2: 1, 3: 1}):  # into the background; two labels into one class
        with pytest.raises(ValueError, match="raw label is unknown"):
            Segmentation("x", mask, list("abcd"), merged).raw_labels()


def test_segment_refuses_a_classifier(tmp_path):
    import nlnet
    from nlnet.engine.checkpoint import save_checkpoint
    from nlnet.models.registry import create_model

    model = create_model("resnet_tiny", num_classes=2, width=4)
    save_checkpoint(tmp_path / "cls.pt", model=model, model_name="resnet_tiny", num_classes=2,
                    model_options={"width": 4})  # fmt: skip
    with pytest.raises(ValueError, match="image_classification model, not a segmentation"):
        nlnet.segment(nlnet.load_model(tmp_path / "cls.pt"), [np.zeros((8, 8, 3), np.uint8)])


def test_predict_groups_modality_files_and_refuses_clashing_names(tmp_path, capsys):
    import nibabel

    from nlnet.cli import main

    data = {"kind": "volume", "patch": [8, 8, 8], "modalities": ["t1", "flair"]}
    ckpt = _checkpoint(tmp_path / "mm.pt", "unet3d_nl", data, in_channels=2)
    cases = tmp_path / "cases"
    cases.mkdir()
    vol = _case(3, shape=(2, 8, 8, 8))
    for c, m in enumerate(("t1", "flair")):  # one 3D file per modality, listed out of order
        nibabel.save(nibabel.Nifti1Image(vol[c], np.eye(4)), str(cases / f"p7_{m}.nii.gz"))
    out = tmp_path / "out"
    assert main(["predict", str(cases), "--checkpoint", str(ckpt), "--output-dir", str(out)]) == 0
    assert nibabel.load(str(out / "p7_mask.nii.gz")).shape == (8, 8, 8)
    capsys.readouterr()
    (cases / "p8_t1.nii.gz").write_bytes((cases / "p7_t1.nii.gz").read_bytes())  # no flair
    assert main(["predict", str(cases), "--checkpoint", str(ckpt)]) == 2
    assert "case 'p8' lacks modality 'flair'" in capsys.readouterr().err
    other = tmp_path / "other"
    for d in ("a", "b"):
        (other / d).mkdir(parents=True)
        np.save(other / d / "c.npy", _case(shape=(2, 8, 8, 8)))
    assert main(["predict", str(other), "--checkpoint", str(ckpt), "--window", "8,8"]) == 2
    assert "--window: expected 3 sizes" in capsys.readouterr().err
    ckpt1 = _checkpoint(tmp_path / "one.pt", "unet3d_nl", {"kind": "volume"}, in_channels=2)
    assert main(["predict", str(other), "--checkpoint", str(ckpt1)]) == 2
    assert "would both write c_mask.*" in capsys.readouterr().err
