"""A pre-trained U-Net's encoder kept fixed (``train.freeze``) the way a user runs it: ``nlnet
train`` of ``dense/unet2d`` -> its checkpoint initialises ``dense/unet2d_nl`` (``model.init``)
with ``train.freeze=[encoder., bottleneck.]`` -> the encoder is the pre-trained one bit for bit,
the new block and the decoder trained -> ``eval`` and ``cost`` of that checkpoint; a prefix that
names nothing is one line and exit 2."""

from __future__ import annotations

import torch


def test_frozen_pretrained_encoder_from_config_to_eval(tmp_path, capsys):
    from nlnet.cli import main
    from nlnet.data.digits.dense import DenseDigitsConfig, prepare_dense_digits
    from nlnet.engine.checkpoint import load_checkpoint

    root = prepare_dense_digits(
        DenseDigitsConfig(size=64, num_train=4, num_val=2, num_test=2, seed=5), tmp_path / "d"
    )
    common = [f"data.root={root}", "model.num_classes=4", "class_names=[background,cue,match,other]",
              "data.mean=[0.5,0.5,0.5]", "model.overrides={base_channels: 4, depth: 2}",
              "optim.epochs=1", "train.batch_size=2", "train.workers=0", "train.progress=false",
              "train.device=cpu", "eval.batch_size=2", "eval.workers=0", "eval.split=test"]  # fmt: skip
    assert (
        main(["train", "--config", "dense/unet2d", *common, f"output_dir={tmp_path / 'pre'}"]) == 0
    )
    pre = tmp_path / "pre" / "checkpoints" / "final.pt"
    frozen = [
        "train.freeze=[encoder., bottleneck.]",
        f"model.init={{from: {pre}, reset_head: true}}",
        "model.head_names=[classifier, bottleneck.non_local]",  # the new block starts fresh
    ]
    out = tmp_path / "nl"
    argv = ["train", "--config", "dense/unet2d_nl", *common, *frozen, f"output_dir={out}"]
    assert main(argv) == 0, capsys.readouterr().err
    before = load_checkpoint(pre)["model"]
    after = load_checkpoint(out / "checkpoints" / "final.pt")["model"]
    encoder = [k for k, v in before.items() if k.startswith(("encoder.", "bottleneck."))
               and v.is_floating_point() and "running" not in k]  # fmt: skip
    assert encoder and all(torch.equal(after[k], before[k]) for k in encoder)
    assert not torch.equal(after["decoder.0.0.weight"], before["decoder.0.0.weight"])
    assert after["bottleneck.non_local.norm.weight"].abs().max() > 0  # the new block learned
    capsys.readouterr()

    ckpt = str(out / "checkpoints" / "final.pt")
    assert main(["eval", "--checkpoint", ckpt]) == 0
    assert '"mIoU"' in capsys.readouterr().out
    assert main(["cost", "--checkpoint", ckpt]) == 0
    assert "non_local" in capsys.readouterr().out

    bad = ["train", "--config", "dense/unet2d_nl", *common, "train.freeze=[encoders.]",
           f"output_dir={tmp_path / 'bad'}"]  # fmt: skip
    assert main(bad) == 2
    err = capsys.readouterr().err
    assert "train.freeze: ['encoders.'] name no parameter" in err and err.count("\n") == 1
