"""A U-Net trained with deep supervision (``model.overrides.deep_supervision=true``) the way a
user runs it: ``nlnet train`` from a shipped config -> checkpoint -> ``eval``, ``visualize``,
``cost`` and ``export`` of that checkpoint, each working on the plain logits."""

from __future__ import annotations

import json
from pathlib import Path

import torch


def test_deep_supervision_unet_from_config_to_every_command(tmp_path, capsys):
    from nlnet.cli import main
    from nlnet.data.digits.dense import DenseDigitsConfig, prepare_dense_digits
    from nlnet.engine.checkpoint import load_checkpoint

    root = prepare_dense_digits(
        DenseDigitsConfig(size=64, num_train=4, num_val=2, num_test=2, seed=5), tmp_path / "d"
    )
    out = tmp_path / "run"
    argv = ["train", "--config", "dense/unet2d_nl", f"data.root={root}", "model.num_classes=4",
            "class_names=[background,cue,match,other]", "data.mean=[0.5,0.5,0.5]",
            "model.overrides={base_channels: 4, depth: 2, deep_supervision: true}",
            "optim.epochs=1", "train.batch_size=2", "train.workers=0", "train.progress=false",
            "train.device=cpu", "eval.batch_size=2", "eval.workers=0", "eval.split=test",
            f"output_dir={out}"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    ckpt = out / "checkpoints" / "final.pt"
    state = load_checkpoint(ckpt)["model"]
    assert "aux_classifier.weight" in state  # the auxiliary head was trained and is kept
    capsys.readouterr()

    assert main(["eval", "--checkpoint", str(ckpt)]) == 0
    text = capsys.readouterr().out
    report = json.loads(text[("\n" + text).rindex("\n{") :])
    assert 0 <= report["mIoU"] <= 100 and "dice_match" in report

    image = next((Path(root) / "test" / "images").glob("*.png"))
    assert main(["visualize", "--checkpoint", str(ckpt), "--video", str(image),
                 "--output", str(tmp_path / "vis")]) == 0  # fmt: skip
    assert list((tmp_path / "vis").glob("*.png"))
    assert main(["cost", "--checkpoint", str(ckpt)]) == 0
    assert "non_local" in capsys.readouterr().out

    exported = tmp_path / "model.pt2"
    assert main(["export", "--checkpoint", str(ckpt), "--format", "exported",
                 "--output", str(exported)]) == 0  # fmt: skip
    program = torch.export.load(str(exported))
    logits = program.module()(torch.zeros(1, 3, 256, 256))  # the model's default input size
    assert torch.is_tensor(logits) and logits.shape == (1, 4, 256, 256)  # the plain logits
