"""PySlowFast checkpoints (.pyth, ``model_state`` of its C2D/I3D NL ResNet) import into nlnet."""

from __future__ import annotations

import pytest
import torch

from nlnet.cli import main
from nlnet.engine.checkpoint import build_model_from_checkpoint as load_model
from nlnet.engine.checkpoint import checkpoint_info
from nlnet.models.pyslowfast import PYSLOWFAST_OPTIONS, import_pyslowfast, pyslowfast_key
from nlnet.models.registry import create_model

W, CLASSES = 4, 7
#: slowfast/models/video_model_builder.py: _TEMPORAL_KERNEL_BASIS["i3d"] (cycled per stage)
I3D_KERNELS = [[5], [3], [3, 1], [3, 1], [1, 3]]
NLN_LOCATION = [[], [1, 3], [1, 3, 5], []]  # configs/Kinetics/I3D_NLN_8x8_R50.yaml


def _bn(prefix, c, g):
    return {f"{prefix}.weight": torch.rand(c, generator=g) + 0.5,
            f"{prefix}.bias": torch.randn(c, generator=g) * 0.1,
            f"{prefix}.running_mean": torch.randn(c, generator=g) * 0.1,
            f"{prefix}.running_var": torch.rand(c, generator=g) + 0.5,
            f"{prefix}.num_batches_tracked": torch.tensor(0)}  # fmt: skip


def _conv(shape, g):
    return torch.randn(*shape, generator=g) / (torch.tensor(shape[1:]).prod().sqrt())


def slowfast_model_state(seed=0) -> dict[str, torch.Tensor]:
    """A PySlowFast ResNet(ARCH=i3d, DEPTH=50) + NLN state dict, built from its module names
    (VideoModelStem, ResStage, ResBlock + BottleneckTransform, Nonlocal, ResNetBasicHead)."""
    g = torch.Generator().manual_seed(seed)
    sd = {"s1.pathway0_stem.conv.weight": _conv((W, 3, 5, 7, 7), g)}
    sd.update(_bn("s1.pathway0_stem.bn", W, g))
    dim_in = W
    for s, n in enumerate((3, 4, 6, 3)):
        stage, inner, out = s + 2, W * 2**s, 4 * W * 2**s
        kernels = I3D_KERNELS[stage - 1]
        for i in range(n):
            p = f"s{stage}.pathway0_res{i}"
            if i == 0:  # dim or stride change: branch1 projection
                sd[f"{p}.branch1.weight"] = _conv((out, dim_in, 1, 1, 1), g)
                sd.update(_bn(f"{p}.branch1_bn", out, g))
            kt = kernels[i % len(kernels)]
            for name, shape in (("a", (inner, dim_in, kt, 1, 1)), ("b", (inner, inner, 1, 3, 3)),
                                ("c", (out, inner, 1, 1, 1))):  # fmt: skip
                sd[f"{p}.branch2.{name}.weight"] = _conv(shape, g)
                sd.update(_bn(f"{p}.branch2.{name}_bn", shape[0], g))
            dim_in = out
            if i in NLN_LOCATION[s]:
                q = f"s{stage}.pathway0_nonlocal{i}"
                for name, shape in (("conv_theta", (out // 2, out)), ("conv_phi", (out // 2, out)),
                                    ("conv_g", (out // 2, out)), ("conv_out", (out, out // 2))):  # fmt: skip
                    sd[f"{q}.{name}.weight"] = _conv((*shape, 1, 1, 1), g)
                    sd[f"{q}.{name}.bias"] = torch.randn(shape[0], generator=g) * 0.1
                sd.update(_bn(f"{q}.bn", out, g))
    sd["head.projection.weight"] = torch.randn(CLASSES, dim_in, generator=g) * 0.05
    sd["head.projection.bias"] = torch.randn(CLASSES, generator=g) * 0.01
    return sd


def test_key_names_equal_an_independent_build_of_pyslowfast_names():
    state = slowfast_model_state()
    model = create_model("i3d311_r50_nl5", num_classes=CLASSES, width=W, **PYSLOWFAST_OPTIONS)
    mapped = {pyslowfast_key(k) for k in model.state_dict()}
    assert mapped <= set(state)
    # the only PySlowFast keys without an nlnet key: conv_out biases (folded into the BN)
    assert set(state) - mapped == {
        f"s{k}.pathway0_nonlocal{i}.conv_out.bias"
        for k, i in ((3, 1), (3, 3), (4, 1), (4, 3), (4, 5))
    }
    for key, value in model.state_dict().items():  # and every shape agrees
        assert tuple(state[pyslowfast_key(key)].shape) == tuple(value.shape), key


def test_import_folds_conv_out_bias_and_is_strict():
    state = slowfast_model_state(1)
    model = create_model("i3d311_r50_nl5", num_classes=CLASSES, width=W, **PYSLOWFAST_OPTIONS)
    report = import_pyslowfast(model, state)
    assert not report.kept and not report.unused and len(report.converted_as("folded")) == 5
    nl = model.layer3[3].non_local.eval()
    q = "s4.pathway0_nonlocal3"
    z = torch.randn(2, nl.W_z.in_channels, 1, 2, 2)
    ref = torch.nn.functional.conv3d(z, state[f"{q}.conv_out.weight"], state[f"{q}.conv_out.bias"])
    ref = torch.nn.functional.batch_norm(
        ref, state[f"{q}.bn.running_mean"], state[f"{q}.bn.running_var"],
        state[f"{q}.bn.weight"], state[f"{q}.bn.bias"], eps=1e-5)  # fmt: skip
    torch.testing.assert_close(nl.norm(nl.W_z(z)), ref)
    torch.testing.assert_close(
        model.layer1[0].conv1.weight, state["s2.pathway0_res0.branch2.a.weight"]
    )
    with pytest.raises(ValueError, match="unused keys: s3.pathway0_nonlocal1"):
        import_pyslowfast(create_model("i3d311_r50", num_classes=CLASSES, width=W), state)
    # PySlowFast's pooling: padded 1x3x3 stem pool (56 x 56 at 224), unpadded 2x1x1 pool2
    x = torch.randn(1, W, 8, 112, 112)
    assert tuple(model.maxpool(x).shape[2:]) == (8, 56, 56)
    assert tuple(model.pool2(x).shape[2:]) == (4, 112, 112)


def test_import_command_reads_pyth_weights_only(tmp_path, capsys):
    path = tmp_path / "I3D_NLN_8x8_R50.pyth"
    torch.save({"epoch": 196, "model_state": slowfast_model_state(2), "cfg": "..."}, path)
    out = tmp_path / "o.pt"
    argv = ["import-caffe2", str(path), "--model", "i3d311_r50_nl5", "-o", str(out),
            "--override", f"width={W}"]  # fmt: skip
    assert main(argv) == 0
    assert "kept=0" in capsys.readouterr().out
    model = load_model(out)
    assert model.head == "fully_conv" and model.fc.out_features == CLASSES
    prep = checkpoint_info(out).preprocessing
    assert prep.mean == (0.45,) * 3 and prep.std == (0.225,) * 3 and prep.num_frames == 8
    # a .pyth that needs code to unpickle is refused (weights_only), one line, exit 2
    torch.save({"model_state": {"x": torch.zeros(1)}, "obj": _Custom()}, tmp_path / "bad.pyth")
    argv[1] = str(tmp_path / "bad.pyth")
    assert main(argv) == 2
    assert capsys.readouterr().err.count("\n") == 1


class _Custom:
    pass
