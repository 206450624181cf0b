"""ImageNet initialisation by torchvision weights name, enum or path, offline.

The state dicts are written by the tests under ``$TORCH_HOME/hub/checkpoints/`` with the file
name torchvision derives from the weights' url, so torchvision's real loader
(``weights.get_state_dict``) runs and finds them without any network access.
"""

from __future__ import annotations

import os
import urllib.error

import pytest
import torch
from torchvision.models import ResNet50_Weights, ResNet101_Weights

from nlnet.models.registry import create_model
from nlnet.models.video.resnet3d import ResNet3d
from nlnet.models.weights import (
    WeightsUnavailableError,
    hub_cache_path,
    load_weights,
    resolve_weights,
)


@pytest.fixture()
def torch_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)  # in case someone called set_dir
    return tmp_path / "torch"


def _cache_file(torch_home, weights) -> str:
    """Where torchvision looks: <TORCH_HOME>/hub/checkpoints/<last part of the url>."""
    path = torch_home / "hub" / "checkpoints" / weights.url.rsplit("/", 1)[-1]
    path.parent.mkdir(parents=True, exist_ok=True)
    return str(path)


def _narrow_2d_state_dict(seed: int) -> dict:
    """A ResNet-50-layout 2D state dict (torchvision keys), narrow (width 4) to stay fast."""
    torch.manual_seed(seed)
    sd = ResNet3d(width=4, num_classes=1000).state_dict()
    return {k: v.squeeze(2) if v.dim() == 5 else v for k, v in sd.items()}


def test_names_and_enums_resolve_to_torchvision_weights():
    assert resolve_weights("IMAGENET1K_V1", "resnet50") is ResNet50_Weights.IMAGENET1K_V1
    assert resolve_weights("IMAGENET1K_V2", "resnet101") is ResNet101_Weights.IMAGENET1K_V2
    assert resolve_weights("DEFAULT", "resnet50") is ResNet50_Weights.DEFAULT
    assert resolve_weights("ResNet50_Weights.IMAGENET1K_V2") is ResNet50_Weights.IMAGENET1K_V2
    assert resolve_weights(ResNet50_Weights.IMAGENET1K_V1, "resnet50") is (
        ResNet50_Weights.IMAGENET1K_V1
    )
    with pytest.raises(ValueError, match="another architecture"):
        resolve_weights(ResNet50_Weights.IMAGENET1K_V1, "resnet101")
    with pytest.raises(ValueError, match="IMAGENET1K_V1, IMAGENET1K_V2"):
        resolve_weights("IMAGENET1K_V9", "resnet50")
    with pytest.raises(ValueError, match="needs the architecture"):
        resolve_weights("IMAGENET1K_V1")
    with pytest.raises(ValueError, match="no such file"):
        resolve_weights("/nonexistent/r50.pth")
    with pytest.raises(TypeError, match="expected a state dict"):
        resolve_weights(3.5)


def test_path_and_mapping_resolve(tmp_path):
    sd = {"conv1.weight": torch.ones(2)}
    assert resolve_weights(sd) is sd
    torch.save(sd, tmp_path / "w.pth")
    for spec in (tmp_path / "w.pth", str(tmp_path / "w.pth")):
        torch.testing.assert_close(load_weights(spec)["conv1.weight"], torch.ones(2))


def test_hub_cache_path_follows_torch_home(torch_home):
    w = ResNet50_Weights.IMAGENET1K_V1
    assert str(hub_cache_path(w)) == _cache_file(torch_home, w)


@pytest.mark.parametrize(
    "spec",
    ["IMAGENET1K_V1", "ResNet50_Weights.IMAGENET1K_V2", ResNet50_Weights.IMAGENET1K_V2],
    ids=["name", "qualified-name", "enum"],
)
def test_create_model_inflates_cached_torchvision_weights(torch_home, spec):
    weights = resolve_weights(spec, "resnet50")
    sd2d = _narrow_2d_state_dict(seed=3)
    torch.save(sd2d, _cache_file(torch_home, weights))
    model = create_model("i3d311_r50_nl5", num_classes=5, width=4, pretrained_2d=spec)
    got = model.state_dict()
    torch.testing.assert_close(got["bn1.running_var"], sd2d["bn1.running_var"])
    # conv1 inflated to 5x7x7: planes sum to the 2D kernel (Section 4)
    torch.testing.assert_close(got["conv1.weight"].sum(2), sd2d["conv1.weight"])
    # an I3D 3x1x1 block: its first kernel inflated, the 3x3 copied
    torch.testing.assert_close(got["layer1.0.conv1.weight"].sum(2), sd2d["layer1.0.conv1.weight"])
    torch.testing.assert_close(got["layer1.0.conv2.weight"][:, :, 0], sd2d["layer1.0.conv2.weight"])
    assert model.fc.out_features == 5  # 1000-way ImageNet head not used


def test_missing_file_without_network_is_one_line_saying_where(torch_home, monkeypatch):
    def no_network(url, dst, *args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)
    w = ResNet50_Weights.IMAGENET1K_V1
    with pytest.raises(WeightsUnavailableError) as err:
        load_weights("IMAGENET1K_V1", "resnet50", what="pretrained_2d")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("pretrained_2d:")
    assert w.url in msg and _cache_file(torch_home, w) in msg
    assert not os.path.exists(_cache_file(torch_home, w))


def test_pretrained_true_is_a_clear_error_not_a_type_error():
    with pytest.raises(ValueError, match="weights='IMAGENET1K_V1'.*model.init"):
        create_model("c2d_r50", pretrained=True)
    with pytest.raises(ValueError, match="import-caffe2"):
        create_model("i3d311_r101_nl5", pretrained="kinetics")


def test_weights_of_another_depth_are_refused_by_create_model():
    with pytest.raises(ValueError, match="ResNet101_Weights"):
        create_model("c2d_r101", width=4, pretrained_2d=ResNet50_Weights.IMAGENET1K_V1)


def test_a_detector_takes_a_resnet_file_as_its_backbone_and_its_own_file_whole(tmp_path):
    """``weights=`` (a config's ``model.init``) of a detector: a ResNet state-dict file goes
    into the backbone (with frozen BN, as a torchvision name does); the detector's own
    state dict loads whole."""
    from torchvision.models import resnet50

    from nlnet.models.registry import create_model

    small = {"width_per_group": 4, "min_size": 64, "max_size": 64}
    torch.manual_seed(0)
    resnet = resnet50(width_per_group=4)
    torch.save(resnet.state_dict(), tmp_path / "r50.pth")
    det = create_model("maskrcnn_r50_fpn_nl", num_classes=3, weights=str(tmp_path / "r50.pth"),
                       **small)  # fmt: skip
    assert torch.equal(det.backbone.body.conv1.weight, resnet.conv1.weight)
    torch.save(det.state_dict(), tmp_path / "det.pth")
    again = create_model(
        "maskrcnn_r50_fpn_nl",
        num_classes=3,
        weights=str(tmp_path / "det.pth"),
        frozen_bn=True,
        **small,
    )  # fmt: skip  (as the COCO configs rebuild it)
    for (k, a), (_, b) in zip(det.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), k
