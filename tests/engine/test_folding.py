"""``train.fold_frozen_bn``: frozen BatchNorm computed inside the convolution before it; the same
forward and gradients as the unfolded model, the same state dict, the same training numbers."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from engine_standins import TinyClipDataset, TinyVideoNet, collate_standin, tiny_run_config

from nlnet.engine.config import ConfigError, load_config
from nlnet.engine.folding import fold_frozen_batchnorm
from nlnet.engine.loop import train
from nlnet.engine.modeling import freeze_batchnorm
from nlnet.models import ResNet3d


def _frozen_resnet() -> torch.nn.Module:
    torch.manual_seed(0)
    model = ResNet3d((1, 1, 1, 1), 5, width=4, dropout=0.0, placement="res4").double()
    for m in model.modules():  # statistics and affine maps that are not the identity
        if isinstance(m, torch.nn.BatchNorm3d):
            m.running_mean.uniform_(-0.1, 0.1), m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5), m.bias.data.uniform_(-0.1, 0.1)
    model.train()
    with pytest.warns(RuntimeWarning, match="inside non-local blocks stay trainable"):
        freeze_batchnorm(model)
    return model


def test_folding_keeps_forward_gradients_and_state_dict():
    plain = _frozen_resnet()
    folded = copy.deepcopy(plain)
    bns = [m for m in plain.modules() if isinstance(m, torch.nn.BatchNorm3d)]
    # every BN but the trainable one of the fresh non-local block (it must learn, Sec. 4.1)
    assert fold_frozen_batchnorm(folded) == len(bns) - 1
    assert type(folded.layer1[0].conv1).__name__ == "FoldedConv3d"
    assert type(folded.layer3[0].non_local.norm) is torch.nn.BatchNorm3d  # trainable: kept
    x = torch.randn(2, 3, 4, 32, 32, dtype=torch.float64)
    out_plain, out_folded = plain(x), folded(x)
    torch.testing.assert_close(out_folded, out_plain, rtol=1e-10, atol=1e-12)
    out_plain.square().sum().backward(), out_folded.square().sum().backward()
    for (name, p), q in zip(plain.named_parameters(), folded.parameters()):
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-8, atol=1e-12, msg=name)
    assert list(folded.state_dict()) == list(plain.state_dict())
    folded.train()  # a folded BN stays in eval mode (its statistics are fixed)
    assert not folded.layer1[0].bn1.training
    twin = copy.deepcopy(folded)  # a copy (EMA, SWA) folds its own BN, not the original's
    assert twin.layer1[0].conv1.folded_bn is twin.layer1[0].bn1


def test_only_a_frozen_bn_that_is_its_convolutions_only_user_folds():
    class TwoUsers(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.bn = torch.nn.BatchNorm2d(4)
            self.conv2 = torch.nn.Conv2d(4, 4, 1)
            self.bn2 = torch.nn.BatchNorm2d(4)  # trained: not frozen

        def forward(self, x):
            y = self.conv(x)
            return self.bn(y) + y + self.bn2(self.conv2(y))

    model = TwoUsers().train()
    freeze_batchnorm(model.bn)
    assert fold_frozen_batchnorm(model) == 0

    class CalledTwice(torch.nn.Module):  # one conv and BN pair applied at two sites
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.BatchNorm2d(4)

        def forward(self, x):
            return self.bn(self.conv(self.bn(self.conv(x))))

    twice = CalledTwice()
    freeze_batchnorm(twice)
    assert fold_frozen_batchnorm(twice) == 0


def test_a_model_that_does_not_trace_folds_nothing_with_a_warning():
    class Branchy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)

        def forward(self, x):
            return self.bn(self.conv(x)) if x.sum() > 0 else x  # data-dependent control flow

    model = Branchy()
    freeze_batchnorm(model)
    with pytest.warns(RuntimeWarning, match="does not trace with torch.fx"):
        assert fold_frozen_batchnorm(model) == 0


def _run(tmp_path, name: str, **over):
    torch.manual_seed(0)
    model = TinyVideoNet(num_classes=3)
    cfg = tiny_run_config(tmp_path, name, **{"optim.max_iters": 3, "train.freeze_bn": True, **over})
    summary = train(cfg, model=model, train_dataset=TinyClipDataset(n=8, size=(4, 32, 32)),
                    collate_fn=collate_standin)  # fmt: skip
    return model, summary


def test_fine_tuning_with_folded_bn_trains_the_same_numbers(tmp_path):
    plain, s0 = _run(tmp_path, "plain")
    folded, s1 = _run(tmp_path, "folded", **{"train.fold_frozen_bn": True})
    assert any(type(m).__name__.startswith("Folded") for m in folded.modules())
    assert s1["train_loss"] == pytest.approx(s0["train_loss"], rel=1e-5)
    for (name, a), (_, b) in zip(plain.state_dict().items(), folded.state_dict().items()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6, msg=name)
    with pytest.raises(ConfigError, match="train.fold_frozen_bn: .* set train.freeze_bn"):
        load_config(None, ["train.fold_frozen_bn=true"])


@pytest.mark.parametrize(
    "name,shape",
    [("c2d_tiny_nl1", (1, 3, 4, 32, 32)), ("seg_tiny_nl", (1, 3, 32, 32)),
     ("unet2d_nl", (1, 3, 32, 32)), ("r3d_18", (1, 3, 4, 16, 16))],
)  # fmt: skip
def test_folding_on_other_families_gives_the_same_output(name, shape):
    """2D and 3D, blocks inserted after construction or built in, a U-Net's skip paths."""
    from nlnet.models import create_model, get_model_entry

    torch.manual_seed(0)
    narrow = dict(get_model_entry(name).default_cfg.get("test_overrides", {}))
    model = create_model(name, **narrow).double().train()
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.running_var.uniform_(0.5, 1.5)
    with warnings.catch_warnings():  # the blocks' own norms stay trainable (r3d_18 has none)
        warnings.simplefilter("ignore", RuntimeWarning)
        freeze_batchnorm(model)
    folded = copy.deepcopy(model)
    assert fold_frozen_batchnorm(folded) > 0
    x = torch.randn(*shape, dtype=torch.float64)
    torch.manual_seed(5)  # the same dropout masks
    expected = model(x)
    torch.manual_seed(5)
    got = folded(x)
    if isinstance(expected, dict):  # a U-Net with deep supervision: its main output
        expected, got = expected["out"], got["out"]
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
