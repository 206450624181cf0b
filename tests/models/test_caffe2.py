"""The released Caffe2 ``.pkl`` models: name mapping, layouts, safe unpickling, round trip."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch
from torch import nn

from nlnet.models.caffe2 import (
    Caffe2FormatError,
    caffe2_blob_name,
    export_caffe2,
    import_caffe2,
    read_caffe2_pickle,
)
from nlnet.models.registry import create_model

NAME = "i3d311_r50_nl5"


def _random_model(seed: int, name: str = NAME, num_classes: int = 5) -> nn.Module:
    """A narrow model whose every weight and BN statistic is random (non-local gamma != 0)."""
    torch.manual_seed(seed)
    model = create_model(name, num_classes=num_classes, width=4)
    with torch.no_grad():
        for key, t in model.state_dict().items():
            if key.endswith("num_batches_tracked"):
                continue
            if key.endswith("running_var"):
                t.copy_(torch.rand_like(t) + 0.5)
            else:
                t.copy_(torch.randn_like(t) * 0.2)
    return model.eval()


def _clip(seed: int = 0) -> torch.Tensor:
    return torch.randn(1, 3, 8, 64, 64, generator=torch.Generator().manual_seed(seed))


def test_blob_names_are_the_released_codes():
    """Names as built by resnet_video.py / resnet_helper.py / nonlocal_helper.py."""
    expected = {
        "conv1.weight": "conv1_w",
        "bn1.running_var": "res_conv1_bn_riv",
        "layer1.0.downsample.0.weight": "res2_0_branch1_w",
        "layer1.0.downsample.1.weight": "res2_0_branch1_bn_s",
        "layer2.1.conv1.weight": "res3_1_branch2a_w",
        "layer3.5.bn2.bias": "res4_5_branch2b_bn_b",
        "layer4.2.bn3.running_mean": "res5_2_branch2c_bn_rm",
        "layer2.1.non_local.theta.weight": "nonlocal_conv3_1_theta_w",
        "layer2.3.non_local.phi.bias": "nonlocal_conv3_3_phi_b",
        "layer3.5.non_local.g.weight": "nonlocal_conv4_5_g_w",
        "layer3.1.non_local.W_z.weight": "nonlocal_conv4_1_out_w",
        "layer3.1.non_local.norm.weight": "nonlocal_conv4_1_bn_s",
        "fc.weight": "pred_w",
        "fc.bias": "pred_b",
    }
    for key, blob in expected.items():
        assert caffe2_blob_name(key) == blob, key
    assert caffe2_blob_name("bn1.num_batches_tracked") is None
    # the released nl5 placement (a block after every other residual block) gives these names
    names = set(export_caffe2(_random_model(0))["blobs"])
    nl = sorted({n.rsplit("_", 2)[0] for n in names if n.startswith("nonlocal")})
    assert nl == [f"nonlocal_conv3_{i}" for i in (1, 3)] + [
        f"nonlocal_conv4_{i}" for i in (1, 3, 5)
    ]


def test_export_import_round_trip_gives_identical_outputs(tmp_path):
    src = _random_model(1)
    path = tmp_path / "i3d_nonlocal_32x2_IN_pretrain_400k.pkl"
    export_caffe2(src, path)
    blobs = read_caffe2_pickle(path)
    assert blobs["res3_0_branch2a_w"].shape == (8, 16, 3, 1, 1)  # (O, I, T, H, W), 3x1x1
    dst = _random_model(2)
    report = import_caffe2(dst, path)
    assert not report.kept and not report.unused
    for key, value in src.state_dict().items():
        assert torch.equal(dst.state_dict()[key], value), key
    x = _clip()
    with torch.no_grad():
        assert torch.equal(dst(x), src(x))


def test_released_variants_affine_bn_no_bias_out_bias_conv_pred(tmp_path):
    """USE_AFFINE (no _rm/_riv), NO_BIAS (no theta/phi/g bias), W_z bias, test-net pred_w."""
    src = _random_model(3)
    blobs = dict(export_caffe2(src)["blobs"])
    del blobs["res2_1_branch2b_bn_rm"], blobs["res2_1_branch2b_bn_riv"]
    del blobs["nonlocal_conv3_1_theta_b"]
    out_b = np.random.default_rng(0).standard_normal(blobs["nonlocal_conv3_1_bn_s"].shape)
    blobs["nonlocal_conv3_1_out_b"] = out_b.astype(np.float32)
    blobs["pred_w"] = blobs["pred_w"].reshape(5, -1, 1, 1, 1)
    blobs["res2_0_branch2a_w_momentum"] = np.zeros(1, np.float32)
    blobs["lr"] = np.array(0.01, np.float32)
    blobs["something_else_w"] = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match="unused blobs: something_else_w"):
        import_caffe2(_random_model(4), blobs)  # a weight blob no model key uses: refused
    dst = _random_model(4)
    report = import_caffe2(dst, blobs, strict=False)
    assert not report.complete
    assert report.converted_as("affine_bn") == [
        "layer1.1.bn2.running_mean",
        "layer1.1.bn2.running_var",
    ]
    assert report.converted_as("zero_bias") == ["layer2.1.non_local.theta.bias"]
    assert report.converted_as("folded") == ["layer2.1.non_local.norm.running_mean"]
    assert report.converted_as("reshaped") == ["fc.weight"]
    assert report.training_state == ["lr", "res2_0_branch2a_w_momentum"]
    assert report.unused == ["something_else_w"]
    assert "something_else_w" in str(report)
    # affine BN: y = s * x + b (eval mode)
    bn = dst.layer1[1].bn2
    x = torch.randn(2, bn.num_features, 1, 2, 2)
    s, b = (torch.from_numpy(blobs[f"res2_1_branch2b_bn_{k}"]) for k in "sb")
    torch.testing.assert_close(bn(x), x * s.view(1, -1, 1, 1, 1) + b.view(1, -1, 1, 1, 1))
    # W_z bias folded: BN(W_z y + out_b) with the file's stats == imported BN(W_z y)
    norm_file = nn.BatchNorm3d(out_b.shape[0]).eval()
    norm_file.load_state_dict(src.layer2[1].non_local.norm.state_dict())
    z = torch.randn(2, out_b.shape[0], 1, 2, 2)
    ref = norm_file(z + torch.from_numpy(out_b).float().view(1, -1, 1, 1, 1))
    torch.testing.assert_close(dst.layer2[1].non_local.norm(z), ref)
    assert torch.equal(dst.fc.weight, src.fc.weight)


def test_mismatched_file_is_refused_with_the_names(tmp_path):
    blobs = dict(export_caffe2(_random_model(5, "c2d_r50"))["blobs"])  # no non-local blobs
    with pytest.raises(ValueError, match="nonlocal_conv3_1|no blob for: layer2.1.non_local"):
        import_caffe2(_random_model(6), blobs)
    report = import_caffe2(_random_model(6), blobs, strict=False)
    assert "layer2.1.non_local.theta.weight" in report.kept
    blobs = dict(export_caffe2(_random_model(7))["blobs"])
    blobs["res2_0_branch2a_w"] = blobs["res2_0_branch2a_w"][:, :, :1]  # a C2D kernel in I3D
    with pytest.raises(ValueError, match=r"res2_0_branch2a_w \(4, 4, 1, 1, 1\)"):
        import_caffe2(_random_model(8), blobs)


class _Evil:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _EvilEval:
    def __reduce__(self):
        return (eval, ("__import__('os').getcwd()",))


@pytest.mark.parametrize("payload", ["os.system", "builtins.eval"])
def test_foreign_class_reference_is_refused_before_it_runs(tmp_path, payload):
    marker = tmp_path / "pwned"
    evil = _Evil(str(marker)) if payload == "os.system" else _EvilEval()
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps({"blobs": {"conv1_w": evil}}, protocol=2))
    with pytest.raises(Caffe2FormatError, match="refusing to load") as err:
        read_caffe2_pickle(path)
    assert payload.split(".")[-1] in str(err.value)
    assert not marker.exists()


def test_not_a_pickle_and_no_arrays_are_clear_errors(tmp_path):
    (tmp_path / "a.pkl").write_bytes(b"not a pickle")
    with pytest.raises(Caffe2FormatError, match="not a readable"):
        read_caffe2_pickle(tmp_path / "a.pkl")
    (tmp_path / "b.pkl").write_bytes(pickle.dumps({"blobs": {"model_iter": 3}}, protocol=2))
    with pytest.raises(Caffe2FormatError, match="no numpy arrays"):
        read_caffe2_pickle(tmp_path / "b.pkl")


def test_import_caffe2_command_writes_an_evaluable_checkpoint(tmp_path, capsys):
    from nlnet.cli import main
    from nlnet.engine.checkpoint import build_model_from_checkpoint as load_model
    from nlnet.engine.checkpoint import load_checkpoint
    from nlnet.engine.config import config_from_dict

    src = _random_model(9)
    pkl = tmp_path / "released.pkl"
    export_caffe2(src, pkl)
    ckpt_path = tmp_path / "imported.pt"
    argv = ["import-caffe2", str(pkl), "--model", NAME, "--output", str(ckpt_path),
            "--config", "kinetics/i3d311_r50_nl5", "--override", "width=4"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "kept=0" in out and "unused=0" in out and str(ckpt_path) in out
    ckpt = load_checkpoint(ckpt_path)
    assert ckpt["model_name"] == NAME and ckpt["num_classes"] == 5  # from pred_w
    cfg = config_from_dict(ckpt["config"])  # what `nlnet eval --checkpoint` rebuilds
    assert cfg.model.name == NAME and cfg.data.num_frames == 32 and cfg.eval.clips == 10
    model = load_model(ckpt_path).eval()  # the one checkpoint -> model path of eval/predict
    with torch.no_grad():
        assert torch.equal(model(_clip()), src(_clip()))


@pytest.mark.parametrize("case", ["missing", "evil", "wrong-model"])
def test_import_caffe2_command_user_errors_are_one_line_exit_2(tmp_path, capsys, case):
    from nlnet.cli import main

    pkl = tmp_path / "m.pkl"
    if case == "evil":
        pkl.write_bytes(pickle.dumps({"blobs": {"x": _Evil(str(tmp_path / "p"))}}, protocol=2))
    elif case == "wrong-model":
        export_caffe2(_random_model(10, "c2d_r50"), pkl)
    argv = ["import-caffe2", str(pkl), "--model", NAME, "-o", str(tmp_path / "o.pt"),
            "--override", "width=4"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("nlnet import-caffe2: ") and err.count("\n") == 1, err
    assert not (tmp_path / "o.pt").exists() and not (tmp_path / "p").exists()


def test_caffe2_imagenet_pkl_as_pretrained_2d_is_inflated(tmp_path):
    """The released Caffe2 ImageNet ResNet-50 (r50_pretrain_c2_model_iter450450_clean.pkl):
    the video model's blob names with 2D kernels (O, I, kh, kw), a 1000-way pred, lr and
    model_iter; as ``pretrained_2d`` its kernels are inflated (Section 4: t copies / t)."""
    rng = np.random.default_rng(0)
    c2d = _random_model(11, "c2d_r50", num_classes=1000)
    blobs = {}
    for name, arr in export_caffe2(c2d)["blobs"].items():
        if arr.ndim == 5:
            arr = arr[:, :, 0]  # a 2D kernel
        blobs[name] = arr
    blobs.update(lr=np.array(0.0001, np.float32), model_iter=np.array(450450, np.int64))
    blobs["res2_0_branch2a_w_momentum"] = rng.standard_normal(3).astype(np.float32)
    path = tmp_path / "r50_pretrain_c2_model_iter450450_clean.pkl"
    path.write_bytes(pickle.dumps({"blobs": blobs}, protocol=2))
    torch.manual_seed(0)
    model = create_model("i3d311_r50_nl5", num_classes=400, width=4, pretrained_2d=str(path))
    torch.manual_seed(0)  # a config's model.init takes the same file through weights=
    same = create_model("i3d311_r50_nl5", num_classes=400, width=4, weights=str(path))
    for (k, a), (_, b) in zip(model.state_dict().items(), same.state_dict().items()):
        assert torch.equal(a, b), k
    w2d = torch.from_numpy(blobs["conv1_w"])
    assert model.conv1.weight.shape[2] == 5
    for t in range(5):
        torch.testing.assert_close(model.conv1.weight[:, :, t], w2d / 5)
    inflated = model.layer1[0].conv1.weight  # 3x1x1 in I3D
    assert inflated.shape[2] == 3
    torch.testing.assert_close(inflated.sum(2), torch.from_numpy(blobs["res2_0_branch2a_w"]))
    bn = model.layer3[2].bn2
    torch.testing.assert_close(bn.running_var, torch.from_numpy(blobs["res4_2_branch2b_bn_riv"]))
    assert model.fc.weight.shape == (400, 128)  # 1000-way ImageNet pred kept out
    # a C2D model from the same file computes exactly the file's 2D network frame by frame
    c2d_video = create_model("c2d_r50", num_classes=1000, width=4, pretrained_2d=str(path))
    for key, value in c2d.state_dict().items():
        assert torch.equal(c2d_video.state_dict()[key], value), key
    # a foreign global in the file is refused before it runs, as for model imports
    (tmp_path / "evil.pkl").write_bytes(
        pickle.dumps({"blobs": {"conv1_w": _Evil(str(tmp_path / "p"))}}, protocol=2)
    )
    with pytest.raises(Caffe2FormatError, match="refusing to load"):
        create_model("c2d_r50", width=4, pretrained_2d=str(tmp_path / "evil.pkl"))
    assert not (tmp_path / "p").exists()
