"""3D segmentation through the engine: ``nlnet train --config dense/unet3d_nl`` on tiny volumes
(a narrow unet3d_nl via ``model.overrides``), its checkpoint, ``nlnet eval`` on whole volumes,
``nlnet export``, and data-key mistakes as one-line config errors."""

from __future__ import annotations

import json

import helpers  # tests/journeys/helpers.py (pytest pythonpath)
import numpy as np
import pytest
import torch

from nlnet.engine.checkpoint import build_model_from_checkpoint as load_model
from nlnet.engine.checkpoint import checkpoint_info

#: volumes (C, D, H, W) whose sizes are not multiples of the narrow U-Net's stride (4)
SHAPE = (4, 10, 16, 18)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return helpers.volume_tree(tmp_path_factory.mktemp("vol"), shape=SHAPE, splits=("train", "val"))


def _over(root, out) -> list[str]:
    return [f"data.root={root}", f"output_dir={out}", "data.patch=[8,8,8]",
            "model.overrides={base_channels: 4, depth: 2}", "optim.epochs=0",
            "optim.max_iters=2", "train.batch_size=2", "train.workers=0", "train.device=cpu",
            "train.progress=false", "eval.workers=0"]  # fmt: skip


def test_unet3d_config_trains_evaluates_whole_volumes_and_exports(root, tmp_path, capsys):
    from nlnet.cli import main

    out = tmp_path / "run"
    torch.manual_seed(0)
    assert main(["train", "--config", "dense/unet3d_nl", *_over(root, out)]) == 0
    ckpt = out / "checkpoints" / "final.pt"
    info = checkpoint_info(ckpt)
    assert info.model_name == "unet3d_nl"
    assert info.model_options == {"base_channels": 4, "depth": 2}
    assert info.class_names == ["background", "necrosis", "edema", "enhancing"]
    assert info.preprocessing.kind == "volume" and info.preprocessing.window == (8, 8, 8)
    model = load_model(ckpt)
    assert model(torch.randn(1, 4, 8, 16, 16)).shape == (1, 4, 8, 16, 16)
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(ckpt), "eval.workers=0"]) == 0
    text = capsys.readouterr().out
    metrics = json.loads(text[("\n" + text).rindex("\n{") :])
    assert metrics["split"] == "val"
    for key in ("mIoU", "mDice", "dice_enhancing", "iou_edema", "dice_background"):
        assert 0 <= metrics[key] <= 100, (key, metrics)
    # whole 10x16x18 volumes (padded to 12x16x20 for the network, cropped back): the voxel
    # accuracy is over every labelled voxel of both cases, the pad never counts
    assert metrics["dice_background"] > 0
    # BraTS regions (the config's data.regions): per-case Dice averaged over the 2 val cases,
    # recomputed here from the model's whole-volume predictions
    assert metrics["cases"] == 2
    val = sorted((root / "val" / "masks").glob("*.npy"))
    expected = {"wt": [], "tc": [], "et": []}
    for case in val:
        import numpy as np

        from nlnet.data.segmentation.volumes import zscore_nonzero

        image = torch.from_numpy(np.load(root / "val" / "images" / case.name))
        true = np.load(case)  # raw labels {0, 2, 4}
        with torch.no_grad():
            x = torch.nn.functional.pad(zscore_nonzero(image)[None], (0, 2, 0, 0, 0, 2))
            pred = model.eval()(x)[0, :, :10, :16, :18].argmax(0).numpy()  # classes, 4 -> 3
        for name, raw, cls in (("wt", [2, 4], [1, 2, 3]), ("tc", [4], [1, 3]), ("et", [4], [3])):
            t, q = np.isin(true, raw), np.isin(pred, cls)
            total = t.sum() + q.sum()
            expected[name].append(100.0 if total == 0 else 200.0 * (t & q).sum() / total)
    for name, values in expected.items():
        assert metrics[f"dice_{name}"] == pytest.approx(sum(values) / len(values), abs=1e-6)
    capsys.readouterr()
    png = tmp_path / "slice.png"
    png.write_bytes(b"")
    assert main(["visualize", "--checkpoint", str(ckpt), "--video", str(png)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "segments 3D volumes" in err, err
    exported = tmp_path / "model.pt2"
    assert main(["export", "--checkpoint", str(ckpt), "--format", "exported", "--output",
                 str(exported), "--input-size", "4x8x16x16"]) == 0  # fmt: skip
    program = torch.export.load(str(exported))
    beside = json.loads(exported.with_name(exported.name + ".json").read_text())
    assert beside["input_layout"] == "NCDHW"
    x = torch.randn(2, 4, 8, 16, 16)
    model.eval()
    with torch.no_grad():
        assert torch.allclose(program.module()(x), model(x), atol=1e-4)


def test_whole_volume_evaluation_ignores_the_pad(root):
    """Evaluation of a constant predictor counts exactly the case's voxels (not the pad)."""
    from nlnet.engine.tasks.segmentation import SegmentationTask

    class Constant(torch.nn.Module):  # predicts class 0 everywhere; needs multiples of 8
        depth = 3

        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(()))

        def forward(self, x):
            assert all(n % 8 == 0 for n in x.shape[2:]), x.shape
            logits = torch.zeros(x.shape[0], 4, *x.shape[2:])
            logits[:, 0] = 1
            return logits + self.w

    task = SegmentationTask(4, data={"root": str(root), "kind": "volume", "label_map": {4: 3}})
    val = task.build_dataset("val", "test")
    conf = task.confusion(Constant(), torch.utils.data.DataLoader(val, 2, collate_fn=task.collate))
    masks = torch.stack([val[i]["mask"] for i in range(len(val))])
    assert int(conf.sum()) == masks.numel() == 2 * 10 * 16 * 18
    assert conf[:, 0].tolist() == [int((masks == c).sum()) for c in range(4)]


def test_a_thin_volume_is_padded_to_what_the_bottleneck_block_needs():
    """A case of 3 slices with a depth-2 U-Net (stride 4) and a block at the bottleneck: padded
    to 8 (a bottleneck map of 2 for the block's pool), predicted, cropped back."""
    from nlnet.engine.tasks.segmentation import forward_padded
    from nlnet.models.registry import create_model

    torch.manual_seed(0)
    model = create_model("unet3d_nl", num_classes=2, in_channels=1, width=4, depth=2).eval()
    with torch.no_grad():
        out = forward_padded(model, torch.randn(1, 1, 3, 12, 9))
    assert out.shape == (1, 2, 3, 12, 9) and torch.isfinite(out).all()
    plain = create_model("unet3d", num_classes=2, in_channels=1, width=4, depth=2).eval()
    x = torch.randn(1, 1, 4, 8, 8)  # no block: padded as before (here: not at all)
    with torch.no_grad():
        assert torch.equal(forward_padded(plain, x), plain(x))


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.pach=[8,8,8]", "unknown config key 'data.pach'; valid keys in data: "),
        ("data.kind=volum", "data.kind: expected image or volume, got 'volum'"),
        ("data.patch=[8,8]", "data.patch: expected 3 positive sizes"),
        ("data.label_map={four: 3}", "data.label_map: expected integer labels"),
    ],
)
def test_data_key_mistakes_are_one_line_config_errors(override, message, root, tmp_path, capsys):
    from nlnet.cli import main

    out = tmp_path / "never"
    assert main(["train", "--config", "dense/unet3d_nl", *_over(root, out), override]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    if "pach" in override:
        assert "patch" in err and "label_map" in err and "modalities" in err
    assert not out.exists()  # before any run directory


def test_volume_keys_need_kind_volume(tmp_path, capsys):
    from nlnet.cli import main

    argv = ["train", "--config", "dense/unet2d_nl", f"output_dir={tmp_path / 'x'}",
            "data.label_map={4: 3}"]  # fmt: skip
    assert main(argv) == 2
    assert "data.label_map: only for data.kind volume" in capsys.readouterr().err


def test_whole_volume_training_pads_cases_of_different_sizes(tmp_path):
    """Without ``data.patch`` a batch holds whole cases of different sizes: padded to the
    largest (ignored voxels) and to the stride; the loss counts only the cases' voxels."""
    from nlnet.engine.tasks.segmentation import SegmentationTask
    from nlnet.models import create_model

    helpers.volume_tree(tmp_path, cases=1, shape=(4, 9, 12, 10), splits=("train",), seed=1)
    other = helpers.volume_tree(tmp_path / "b", cases=1, shape=(4, 12, 8, 13), splits=("train",))
    for sub in ("images", "masks"):
        (other / "train" / sub / "case0.npy").rename(tmp_path / "train" / sub / "case1.npy")
    task = SegmentationTask(4, data={"root": str(tmp_path), "kind": "volume", "label_map": {4: 3}})
    train = task.build_dataset("train")
    batch = task.collate([train[0], train[1]])
    assert batch["image"].shape == (2, 4, 12, 12, 13) and batch["mask"].shape == (2, 12, 12, 13)
    assert int((batch["mask"] != 255).sum()) == 9 * 12 * 10 + 12 * 8 * 13
    torch.manual_seed(0)
    model = create_model("unet3d_nl", num_classes=4, base_channels=2, depth=2)
    loss, n = task.loss(model, batch)
    assert n == 2 and torch.isfinite(loss)
    loss.backward()
    assert model.classifier.weight.grad.abs().sum() > 0


def test_sliding_window_over_volumes_equals_whole_volume_for_a_local_model(root):
    """``data.sliding_window`` with ``data.patch``: 8^3 windows over the 10x16x18 cases (the
    pad of a batch included); a per-voxel model gives the whole-volume metrics."""
    from nlnet.engine.tasks.segmentation import SegmentationTask
    from nlnet.engine.tasks.segmentation.sliding_window import window_starts

    class PatchOnly(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net, self.calls = torch.nn.Conv3d(4, 4, 1), 0

        def forward(self, x):
            if x.shape[2:] != (8, 8, 8):
                return self.net(x)
            self.calls += 1
            return self.net(x)

    data = {"root": str(root), "kind": "volume", "label_map": {4: 3}, "patch": [8, 8, 8],
            "regions": {"wt": [1, 2, 4], "et": [4]}}  # fmt: skip
    whole = SegmentationTask(4, data=data, eval_batch_size=2)
    windowed = SegmentationTask(4, data={**data, "sliding_window": True}, eval_batch_size=2)
    val = whole.build_dataset("val", "test")
    model = PatchOnly()
    got = windowed.evaluate(model, val)
    count = 1
    for n in SHAPE[1:]:
        count *= len(window_starts(n, 8, 0.25))
    assert model.calls == count  # one batch of the 2 cases, one call per window
    model.calls = 0
    assert got == pytest.approx(whole.evaluate(model, val), nan_ok=True)
    assert model.calls == 0 and got["cases"] == 2


def test_one_channel_volumes_set_in_channels_from_the_data(tmp_path, capsys):
    """1-channel volumes with the shipped 4-modality config: ``in_channels`` comes from the data
    (recorded in the checkpoint, which rebuilds the 1-channel network); an explicit count the
    data contradicts is one line naming the key."""
    from nlnet.cli import main

    one = helpers.volume_tree(tmp_path / "one", shape=(1, 10, 16, 18), splits=("train", "val"))
    out = tmp_path / "run"
    torch.manual_seed(0)
    assert main(["train", "--config", "dense/unet3d_nl", *_over(one, out)]) == 0
    info = checkpoint_info(out / "checkpoints" / "final.pt")
    assert info.model_options["in_channels"] == 1
    assert load_model(out / "checkpoints" / "final.pt")(torch.randn(1, 1, 8, 8, 8)).shape[1] == 4
    capsys.readouterr()
    bad = [
        *_over(one, tmp_path / "bad"),
        "model.overrides={base_channels: 4, depth: 2, in_channels: 4}",
    ]
    assert main(["train", "--config", "dense/unet3d_nl", *bad]) == 2
    err = capsys.readouterr().err
    assert "model.overrides.in_channels=4 but the training data has 1 channel(s)" in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_first_run_volume_config_takes_channels_and_classes_from_the_data(tmp_path, capsys):
    """``smoke/volumes_tiny`` on 1-channel volumes of labels {0, 2, 4} (a validation case
    with label 5): ``in_channels`` 1 and ``num_classes`` 6 (the largest label + 1) come from the
    data, the labels no mask holds named; no region scores (none defined); a folder of background-only masks is one line."""
    from nlnet.cli import main

    one = helpers.volume_tree(tmp_path / "one", shape=(1, 10, 16, 18), splits=("train", "val"))
    val_mask = one / "val" / "masks" / "case0.npy"
    m = np.load(val_mask)
    m[1, 1, 1] = 5
    np.save(val_mask, m)
    out = tmp_path / "run"
    over = [f"data.root={one}", "data.patch=[8,8,8]", "optim.epochs=0", "optim.max_iters=2",
            "train.progress=false", "--output-dir", str(out)]  # fmt: skip
    assert main(["train", "--config", "smoke/volumes_tiny", *over]) == 0
    # labels 1 and 3 are in no mask: outputs trained on no example, named in a warning
    assert "no mask holds label(s) 1, 3;" in capsys.readouterr().out
    info = checkpoint_info(out / "checkpoints" / "final.pt")
    assert info.model_options["in_channels"] == 1 and info.num_classes == 6
    val = json.loads((out / "summary.json").read_text())["val"]
    assert "mIoU" in val and not any(k.startswith("dice_et") for k in val)
    masks = tmp_path / "masks"  # the user's next step: the trained checkpoint on new cases
    argv = ["predict", str(one / "val" / "images"), "--checkpoint",
            str(out / "checkpoints" / "final.pt"), "--output-dir", str(masks)]  # fmt: skip
    assert main(argv) == 0
    assert np.load(masks / "case0_mask.npy").shape == (10, 16, 18)
    assert (masks / "case1_overlay.png").is_file()
    empty = helpers.volume_tree(tmp_path / "bg", shape=(1, 10, 16, 18), splits=("train",))
    for p in (empty / "train" / "masks").glob("*.npy"):
        np.save(p, np.zeros_like(np.load(p)))
    capsys.readouterr()
    over[0], over[-1] = f"data.root={empty}", str(tmp_path / "bg_run")
    assert main(["train", "--config", "smoke/volumes_tiny", *over]) == 2
    assert "the training masks hold label 0 only" in capsys.readouterr().err
