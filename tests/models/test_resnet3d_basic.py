"""``ResNet3d(residual="basic")``: torchvision's ``r3d_18`` rebuilt, equal outputs with its weights
copied (an independent implementation of the same network), and the basic block's own checks."""

from __future__ import annotations

import pytest
import torch

from nlnet.models import ResNet3d
from nlnet.models.video.resnet3d import BasicBlock3d
from nlnet.models.video.torchvision_r3d import (
    R3D_18_LAYERS,
    R3D_18_OPTIONS,
    r3d_state_from_torchvision,
)

R3D_18 = R3D_18_OPTIONS


def r3d_pair(num_classes: int = 5) -> tuple[torch.nn.Module, torch.nn.Module]:
    from torchvision.models.video import r3d_18

    torch.manual_seed(0)
    theirs = r3d_18(num_classes=num_classes).double()
    for m in theirs.modules():  # non-trivial BN statistics, so that eval mode tests them
        if isinstance(m, torch.nn.BatchNorm3d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    ours = ResNet3d(R3D_18_LAYERS, num_classes, **R3D_18).double()
    ours.load_state_dict(r3d_state_from_torchvision(theirs.state_dict()))  # every key, strict
    return ours, theirs


def test_basic_block_resnet3d_is_torchvisions_r3d_18():
    """Evaluation mode (running statistics), then training mode (batch statistics) and the
    gradients, on one pair."""
    ours, theirs = r3d_pair()
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    x = torch.randn(2, 3, 4, 16, 16, dtype=torch.float64)
    for training in (False, True):
        ours.train(training), theirs.train(training)
        out_ours, out_theirs = ours(x), theirs(x)
        torch.testing.assert_close(out_ours, out_theirs, rtol=1e-9, atol=1e-9)
    out_ours.square().sum().backward(), out_theirs.square().sum().backward()
    torch.testing.assert_close(ours.layer3[0].conv1.weight.grad,
                               theirs.layer3[0].conv1[0].weight.grad)  # fmt: skip


def test_basic_block_shapes_features_and_a_non_local_block():
    model = ResNet3d((1, 1, 1, 1), 3, width=4, placement={"res4": [0]}, **R3D_18)
    assert isinstance(model.layer1[0], BasicBlock3d) and model.num_features == 32
    feats = model.forward_intermediates(torch.randn(1, 3, 8, 32, 32), intermediates_only=True)
    # no stem pooling: res2 at stride 2; time halved in res3..res5
    assert [tuple(f.shape[1:]) for f in feats] == [
        (4, 8, 16, 16), (4, 8, 16, 16), (8, 4, 8, 8), (16, 2, 4, 4), (32, 1, 2, 2)]  # fmt: skip
    assert [i["reduction"] for i in model.feature_info] == [2, 2, 4, 8, 16]
    assert model.layer3[0].non_local is not None and model.layer2[0].non_local is None
    model.eval()  # the block starts as the identity (Sec. 4.1): the same output without it
    x = torch.randn(1, 3, 8, 32, 32)
    with torch.no_grad():
        out = model(x)
        model.layer3[0].non_local = None
        torch.testing.assert_close(model(x), out)


@pytest.mark.parametrize(
    "kwargs,message",
    [({"residual": "wide"}, "residual: expected one of"),
     ({"stage_temporal_strides": (1, 2, 2)}, "stage_temporal_strides: expected 4"),
     ({"pooling": "none", "temporal_strides": (1, 2, 1)}, "pooling: 'none' has no pool1")],
)  # fmt: skip
def test_basic_block_options_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ResNet3d((1, 1, 1, 1), 3, width=4, **kwargs)
