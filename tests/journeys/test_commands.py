"""Every checkpoint kind (video, image, segmentation, detection, imported Caffe2) through every
command (eval, predict, visualize, cost, export): the command works, or prints one line saying
which checkpoints it takes and exits 2 (never a traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

KINDS = ("video", "image", "segmentation", "detection", "caffe2")
#: (command, kind) pairs that answer with the one-line "takes ..." error, exit 2
REFUSED = {("predict", "segmentation"), ("predict", "detection"), ("visualize", "detection"),
           ("export", "detection")}  # fmt: skip
#: the default suite: one pass over every command and every kind; the rest is slow
DEFAULT = {("eval", "video"), ("eval", "image"), ("predict", "image"), ("predict", "detection"),
           ("visualize", "segmentation"), ("visualize", "detection"), ("cost", "detection"),
           ("cost", "caffe2"), ("export", "detection"), ("eval", "segmentation")}  # fmt: skip
CASES = [
    pytest.param(c, k, marks=[] if (c, k) in DEFAULT else [pytest.mark.slow])
    for c in ("eval", "predict", "visualize", "cost", "export")
    for k in KINDS
]


def _input(kind: str, ckpt: Path) -> str:
    root = ckpt.parents[2] if kind != "caffe2" else None
    if kind in ("video", "caffe2"):
        return str(next(Path(ckpt.parent.parent.parent if root else ckpt.parent).rglob("*.mp4"),
                        None) or _video(ckpt.parent))  # fmt: skip
    if kind == "image":
        return str(next((root / "images" / "val").rglob("*.png")))
    return str(next((root / "dense" / "test" / "images").glob("*.png")))


def _video(where: Path) -> Path:
    import helpers

    root = helpers.video_tree(where / "videos", per_class=1, frames=8, classes=("a", "b", "c"))
    return next(root.rglob("*.mp4"))  # 3 classes, as the imported Caffe2 model


def _argv(command: str, kind: str, ckpt: Path, tmp: Path) -> list[str]:
    inp = _input(kind, ckpt)
    if command == "eval":
        extra = []
        if kind == "caffe2":  # a Kinetics config: point it at tiny data
            extra = [f"data.root={Path(_video(tmp)).parents[2]}", "data.num_frames=4",
                     "data.test_scale=32", "eval.batch_size=1", "eval.workers=0"]  # fmt: skip
        views = ["eval.clips=1"] if kind in ("video", "caffe2") else []  # the video task's key
        return ["eval", "--checkpoint", str(ckpt), *views, *extra]
    if command == "predict":
        views = [] if kind == "image" else ["--clips", "1"]  # views of a clip: not for images
        return ["predict", inp, "--checkpoint", str(ckpt), *views, "--json"]
    if command == "visualize":
        return ["visualize", "--checkpoint", str(ckpt), "--video", inp, "--output", str(tmp)]
    if command == "cost":
        return ["cost", "--checkpoint", str(ckpt)]
    small = ["--input-size", "3x4x32x32"] if kind == "caffe2" else []  # not 32x224x224
    return ["export", "--checkpoint", str(ckpt), "--format", "exported", "--output",
            str(tmp / "model.pt2"), *small]  # fmt: skip


def test_clip_views_for_an_image_checkpoint_are_one_line(checkpoints, tmp_path, capsys):
    from nlnet.cli import main

    ckpt = checkpoints("image")
    for flag in ("--clips", "--crops"):
        assert main(["predict", _input("image", ckpt), "--checkpoint", str(ckpt), flag, "3"]) == 2
        err = capsys.readouterr().err
        assert (
            err.startswith(f"nlnet predict: {flag}: views of a video clip") and err.count("\n") == 1
        )


@pytest.mark.parametrize("command,kind", CASES)
def test_every_checkpoint_kind_through_every_command(command, kind, checkpoints, tmp_path, capsys):
    from nlnet.cli import main

    ckpt = checkpoints(kind)
    rc = main(_argv(command, kind, ckpt, tmp_path))
    out, err = capsys.readouterr()
    if (command, kind) in REFUSED:
        assert rc == 2 and err.count("\n") == 1 and "takes" in err, err
        return
    assert rc == 0, err
    if command in ("eval", "export"):
        report = json.loads(out[("\n" + out).rindex("\n{") :])  # after any training log
        assert report
    if command == "eval" and kind in ("video", "image"):  # a classifier: per-class details
        assert "worst classes" in out, out
    if command == "predict":
        assert json.loads(out.strip().splitlines()[-1])["top"]
    if command == "visualize":
        assert list(tmp_path.glob("*.png"))


@pytest.mark.parametrize("metric", ["mIoU", "box_AP", "top1", "video_top1"])
def test_curves_validation_panel_plots_the_tasks_metric(metric, tmp_path, monkeypatch):
    """``curves.png``'s validation panel draws what each task reports (segmentation mIoU,
    detection box AP, image top-1), not only the video metrics."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.axes import Axes

    from nlnet.engine.runlog import MetricsLogger

    labels: list[str] = []
    real = Axes.plot

    def plot(self, *args, **kw):
        labels.append(kw.get("label"))
        return real(self, *args, **kw)

    monkeypatch.setattr(Axes, "plot", plot)
    log = MetricsLogger(tmp_path)
    log.log({"kind": "train", "iter": 1, "epoch": 0, "loss": 1.0, "lr": 0.1})
    log.log({"kind": "val", "iter": 1, "epoch": 0, metric: 42.0})
    assert log.plot() is not None and metric in labels


def test_visualize_and_predict_name_the_same_class(tmp_path, capsys):
    """Both commands feed the model the same clip (the checkpoint's sampling at its stride, test
    scale and crop), so for each video they name the same class.  The videos are longer and
    larger than a clip and the untrained model's classes differ between them, so a command
    that sampled or resized otherwise would disagree."""
    import numpy as np
    import torch

    import nlnet
    from nlnet.cli import main
    from nlnet.data.video_io.backends import write_video
    from nlnet.engine.checkpoint import save_checkpoint

    torch.manual_seed(0)
    model = nlnet.create_model("c2d_tiny_nl1", num_classes=5, width=4)
    with torch.no_grad():  # logits that follow the input's colours
        model.fc.weight.mul_(50.0)
        model.fc.bias.zero_()
    prep = {"mean": [0.45] * 3, "std": [0.25] * 3, "num_frames": 4, "stride": 2, "size": 32,
            "crop": None}  # fmt: skip
    ckpt = save_checkpoint(
        tmp_path / "m.pt", model=model,
        model_name="c2d_tiny_nl1", num_classes=5, model_options={"width": 4},
        preprocessing=prep, config={"eval": {"clips": 1, "crops": 1}},
    )  # fmt: skip
    rng = np.random.default_rng(0)
    labels = []
    for i in range(6):
        clip = tmp_path / f"v{i}.mp4"
        frames = rng.integers(0, 40, (20, 40, 56, 3), dtype=np.uint8)
        frames += (rng.integers(0, 200, (1, 1, 1, 3)) + np.arange(20)[:, None, None, None] * 3 *
                   rng.integers(-1, 2, (1, 1, 1, 3))).clip(0, 215).astype(np.uint8)  # fmt: skip
        write_video(clip, frames, fps=10, codec="mpeg4")
        assert main(["predict", str(clip), "--checkpoint", str(ckpt), "--json"]) == 0
        top1 = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["top"][0][0]
        assert main(["visualize", "--checkpoint", str(ckpt), "--video", str(clip),
                     "--output", str(tmp_path / f"out{i}")]) == 0  # fmt: skip
        said = capsys.readouterr().out
        assert f"prediction: {top1}\n" in said, (clip, top1, said)
        labels.append(top1)
    assert len(set(labels)) > 1, labels  # the check could fail


@pytest.mark.slow
def test_export_at_the_checkpoints_own_size_agrees_with_predict(tmp_path, capsys):
    """A model registered at 224 pixels (``i3d311_r50_nl5``, narrow), trained at 32 through the
    CLI (32-pixel test crops), exported with the defaults: the ONNX file takes the clips its own
    stored preprocessing makes and onnxruntime names the class that ``nlnet predict`` names,
    file by file."""
    import helpers
    import numpy as np
    import onnxruntime as ort

    import nlnet
    from nlnet.cli import main
    from nlnet.models.registry import get_model_entry

    assert get_model_entry("i3d311_r50_nl5").default_cfg.input_size[-1] == 224
    root = helpers.video_tree(tmp_path / "videos", per_class=2)  # 32 x 40 frames
    assert main(["train", "--config", "smoke/folder_tiny", f"data.root={root}",
                 "model.name=i3d311_r50_nl5", "model.overrides={width: 4}", "data.num_frames=4",
                 "data.test_crop=32",
                 "optim.epochs=1", "train.batch_size=2", "--output-dir", str(tmp_path / "run")]
                ) == 0  # fmt: skip
    ckpt = tmp_path / "run" / "checkpoints" / "final.pt"
    capsys.readouterr()
    out = tmp_path / "model.onnx"
    assert (
        main(["export", "--checkpoint", str(ckpt), "--format", "onnx", "--output", str(out)]) == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["input_shape"] == [1, 3, 4, 32, 32] and report["check_ok"], report
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    transform = nlnet.preprocessing(ckpt)  # the stored preprocessing, eval.clips clips
    names = json.loads(Path(report["metadata"]).read_text())["class_names"]
    for clip in sorted((root / "val").rglob("*.mp4")):
        views = transform(clip).numpy()
        assert views.shape[-2:] == (32, 32)
        (logits,) = session.run(["logits"], {"input": views})
        e = np.exp(logits - logits.max(1, keepdims=True))
        onnx_top1 = names[int((e / e.sum(1, keepdims=True)).mean(0).argmax())]
        assert main(["predict", str(clip), "--checkpoint", str(ckpt), "--json"]) == 0
        top1 = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["top"][0][0]
        assert onnx_top1 == top1, (clip, onnx_top1, top1)


def test_no_nan_speed_in_the_log_or_the_records(tmp_path, capsys):
    """The first log window has one step, no speed yet: the line says so instead of
    ``nan clips/s``, and metrics.jsonl holds ``null`` (strict JSON), not NaN."""
    import helpers

    from nlnet.engine.loop import train

    root = helpers.video_tree(tmp_path / "videos", per_class=1)
    cfg = helpers.engine_cfg("video_classification", "c2d_tiny", helpers.video_data(root),
                             tmp_path / "run")  # fmt: skip
    train(cfg)
    out = capsys.readouterr().out
    assert "iter 1/1" in out and "nan" not in out.lower(), out

    def no_constant(name: str) -> None:
        pytest.fail(f"{name} in metrics.jsonl")

    for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=no_constant)


def test_demo_draws_no_progress_bar_into_a_pipe(tmp_path, monkeypatch):
    """Progress bars redraw with carriage returns: ``nlnet demo`` turns them off when stderr is
    not a terminal (here: pytest's capture), as the training loop does."""
    import nlnet.demo.video_run as video_run
    from nlnet.cli import main

    seen = {}
    monkeypatch.setattr(video_run, "run_demo", lambda args: seen.update(vars(args)))
    assert main(["demo", "--quick", "--output-dir", str(tmp_path)]) == 0
    assert seen["no_progress"] is True
