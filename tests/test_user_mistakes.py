"""Ordinary mistakes of a new user, each through the command a user types: one line on
stderr naming what was wrong, exit code 2, no traceback (a table, one row per mistake)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """A text file, a PNG image, a bad YAML config, a clip, and checkpoints of a tiny C2D with
    and without a block."""
    from PIL import Image

    import nlnet.models  # noqa: F401  (registers the tiny models)
    from nlnet.data.video_io.backends import write_video
    from nlnet.engine.checkpoint import save_checkpoint
    from nlnet.models.registry import create_model

    root = tmp_path_factory.mktemp("mistakes")
    (root / "notes.pt").write_text("my notes, not weights\n")
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(root / "photo.png")
    (root / "photo.pt").write_bytes((root / "photo.png").read_bytes())
    (root / "broken.png").write_bytes((root / "photo.png").read_bytes()[:40])  # truncated
    (root / "zero.mp4").write_bytes(b"")  # an upload that failed
    (root / "bad.yaml").write_text("model:\n  name: [c2d_tiny\n")
    write_video(root / "clip.mp4", np.zeros((4, 32, 32, 3), np.uint8), fps=4)
    for name in ("c2d_tiny", "c2d_tiny_nl1"):
        torch.manual_seed(0)
        save_checkpoint(root / f"{name}.pt", model=create_model(name, num_classes=2, width=2),
                        model_name=name, num_classes=2, model_options={"width": 2},
                        preprocessing={"mean": [0.5] * 3, "std": [0.25] * 3, "num_frames": 4})  # fmt: skip
    torch.manual_seed(0)  # one with a test size: the clip nlnet predict scores (VideoTransform)
    save_checkpoint(root / "sized.pt", model=create_model("c2d_tiny_nl1", num_classes=2, width=2),
                    model_name="c2d_tiny_nl1", num_classes=2, model_options={"width": 2},
                    preprocessing={"kind": "clip", "mean": [0.5] * 3, "std": [0.25] * 3,
                                   "num_frames": 4, "size": 32, "crop": 32})  # fmt: skip
    import helpers  # tests/journeys/helpers.py

    helpers.video_tree(root / "one_class", classes=("cat",), frames=8)  # one class folder per split
    helpers.video_tree(root / "one_empty", classes=("cat",), frames=8)
    (root / "one_empty" / "train" / "dog").mkdir()  # a second class folder with no video
    helpers.volume_tree(root / "vols1", shape=(1, 10, 16, 18), splits=("train", "val"))
    return {p.name: p for p in root.iterdir()}


MISTAKES = [
    # (argv with {file} placeholders, what the one line must say)
    (["train", "--config", "{bad.yaml}"], "line 3, column 1: not valid YAML"),
    (["train", "--config", "smoke/folder_tinyy"], "did you mean smoke/folder_tiny"),
    (["predict", "{clip.mp4}", "--checkpoint", "{notes.pt}"], "it is a text file"),
    (["predict", "{clip.mp4}", "--checkpoint", "{photo.pt}"], "it is a PNG image"),
    (["visualize", "--checkpoint", "{c2d_tiny.pt}", "--video", "{clip.mp4}"],
     "c2d_tiny has no non-local block or attention layer"),
    (["export", "--checkpoint", "{c2d_tiny_nl1.pt}", "--format", "onnx", "--output", "{out}",
      "--input-size", "3x32x32"], "takes 4 numbers (CxTxHxW"),
    (["inspect", "{c2d_tiny_nl1.pt}", "--input", "{missing.mp4}"], "--input: no such file"),
    (["demo", "--perturb", "init_noise=1e-6"], "--perturb: needs --seeds and --report"),
    (["predict", "{empty}", "--checkpoint", "{c2d_tiny_nl1.pt}"], "holds no video or image file"),
    (["train", "--config", "smoke/folder_tiny", "data.root={one_class}", "--output-dir", "{out}"],
     "the training data has one class ('cat'); classification needs at least two"),
    (["train", "--config", "smoke/folder_tiny", "data.root={one_empty}", "--output-dir", "{out}"],
     "class folder(s) 'dog' have no usable training file"),
    (["train", "--config", "smoke/folder_tiny", "data.root={one_class}",
      "model.overrides={in_channels: 1}", "--output-dir", "{out}"],
     "model.overrides.in_channels=1: video frames are decoded as RGB"),
    (["predict", "{missing.mp4}", "--checkpoint", "{c2d_tiny_nl1.pt}"],
     "VIDEO: no such file or folder"),
    (["visualize", "--checkpoint", "{c2d_tiny_nl1.pt}", "--video", "{notes.pt}"],
     "notes.pt': not a readable video"),
    (["inspect", "{c2d_tiny_nl1.pt}", "--input", "{broken.png}"], "broken.png': not a readable image"),
    (["inspect", "{c2d_tiny_nl1.pt}", "--input", "{zero.mp4}"],
     "zero.mp4': not a readable video (cannot decode video"),
    (["inspect", "{sized.pt}", "--input", "{zero.mp4}"],
     "zero.mp4': not a readable video (cannot decode video"),
    (["visualize", "--checkpoint", "{sized.pt}", "--video", "{zero.mp4}"],
     "zero.mp4': not a readable video (cannot decode video"),
    (["train", "--config", "dense/unet3d_nl", "data.root={vols1}", "data.modalities=[]",
      "model.overrides={in_channels: 4}", "--output-dir", "{out}"],
     "model.overrides.in_channels=4 but the training data has 1 channel(s)"),
]  # fmt: skip


@pytest.mark.parametrize("argv,message", MISTAKES, ids=[" ".join(m[0][:2]) for m in MISTAKES])
def test_a_mistake_is_one_line_and_exit_code_2(argv, message, files, tmp_path, capsys):
    from nlnet.cli import main

    paths = {**{k: str(v) for k, v in files.items()}, "out": str(tmp_path / "m.onnx"),
             "missing.mp4": str(tmp_path / "missing.mp4"), "empty": str(tmp_path)}  # fmt: skip
    args = [_fill(a, paths) for a in argv]
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err and err.count("\n") == 1, err


def _fill(arg: str, paths: dict[str, str]) -> str:
    """``{name}`` or ``key={name}`` with the fixture's path of ``name``."""
    key, eq, value = arg.rpartition("=")
    if value.startswith("{") and value.endswith("}") and value[1:-1] in paths:
        return f"{key}{eq}{paths[value[1:-1]]}"
    return arg


def test_predict_takes_a_folder(files, capsys):
    """``nlnet predict DIR``: every video and image under it, as if each were named."""
    from nlnet.cli import main

    assert main(["predict", str(files["clip.mp4"].parent), "--checkpoint",
                 str(files["c2d_tiny_nl1.pt"]), "--top-k", "1"]) in (0, 1)  # fmt: skip
    out = capsys.readouterr()
    assert str(files["clip.mp4"]) in out.out  # the clip was scored
    assert str(files["photo.png"]) in out.out  # an image: a still clip, with a warning
    assert "a still image given to a video model" in out.err
