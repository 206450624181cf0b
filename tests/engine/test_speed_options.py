"""The training options of the field that change speed, not numbers: channels-last weights
(``train.channels_last``) and ``torch.compile`` of the training forward (``train.compile``);
the training-step benchmark that measures them."""

from __future__ import annotations

import pytest
import torch
from engine_standins import TinyClipDataset, TinyVideoNet, collate_standin, tiny_run_config

from nlnet.engine.config import ConfigError, load_config
from nlnet.engine.loop import train


def _run(tmp_path, name: str, **over):
    torch.manual_seed(0)
    model = TinyVideoNet(num_classes=3)  # 3D convolutions, BatchNorm: a short graph to compile
    cfg = tiny_run_config(tmp_path, name, **{"optim.max_iters": 3, **over})
    summary = train(cfg, model=model, train_dataset=TinyClipDataset(n=8, size=(4, 32, 32)),
                    collate_fn=collate_standin)  # fmt: skip
    return model, summary


@pytest.mark.parametrize("option", [{"train.channels_last": True}, {"train.compile": "eager"}])
def test_a_speed_option_trains_the_same_numbers(tmp_path, option, capsys):
    plain, s0 = _run(tmp_path, "plain")
    capsys.readouterr()
    fast, s1 = _run(tmp_path, "fast", **option)
    compiled = "train.compile=eager: the first step took" in capsys.readouterr().out
    assert compiled == ("train.compile" in option)  # the compile time is reported
    assert s1["iterations"] == s0["iterations"] == 3
    assert s1["train_loss"] == pytest.approx(s0["train_loss"], rel=1e-4)
    for (name, a), (_, b) in zip(plain.state_dict().items(), fast.state_dict().items()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=name)
    if "train.channels_last" in option:
        conv = fast.conv1.weight
        assert conv.is_contiguous(memory_format=torch.channels_last_3d)


def test_an_unknown_compile_backend_is_one_line():
    with pytest.raises(ConfigError, match="train.compile: expected one of none, inductor"):
        load_config(None, ["train.compile=turbo"])


def test_channels_last_takes_each_weight_by_its_rank():
    """A model mixing 2D and 3D convolutions: each weight in its rank's channels-last layout."""
    from nlnet.engine.modeling import to_channels_last

    model = to_channels_last(
        torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Conv3d(4, 4, 3))
    )
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert model[1].weight.is_contiguous(memory_format=torch.channels_last_3d)


def test_the_training_step_benchmark_runs_its_variants(capsys):
    """``benchmarks/train_step_options.py`` on a tiny model: every variant steps, and the ones
    that compute the same thing say so (the first step's loss equal, the state after it close)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "train_step_options.py"
    spec = importlib.util.spec_from_file_location("train_step_options", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    variants = ["reference", "eager", "fused_sgd+subsample_1x1"]
    assert bench.main(["--model", "c2d_tiny_nl1", "--size", "32", "--frames", "4",
                       "--rounds", "1", "--threads", "1", "--variants", *variants]) == 0  # fmt: skip
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()
            if line.split() and line.split()[0] in variants}  # fmt: skip
    assert list(rows) == variants
    for name, (_, step, ratio, _first, dloss, dstate, _last) in rows.items():
        assert float(step) > 0 and float(ratio) > 0, name
        assert float(dloss) < 1e-5 and float(dstate) < 1e-3, name


def test_the_convolution_routes_benchmark_finds_every_frame_wise_convolution(capsys):
    """``benchmarks/conv_routes.py``: the model's 1 x k x k convolutions are found on the meta
    device (each counted as often as it runs), and every route computes conv3d's output."""
    import importlib.util
    from pathlib import Path

    from nlnet.models.registry import create_model

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "conv_routes.py"
    spec = importlib.util.spec_from_file_location("conv_routes", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    shapes = bench.conv_shapes("c2d_tiny_nl1", 2, 4, 32, "registered")
    model = create_model("c2d_tiny_nl1", num_classes=400)
    frame_wise = [m for m in model.modules() if isinstance(m, torch.nn.Conv3d)
                  and m.kernel_size[0] == 1 and m.bias is None]  # fmt: skip
    assert sum(shapes.values()) == len(frame_wise) > 0
    key = next(k for k in shapes if k[2] == k[3] == (1, 1, 1))
    fns = bench.routes(key)
    assert set(fns) == {"conv3d", "conv2d", "conv2d+copies", "matmul"}
    assert bench.largest_difference(fns) < 1e-5
    assert bench.main(["--model", "c2d_tiny_nl1", "--size", "32", "--frames", "4",
                       "--rounds", "1", "--threads", "1"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "every route's output equals conv3d's" in out and "conv2d+copies:" in out


def test_the_pyslowfast_benchmark_names_what_it_needs(tmp_path, capsys):
    """``benchmarks/vs_pyslowfast.py`` needs PySlowFast's source (not on PyPI): without it one
    line and exit 2; its crop arithmetic gives PySlowFast's head the whole res5 map, and its
    import stand-ins only replace modules that are missing."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "vs_pyslowfast.py"
    spec = importlib.util.spec_from_file_location("vs_pyslowfast", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with pytest.raises(SystemExit) as exc:
        bench.main(["--slowfast", str(tmp_path), "--pytorchvideo", str(tmp_path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "no slowfast/models/video_model_builder.py under" in err
    assert err.count("\n") == 1
    assert (bench.res5_map(112), bench.res5_map(224), bench.res5_map(256)) == (4, 7, 8)
    before = dict(sys.modules)
    try:
        stubbed = bench.stub_missing_imports()
        assert "torch" not in stubbed and set(stubbed) <= {"cv2", "pandas", "detectron2",
                                                           "detectron2.layers"}  # fmt: skip
        for name in stubbed:
            assert sys.modules[name].__spec__ is not None
    finally:
        for name in set(sys.modules) - set(before):
            del sys.modules[name]
