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
DEFAULT = {("eval", "video"), ("predict", "image"), ("predict", "detection"),
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
        return ["eval", "--checkpoint", str(ckpt), "eval.clips=1", *extra]
    if command == "predict":
        return ["predict", inp, "--checkpoint", str(ckpt), "--clips", "1", "--json"]
    if command == "visualize":
        return ["visualize", "--checkpoint", str(ckpt), "--video", inp, "--output", str(tmp)]
    if command == "cost":
        return ["cost", "--checkpoint", str(ckpt)]
    small = ["--input-size", "3x4x32x32"] if kind == "caffe2" else []  # not 32x224x224
    return ["export", "--checkpoint", str(ckpt), "--format", "exported", "--output",
            str(tmp / "model.pt2"), *small]  # fmt: skip


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
