"""Dense models: identity at insertion (equal to the plain torchvision model), placements, cost."""

from __future__ import annotations

import pytest
import torch
import torchvision

from nlnet.analysis.detection_cost import detector_cost
from nlnet.models import create_model
from nlnet.models.detection import KEYPOINT_HEAD_PATHS
from nlnet.models.segmentation import receptive_field
from nlnet.models.surgery import non_local_blocks

SMALL = {"width_per_group": 4, "min_size": 64, "max_size": 64}


def _randomise_bn(model: torch.nn.Module, seed: int = 0) -> None:
    """Non-trivial BN statistics so that eval mode is not a near-identity everywhere."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d) and m.num_features:
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)


def _calibrate_bn(detector: torch.nn.Module) -> None:
    """Backbone BN statistics of real activations (one cumulative pass), so that a deep random
    backbone keeps finite features in eval mode and the RPN proposes boxes."""
    for m in detector.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = None
    detector.backbone.train()
    with torch.no_grad():
        detector.backbone(torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(1)))
    detector.eval()


def _plain_into_ours(plain: torch.nn.Module, ours: torch.nn.Module) -> None:
    missing, unexpected = ours.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected
    assert missing and all(".non_local." in k for k in missing)


@pytest.mark.parametrize(
    "plain_name, nl_name, overrides, size",
    [
        ("seg_tiny", "seg_tiny_nl", {}, 48),
        ("seg_r50", "seg_r50_nl", {"width_per_group": 4, "mid_channels": 16}, 64),
    ],
)
def test_segmentation_identity_at_insertion(plain_name, nl_name, overrides, size):
    torch.manual_seed(0)
    plain = create_model(plain_name, **overrides)
    _randomise_bn(plain)
    ours = create_model(nl_name, **overrides)
    _plain_into_ours(plain, ours)
    plain.eval(), ours.eval()
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        out = ours(x)
        assert out.shape == (2, plain.head.classifier.out_channels, size, size)  # input size
        assert torch.equal(out, plain(x))
    assert [n for n, _ in non_local_blocks(ours)] == ["head.non_local"]


def _detections_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert torch.equal(x[k], y[k]), k


def test_mask_rcnn_identity_at_insertion():
    torch.manual_seed(0)
    plain = create_model("maskrcnn_r50_fpn", num_classes=4, **SMALL)
    _calibrate_bn(plain)
    # a low threshold so that the untrained detector returns boxes and masks to compare
    plain.roi_heads.score_thresh = ours_thresh = 0.0
    ours = create_model("maskrcnn_r50_fpn_nl", num_classes=4, **SMALL)
    ours.roi_heads.score_thresh = ours_thresh
    _plain_into_ours(plain, ours)
    plain.eval(), ours.eval()
    images = [torch.rand(3, 64, 64), torch.rand(3, 56, 64)]
    with torch.no_grad():
        out_plain, out_ours = plain(images), ours(images)
    assert sum(len(o["boxes"]) for o in out_plain) > 0
    assert out_plain[0]["masks"].shape[1:] == (1, 64, 64)
    _detections_equal(out_plain, out_ours)
    assert [n for n, _ in non_local_blocks(ours)] == ["backbone.body.layer3.4.non_local"]


def test_keypoint_rcnn_identity_at_insertion():
    torch.manual_seed(0)
    plain = create_model("keypointrcnn_r101_fpn", num_keypoints=5, **SMALL)
    _calibrate_bn(plain)
    ours = create_model("keypointrcnn_r101_fpn_nlhead_nl1", num_keypoints=5, **SMALL)
    _plain_into_ours(plain, ours)
    plain.eval(), ours.eval()
    images = [torch.rand(3, 64, 64)]
    rois = torch.randn(6, 256, 14, 14)  # RoI features as the keypoint head receives them
    with torch.no_grad():
        _detections_equal(plain(images), ours(images))
        for a, b in zip(
            plain.backbone(images[0][None]).values(), ours.backbone(images[0][None]).values()
        ):
            assert torch.equal(a, b)
        head_plain = plain.roi_heads.keypoint_head(rois)
        head_ours = ours.roi_heads.keypoint_head(rois)
        assert torch.equal(head_plain, head_ours) and head_ours.shape == (6, 512, 14, 14)
        # torchvision runs the head on zero RoIs when nothing is detected
        assert ours.roi_heads.keypoint_head(rois[:0]).shape == (0, 512, 14, 14)
    names = [n.removesuffix(".non_local") for n, _ in non_local_blocks(ours)]
    assert names == ["backbone.body.layer3.21", *KEYPOINT_HEAD_PATHS]
    heads = [b for n, b in non_local_blocks(ours) if "keypoint_head" in n]
    assert {b.in_channels for b in heads} == {512}
    # the blocks act: with a non-zero BN scale the head's output changes
    for b in heads:
        torch.nn.init.ones_(b.norm.weight)
    with torch.no_grad():
        assert not torch.equal(ours.roi_heads.keypoint_head(rois), head_plain)


def test_default_detectors_are_torchvisions():
    """Same parameter names and shapes as torchvision's own R50 builders (on meta)."""
    tv = torchvision.models.detection
    with torch.device("meta"):
        pairs = [
            (tv.maskrcnn_resnet50_fpn(weights=None, weights_backbone=None), "maskrcnn_r50_fpn"),
            (tv.keypointrcnn_resnet50_fpn(weights=None, weights_backbone=None), None),
        ]
        ours = create_model("maskrcnn_r50_fpn")
        kp = create_model("keypointrcnn_r101_fpn")
    shapes = {k: v.shape for k, v in pairs[0][0].state_dict().items()}
    assert shapes == {k: v.shape for k, v in ours.state_dict().items()}
    # the keypoint model differs from torchvision's R50 one only by the deeper res4 (R101)
    kp_tv = {k for k in pairs[1][0].state_dict() if ".layer3." not in k}
    assert kp_tv == {k for k in kp.state_dict() if ".layer3." not in k}


def test_training_mode_returns_losses():
    torch.manual_seed(0)
    model = create_model("maskrcnn_r50_fpn_nl", num_classes=3, **SMALL)
    target = {
        "boxes": torch.tensor([[4.0, 6.0, 30.0, 40.0]]),
        "labels": torch.tensor([1]),
        "masks": torch.zeros(1, 64, 64, dtype=torch.uint8),
    }
    target["masks"][0, 6:40, 4:30] = 1
    losses = model([torch.rand(3, 64, 64)], [target])
    assert {"loss_classifier", "loss_box_reg", "loss_mask", "loss_objectness"} <= set(losses)
    sum(losses.values()).backward()
    block = dict(non_local_blocks(model))["backbone.body.layer3.4.non_local"]
    assert block.norm.weight.grad is not None


def test_block_costs_under_five_percent():
    """Section 6: one block adds < 5% computation to Mask R-CNN (R50 and R101, 800x1333)."""
    for depth in (50, 101):
        base = detector_cost(f"maskrcnn_r{depth}_fpn")
        nl = detector_cost(f"maskrcnn_r{depth}_fpn_nl")
        assert base["non_local"] == 0 and nl["non_local"] > 0
        extra = nl["total"] - base["total"]
        assert extra == nl["non_local"]
        assert 0.01 < extra / base["total"] < 0.05
        for part in ("rpn", "box_head", "mask_head"):
            assert nl[part] == base[part]


def test_tiny_segmentation_receptive_field():
    """The demo's premise: the tiny backbone sees 37 pixels, the head's conv widens it to 45."""
    model = create_model("seg_tiny")
    assert receptive_field(model.backbone) == 37
    assert receptive_field(model) == 45


def test_nlnet_cost_prints_detector_figures_next_to_the_paper(capsys):
    import argparse

    from nlnet.commands import cost

    parser = argparse.ArgumentParser()
    cost.configure_parser(parser)
    assert (
        cost.main(parser.parse_args(["keypointrcnn_r101_fpn_nlhead", "--input", "800x1333"])) == 0
    )
    out = capsys.readouterr().out
    assert "keypoint_head" in out and "paper Table 6: AP keypoints 66.0" in out
    assert "to keypointrcnn_r101_fpn" in out


def test_tiny_mask_rcnn_identity_at_insertion_and_placement():
    """maskrcnn_tiny_nl = maskrcnn_tiny + one block right before the last residual block of res4
    (Table 5's placement), the identity at insertion; the block acts once its BN scale moves."""
    torch.manual_seed(0)
    plain = create_model("maskrcnn_tiny")
    _calibrate_bn(plain)
    plain.roi_heads.score_thresh = 0.0
    ours = create_model("maskrcnn_tiny_nl")
    ours.roi_heads.score_thresh = 0.0
    _plain_into_ours(plain, ours)
    ((path, block),) = non_local_blocks(ours)
    assert path == f"backbone.body.layer3.{len(ours.backbone.body.layer3) - 2}.non_local"
    plain.eval(), ours.eval()
    images = [torch.rand(3, 64, 64), torch.rand(3, 64, 64)]
    with torch.no_grad():
        out_plain = plain(images)
        _detections_equal(out_plain, ours(images))
        assert sum(len(o["boxes"]) for o in out_plain) > 0
        torch.nn.init.ones_(block.norm.weight)
        feats_plain = plain.backbone(images[0][None])
        feats_ours = ours.backbone(images[0][None])
    assert not torch.equal(feats_plain["2"], feats_ours["2"])  # res4 output (stride 8) changed
    # small enough for CPU tests: a fraction of the narrow R50 detector
    assert sum(p.numel() for p in ours.parameters()) < 1_000_000
    with pytest.raises(ValueError, match="layers"):
        create_model("maskrcnn_tiny_nl", layers=(1, 1, 1, 1))


def test_imagenet_backbone_is_torchvisions_pretrained_backbone(tmp_path, monkeypatch):
    """Sec. 6 fine-tunes from ImageNet: ``pretrained_2d`` builds what torchvision's
    ``maskrcnn_resnet50_fpn(weights_backbone=...)`` builds (same weights, frozen BN, 3 trainable
    stages), from the offline hub cache; the inserted block stays the identity."""
    from nlnet.models.weights import hub_cache_path

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    weights = torchvision.models.ResNet50_Weights.IMAGENET1K_V1
    torch.manual_seed(3)
    imagenet = torchvision.models.resnet50()
    _randomise_bn(imagenet)
    hub_cache_path(weights).parent.mkdir(parents=True)
    torch.save(imagenet.state_dict(), hub_cache_path(weights))
    small = {"num_classes": 4, "min_size": 64, "max_size": 64}
    tv = torchvision.models.detection.maskrcnn_resnet50_fpn(weights_backbone=weights, **small)
    ours = create_model("maskrcnn_r50_fpn_nl", pretrained_2d="IMAGENET1K_V1", **small)
    body = ours.backbone.body
    assert torch.equal(body.conv1.weight, imagenet.conv1.weight)
    assert torch.equal(body.layer4[2].bn3.running_var, imagenet.layer4[2].bn3.running_var)
    assert isinstance(body.bn1, torchvision.ops.FrozenBatchNorm2d)
    trainable = {n for n, p in ours.named_parameters() if p.requires_grad}
    assert {n for n, p in tv.named_parameters() if p.requires_grad} <= trainable
    assert not any(n.startswith(("backbone.body.conv1", "backbone.body.layer1")) for n in trainable)
    assert "backbone.body.layer3.4.non_local.theta.weight" in trainable
    _plain_into_ours(tv, ours)  # torchvision's heads (random) into ours; backbones already equal
    tv.eval(), ours.eval()
    tv.roi_heads.score_thresh = ours.roi_heads.score_thresh = 0.0
    images = [torch.rand(3, 64, 64)]
    with torch.no_grad():
        _detections_equal(tv(images), ours(images))
    with pytest.raises(ValueError, match="weights_backbone: not resnet50 weights"):
        create_model("maskrcnn_r50_fpn", pretrained_2d=imagenet.fc.state_dict(), **small)


def test_frozen_bn_option_rebuilds_an_imagenet_initialised_detector():
    """``load_model`` rebuilds from the recorded options without the ImageNet file: with
    ``frozen_bn`` (set by the COCO configs) it is the same model (frozen BN, same outputs)."""
    small = {"num_classes": 4, "min_size": 64, "max_size": 64, "width_per_group": 4}
    torch.manual_seed(0)
    imagenet = torchvision.models.resnet50(width_per_group=4)
    _randomise_bn(imagenet)
    trained = create_model("maskrcnn_r50_fpn_nl", pretrained_2d=imagenet.state_dict(), **small)
    rebuilt = create_model("maskrcnn_r50_fpn_nl", frozen_bn=True, **small)
    rebuilt.load_state_dict(trained.state_dict(), strict=True)
    frozen = torchvision.ops.FrozenBatchNorm2d
    assert isinstance(rebuilt.backbone.body.layer2[0].bn1, frozen)
    # without the option the rebuilt model would train its backbone BN again
    assert not isinstance(create_model("maskrcnn_r50_fpn_nl", **small).backbone.body.bn1, frozen)
    trained.eval(), rebuilt.eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(trained.backbone(x).values(), rebuilt.backbone(x).values()):
            assert torch.equal(a, b)
