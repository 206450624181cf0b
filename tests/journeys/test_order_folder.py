"""A user's own folder whose classes differ only in the ORDER of frames (issue 26): the README's
first-run command learns it, every model the docs recommend for one's own data sees order, and
the first-run config does not flip.

``test_readme_first_run_learns_frame_order`` runs the README's command as written on a
generated 4-class folder (``order_videos.py``: right/left, appear/vanish; same bag of frames in
each pair) and is marked slow; ``test_first_run_command_runs_on_the_order_folder`` is its
default-suite smoke version (one epoch).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from nlnet.cli import main
from nlnet.engine.config import load_config

from .order_videos import CLASSES, order_tree

DOCS = Path(__file__).resolve().parents[2] / "docs"
README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_first_run() -> list[str]:
    """The README's first-run command, as written (``nlnet train --config ... data.root=...``)."""
    m = re.search(r"`nlnet train --config (smoke/\S+) data\.root=(\S+)`", README.read_text())
    assert m, "README: no first-run command `nlnet train --config smoke/... data.root=...`"
    return ["train", "--config", m.group(1), f"data.root={m.group(2)}"]


@pytest.fixture(scope="module")
def order_folder(tmp_path_factory):
    return order_tree(tmp_path_factory.mktemp("order") / "my_videos", train=20, val=6)


def test_the_generated_pairs_hold_the_same_frames_in_reverse_order(tmp_path):
    """What makes the folder an order-only task: a video and its partner class's video (the same
    frames written backwards) decode to the same pixels in reverse order."""
    import av
    import numpy as np

    from nlnet.data.video_io.backends import write_video

    from .order_videos import LOSSLESS, order_video

    def decode(path):
        with av.open(str(path)) as c:
            return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])

    for name in ("right", "appear"):
        x = order_video(name, np.random.default_rng(3))
        write_video(tmp_path / "a.mp4", x, **LOSSLESS)
        write_video(tmp_path / "b.mp4", x[::-1].copy(), **LOSSLESS)
        a, b = decode(tmp_path / "a.mp4"), decode(tmp_path / "b.mp4")
        assert a.shape == (8, 40, 40, 3) and np.array_equal(a, b[::-1]), name
        assert not np.array_equal(a, a[::-1])  # the order matters


def _run_readme(folder: Path, cwd: Path, monkeypatch, *extra: str) -> dict:
    argv = _readme_first_run()
    root = argv[-1].partition("=")[2]
    (cwd / root).parent.mkdir(parents=True, exist_ok=True)
    (cwd / root).symlink_to(folder, target_is_directory=True)
    monkeypatch.chdir(cwd)
    assert main([*argv, *extra]) == 0
    run = cwd / "runs" / Path(argv[2]).name  # the default output_dir: runs/<config name>
    return json.loads((run / "summary.json").read_text())


@pytest.mark.slow
def test_readme_first_run_learns_frame_order(order_folder, tmp_path, monkeypatch):
    summary = _run_readme(order_folder, tmp_path, monkeypatch)
    assert summary["val"]["video_top1"] >= 90.0, summary["val"]


def test_first_run_command_runs_on_the_order_folder(order_folder, tmp_path, monkeypatch):
    """The smoke version: the same command, one epoch; the run trains the order-aware model on
    the four classes without flipping."""
    summary = _run_readme(order_folder, tmp_path, monkeypatch, "optim.epochs=1")
    assert summary["val"]["video_top1"] >= 0.0
    cfg = load_config(next(tmp_path.glob("runs/*/config.yaml")))
    assert cfg.model.name == "i3d_tiny_nl1" and cfg.data.flip is False
    from nlnet.engine.checkpoint import load_checkpoint

    ckpt = load_checkpoint(tmp_path / "runs" / "folder_tiny" / "checkpoints" / "final.pt")
    assert ckpt["model_name"] == "i3d_tiny_nl1"
    assert sorted(ckpt["class_names"]) == sorted(CLASSES)


def _recommended_models() -> set[str]:
    """Models of every config that docs/training.md "Your own data" and the README name."""
    text = (DOCS / "training.md").read_text()
    section = text[text.index("### Your own data") :]
    section = section[: section.index("\n## ")]
    configs = set(re.findall(r"--config (\S+)", section + README.read_text()))
    configs = {c for c in configs if c.startswith("smoke/folder") or c in section}
    models = {load_config(c).model.name for c in configs if c != "smoke/folder_tiny_c2d"}
    return models


def test_reversing_a_clip_changes_the_logits_of_every_recommended_model():
    from nlnet.analysis.time_order import order_gap, probe_size
    from nlnet.models.registry import create_model, model_facts

    models = _recommended_models()
    assert "i3d_tiny_nl1" in models
    for name in sorted(models):
        facts = model_facts(name)
        torch.manual_seed(0)
        model = create_model(name, num_classes=4, **dict(facts.test_overrides)).eval()
        clip = torch.randn(2, *probe_size(facts.test_input_size or facts.input_size))
        with torch.no_grad():
            a, b = model(clip), model(clip.flip(2))
        assert (a - b).abs().max() > 1e-4 * a.abs().max(), name
        assert order_gap(model.double(), clip.double()) > 1e-6, name


def test_the_first_run_and_folder_configs_do_not_flip(order_folder):
    """Every shipped config for one's own folder says no flip, and the first-run config's training transform
    (the one that would mirror clips) gets it."""
    from dataclasses import asdict

    from nlnet.data.video.builder import build_dataset
    from nlnet.engine.config import list_configs

    # the configs for one's own folders (the Kinetics configs keep the paper's flip)
    folder_configs = [c for c in list_configs() if c.startswith("smoke/folder")]
    assert {"smoke/folder_tiny", "smoke/folder_tiny_c2d"} <= set(folder_configs)
    for name in folder_configs:
        assert load_config(name).data.flip is False, name
    data = asdict(load_config("smoke/folder_tiny", {"data.root": str(order_folder)}).data)
    train = build_dataset(data, "train")
    assert train.transform.transform.flip is False
    flipping = build_dataset({**data, "flip": True}, "train")
    assert flipping.transform.transform.flip is True  # the switch reaches the transform


def test_an_i3d_starts_from_a_trained_c2d_by_model_init(order_folder, tmp_path, capsys):
    """``model.init`` of a trained C2D checkpoint starts the I3D of the same layout (Section 4:
    a ``1 x k x k`` kernel inflated to ``3 x k x k``, each plane divided by 3), from the command
    line to the I3D's evaluation; the order-blind C2D is what a user has first. The I3D trains
    with the speed options as a user sets them (``optim.implementation=fused``,
    ``train.subsample_1x1=true``), is stopped and resumed (the fused kernel kept through the
    checkpoint), and is evaluated from its checkpoint by a plain model (the options change no
    state-dict key), which gives the trained model's logits."""
    import copy

    import nlnet
    from nlnet.engine.checkpoint import load_checkpoint
    from nlnet.engine.modeling import build_model
    from nlnet.engine.subsampling import subsample_strided_pointwise

    common = [f"data.root={order_folder}", "optim.epochs=1"]
    c2d_dir, i3d_dir = tmp_path / "c2d", tmp_path / "i3d"
    assert main(["train", "--config", "smoke/folder_tiny_c2d", *common,
                 "--output-dir", str(c2d_dir)]) == 0  # fmt: skip
    c2d = load_checkpoint(c2d_dir / "checkpoints" / "final.pt")["model"]
    init = f"model.init={c2d_dir / 'checkpoints' / 'final.pt'}"
    speed = ["optim.implementation=fused", "train.subsample_1x1=true"]
    capsys.readouterr()
    assert main(["train", "--config", "smoke/folder_tiny", *common, init, *speed,
                 "train.stop_after=4", "--output-dir", str(i3d_dir)]) == 0  # fmt: skip
    assert "kernel(s) inflated in time" in capsys.readouterr().out
    final = i3d_dir / "checkpoints" / "final.pt"
    assert not final.exists()
    assert main(["train", "--output-dir", str(i3d_dir), "--resume"]) == 0
    ckpt = load_checkpoint(final)
    assert ckpt["iteration"] == 10  # 80 videos, batch 8: one epoch
    assert all(g["fused"] for g in ckpt["optimizer"]["param_groups"])
    assert main(["eval", "--checkpoint", str(final)]) == 0
    import shutil  # the same videos with the first class folder renamed: other targets

    renamed = shutil.copytree(order_folder, tmp_path / "renamed")
    for split in ("train", "val"):
        (renamed / split / CLASSES[0]).rename(renamed / split / "zz_last")
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(final), f"data.root={renamed}"]) == 2
    assert f"checkpoint's class 0 is {CLASSES[0]!r}" in capsys.readouterr().err
    plain = nlnet.load_model(final).eval()
    trained = copy.deepcopy(plain)
    assert subsample_strided_pointwise(trained) >= 1  # the tiny I3D's projection shortcuts
    clip = torch.randn(2, 3, 8, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(trained(clip), plain(clip), rtol=1e-5, atol=1e-5)
    model = build_model(load_config("smoke/folder_tiny", [*common, init, "model.num_classes=4"]))
    inflated = [
        k for k, v in model.state_dict().items() if v.dim() == 5 and v.shape != c2d[k].shape
    ]
    assert inflated and all(model.state_dict()[k].shape[2] == 3 for k in inflated)
    for k, v in model.state_dict().items():
        want = c2d[k].repeat(1, 1, 3, 1, 1) / 3 if k in inflated else c2d[k]
        assert torch.equal(v, want), k
