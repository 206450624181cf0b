"""``train.subsample_1x1``: a strided 1x1 convolution computed as a subsampling and a 1x1
convolution; the same forward and gradients, the same state dict, the same training numbers."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from engine_standins import TinyClipDataset, collate_standin, tiny_run_config
from torch import nn

from nlnet.engine.folding import fold_frozen_batchnorm
from nlnet.engine.loop import train
from nlnet.engine.modeling import freeze_batchnorm
from nlnet.engine.subsampling import is_strided_pointwise, subsample_strided_pointwise
from nlnet.models import ResNet3d


@pytest.mark.parametrize(
    ("conv", "size"),
    [
        (nn.Conv1d(4, 6, 1, stride=3, bias=True), (7,)),
        (nn.Conv2d(4, 6, 1, stride=(2, 1), groups=2), (7, 5)),
        (nn.Conv3d(4, 6, 1, stride=(1, 2, 2)), (3, 7, 8)),
        (nn.Conv3d(4, 6, (1, 1, 1), stride=2, padding="valid", bias=False), (5, 5, 4)),
    ],
)
def test_a_subsampled_convolution_is_the_strided_one(conv, size):
    torch.manual_seed(0)
    conv = conv.double()
    fast = copy.deepcopy(conv)
    assert subsample_strided_pointwise(fast) == 1
    assert subsample_strided_pointwise(fast) == 0  # once
    assert type(fast).__name__ == f"Subsampled{type(conv).__name__}"
    x = torch.randn(2, 4, *size, dtype=torch.float64, requires_grad=True)
    out, out_fast = conv(x), fast(x)
    assert out_fast.shape == out.shape
    torch.testing.assert_close(out_fast, out, rtol=1e-12, atol=1e-12)
    (g,) = torch.autograd.grad(out.square().sum(), x)
    (g_fast,) = torch.autograd.grad(out_fast.square().sum(), x)
    torch.testing.assert_close(g_fast, g, rtol=1e-12, atol=1e-12)
    assert list(fast.state_dict()) == list(conv.state_dict())


def test_only_strided_pointwise_convolutions_change():
    kept = [nn.Conv3d(4, 4, 3, stride=2), nn.Conv3d(4, 4, 1), nn.Conv2d(4, 4, 1, stride=2, padding=1),
            nn.ConvTranspose2d(4, 4, 1, stride=2), nn.Linear(4, 4)]  # fmt: skip
    assert not any(is_strided_pointwise(m) for m in kept)
    assert subsample_strided_pointwise(nn.Sequential(*kept)) == 0


def test_a_resnets_shortcuts_are_subsampled_with_frozen_bn_folded():
    """The projection shortcuts of res3-res5, after frozen BatchNorm folding too."""
    torch.manual_seed(0)
    plain = ResNet3d((1, 1, 1, 1), 5, width=4, dropout=0.0, placement="res4").double()
    plain.eval()
    with pytest.warns(RuntimeWarning, match="inside non-local blocks stay trainable"):
        freeze_batchnorm(plain)
    fast = copy.deepcopy(plain)
    fold_frozen_batchnorm(fast)
    assert subsample_strided_pointwise(fast) == 3  # res3, res4, res5
    shortcut = fast.layer2[0].downsample[0]
    assert type(shortcut).__name__ == "SubsampledFoldedConv3d"
    x = torch.randn(2, 3, 4, 32, 32, dtype=torch.float64)
    torch.testing.assert_close(fast(x), plain(x), rtol=1e-10, atol=1e-12)
    assert list(fast.state_dict()) == list(plain.state_dict())
    twin = pickle.loads(pickle.dumps(fast))  # torch.save(model): the classes are found by name
    assert type(twin.layer2[0].downsample[0]) is type(shortcut)
    torch.testing.assert_close(twin(x), fast(x), rtol=0, atol=0)


def test_training_with_subsampled_shortcuts_keeps_the_numbers(tmp_path):
    def run(name: str, **over):
        torch.manual_seed(0)
        model = ResNet3d((1, 1, 1, 1), 3, width=4, dropout=0.0, stem_kernel=3, stem_stride=1,
                         pooling="2x2")  # fmt: skip
        cfg = tiny_run_config(tmp_path, name, **{"optim.max_iters": 3, **over})
        summary = train(cfg, model=model, train_dataset=TinyClipDataset(n=8, size=(4, 32, 32)),
                        collate_fn=collate_standin)  # fmt: skip
        return model, summary

    plain, s0 = run("plain")
    fast, s1 = run("fast", **{"train.subsample_1x1": True})
    assert type(fast.layer2[0].downsample[0]).__name__ == "SubsampledConv3d"
    assert s1["train_loss"] == pytest.approx(s0["train_loss"], rel=1e-4)
    for (name, a), (_, b) in zip(plain.state_dict().items(), fast.state_dict().items()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=name)
