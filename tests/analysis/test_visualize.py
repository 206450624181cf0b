"""Attention pictures: arrows and heatmaps as PNG files, from the API and the command line."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch

from nlnet.analysis.attention_record import GridMapping, record_attention
from nlnet.analysis.visualize import arrows_figure, heatmap_figure, strongest_query, top_keys
from nlnet.commands.visualize import configure_parser, main


def _is_png(path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_top_keys_and_strongest_query():
    w = torch.tensor([0.1, 0.5, 0.05, 0.35])
    values, idx = top_keys(w, 2)
    assert idx.tolist() == [1, 3] and torch.allclose(values, torch.tensor([0.5, 0.35]))
    assert top_keys(w, 10)[1].numel() == 4
    attn = torch.tensor([[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]])
    assert strongest_query(attn) == 1
    with pytest.raises(ValueError, match="k"):
        top_keys(w, 0)


def test_arrow_and_heatmap_pngs(tmp_path):
    frames = np.random.default_rng(0).integers(0, 255, (3, 16, 16, 3), dtype=np.uint8)
    m = GridMapping((3, 4, 4), (3, 2, 2), (1, 2, 2), (3, 16, 16))
    weights = torch.softmax(torch.randn(m.num_keys), 0)
    q = m.query_index((0, 5, 9))
    fig = arrows_figure(frames, weights, m, q, top_k=5, title="t")
    fig.savefig(tmp_path / "a.png")
    fig = heatmap_figure(frames, weights, m, q)
    fig.savefig(tmp_path / "h.png")
    assert _is_png(tmp_path / "a.png") and _is_png(tmp_path / "h.png")
    # an image (2D mapping) is drawn as a single frame
    img_map = GridMapping((4, 4), (2, 2), (2, 2), (16, 16))
    fig = arrows_figure(frames[0], torch.softmax(torch.randn(4), 0), img_map, 5, top_k=3)
    fig.savefig(tmp_path / "i.png")
    assert _is_png(tmp_path / "i.png")
    with pytest.raises(ValueError, match="does not match"):
        arrows_figure(frames[:2], weights, m, q)


def _write_checkpoint(path, name: str, **overrides):
    from nlnet.engine.checkpoint import save_checkpoint
    from nlnet.models.registry import create_model

    torch.manual_seed(0)
    model = create_model(name, num_classes=3, **overrides)
    for mod in model.modules():  # non-trivial attention
        if hasattr(mod, "norm") and isinstance(mod.norm, torch.nn.BatchNorm3d):
            torch.nn.init.ones_(mod.norm.weight)
    save_checkpoint(
        path,
        model=model,
        model_name=name,
        num_classes=3,
        class_names=["a", "b", "c"],
        model_options=overrides,
        preprocessing={"mean": [0.5] * 3, "std": [0.25] * 3, "num_frames": 4},
    )
    return model


def test_cli_writes_pngs_for_a_video_model(tmp_path, capsys):
    import nlnet.models  # noqa: F401  (registers the tiny models)
    from nlnet.data.video_io.backends import write_video

    _write_checkpoint(tmp_path / "m.pt", "c2d_tiny_nl1", width=2)
    frames = np.random.default_rng(1).integers(0, 255, (4, 32, 32, 3), dtype=np.uint8)
    write_video(tmp_path / "clip.mp4", frames, fps=4)
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    out = tmp_path / "out"
    args = parser.parse_args(
        ["--checkpoint", str(tmp_path / "m.pt"), "--video", str(tmp_path / "clip.mp4"),
         "--query", "0,5,20", "--output", str(out)]
    )  # fmt: skip
    assert main(args) == 0
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == 2 and all(_is_png(p) for p in pngs)
    assert "prediction:" in capsys.readouterr().out
    bad = parser.parse_args(
        ["--checkpoint", str(tmp_path / "m.pt"), "--video", str(tmp_path / "clip.mp4"),
         "--query", "0,5"]
    )  # fmt: skip
    with pytest.raises(ValueError, match="--query"):
        main(bad)


def test_cli_works_for_an_image_model(tmp_path):
    from PIL import Image

    from nlnet.layers.nonlocal_block import NonLocal2d

    # a 2D model from the registry with one 2D block (narrow test width)
    from nlnet.models.registry import get_model_entry

    entry = get_model_entry("resnet50_nl_coco")
    overrides = dict(entry.default_cfg.test_overrides)
    model = _write_checkpoint(tmp_path / "img.pt", "resnet50_nl_coco", **overrides)
    assert any(isinstance(m, NonLocal2d) for m in model.modules())
    Image.fromarray(np.full((64, 64, 3), 128, np.uint8)).save(tmp_path / "x.png")
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    args = parser.parse_args(
        ["--checkpoint", str(tmp_path / "img.pt"), "--video", str(tmp_path / "x.png"),
         "--output", str(tmp_path / "o")]
    )  # fmt: skip
    assert main(args) == 0
    assert len(list((tmp_path / "o").glob("*.png"))) == 2


def test_recorded_attention_feeds_the_figures(tmp_path):
    import nlnet.models  # noqa: F401  (registers the tiny models)
    from nlnet.models.registry import create_model

    model = create_model("c2d_tiny_nl1", num_classes=3, width=2).eval()
    x = torch.randn(1, 3, 4, 32, 32)
    with record_attention(model) as rec, torch.no_grad():
        model(x)
    name = rec.names[0]
    m = rec.mapping(name, x.shape[2:])
    q = m.query_index((1, 10, 10))
    frames = (x[0].permute(1, 2, 3, 0).clamp(-2, 2) + 2) / 4
    fig = arrows_figure(frames, rec.maps[name][0, q], m, q)
    fig.savefig(tmp_path / "f.png")
    assert _is_png(tmp_path / "f.png")


@pytest.mark.parametrize(
    ("name", "overrides", "video"),
    [("vit_tiny", {}, False), ("vivit_tiny_divided", {"width": 2}, True)],
)
def test_cli_draws_the_rollout_of_a_transformer(name, overrides, video, tmp_path, capsys):
    """No non-local block but transformer attention: one rollout picture, through the CLI."""
    from PIL import Image

    from nlnet.cli import main as cli_main
    from nlnet.data.video_io.backends import write_video

    _write_checkpoint(tmp_path / "t.pt", name, **overrides)
    rng = np.random.default_rng(2)
    if video:
        source = tmp_path / "clip.mp4"
        write_video(source, rng.integers(0, 255, (4, 40, 40, 3), dtype=np.uint8), fps=4)
    else:
        source = tmp_path / "x.png"  # 48 x 48: resized to the ViT's 32 x 32
        Image.fromarray(rng.integers(0, 255, (48, 48, 3), dtype=np.uint8)).save(source)
    out = tmp_path / "o"
    common = ["visualize", "--checkpoint", str(tmp_path / "t.pt"), "--video", str(source)]
    assert cli_main([*common, "--output", str(out)]) == 0
    assert [p.name for p in out.iterdir()] == ["rollout.png"] and _is_png(out / "rollout.png")
    assert "prediction: " in capsys.readouterr().out
    # a query means nothing for a rollout: one line on stderr, exit status 2
    assert cli_main([*common, "--output", str(out), "--query", "5,5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--query" in err and "rollout" in err


def _titles(fig) -> list[str]:
    return [ax.get_title() for ax in fig.axes]


def test_heatmap_gives_each_key_time_step_its_mass_once():
    """Key steps pooled over 2 frames each (T=4 frames, T'=2 key steps): each step's mass is
    written once, so the masses in the titles add up to the softmax row's total, 1."""
    import re

    frames = np.zeros((4, 16, 16, 3), np.uint8)
    m = GridMapping((4, 4, 4), (2, 2, 2), (2, 2, 2), (4, 16, 16))
    weights = torch.softmax(torch.randn(m.num_keys, generator=torch.Generator().manual_seed(0)), 0)
    titles = _titles(heatmap_figure(frames, weights, m, 0))
    masses = [float(x) for t in titles for x in re.findall(r"mass ([0-9.]+)", t)]
    assert len(masses) == 2 and abs(sum(masses) - 1.0) <= 0.011, titles
    assert titles[0].startswith("t=0-1") and titles[1] == "t=1" and titles[2].startswith("t=2-3")
    # one key step per frame: one mass per frame, as before
    m1 = GridMapping((4, 4, 4), (4, 2, 2), (1, 2, 2), (4, 16, 16))
    titles = _titles(heatmap_figure(frames, torch.softmax(torch.randn(16), 0), m1, 0))
    assert sum("mass" in t for t in titles) == 4


def _assert_titles_apart(fig) -> None:
    from nlnet.analysis.visualize import title_boxes

    fig.canvas.draw()
    boxes = title_boxes(fig)
    assert len(boxes) >= 2
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b), (a, b, [t.get_text() for t in fig.texts], _titles(fig))


@pytest.fixture
def checked_savefig(monkeypatch):
    """Every figure saved during the test is checked for overlapping titles first."""
    from matplotlib.figure import Figure

    real = Figure.savefig
    checked = []

    def savefig(self, *args, **kwargs):
        _assert_titles_apart(self)
        checked.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return checked


def test_rollout_and_segmentation_titles_never_overlap(tmp_path, checked_savefig):
    """ViT rollout and a segmentation model's attention pictures through ``nlnet visualize``,
    and the demos' segmentation row with long model names: titles measured with matplotlib's
    renderer do not intersect."""
    from PIL import Image

    from nlnet.analysis.dense_visualize import save_segmentation_figure
    from nlnet.cli import main as cli_main

    rng = np.random.default_rng(3)
    image = tmp_path / "x.png"
    Image.fromarray(rng.integers(0, 255, (48, 48, 3), dtype=np.uint8)).save(image)
    _write_checkpoint(tmp_path / "vit.pt", "vit_tiny")
    _write_checkpoint(tmp_path / "seg.pt", "seg_tiny_nl")
    for ckpt in ("vit.pt", "seg.pt"):
        argv = ["visualize", "--checkpoint", str(tmp_path / ckpt), "--video", str(image),
                "--output", str(tmp_path / f"out_{ckpt}")]  # fmt: skip
        assert cli_main(argv) == 0
    assert len(checked_savefig) == 3  # rollout, seg arrows + heatmap
    truth = rng.integers(0, 3, (48, 48))
    preds = {"seg_tiny (C2D-style baseline, no block)": truth,
             "seg_tiny_nl (one non-local block, Sec. 5)": truth}  # fmt: skip
    save_segmentation_figure(tmp_path / "row.png", np.asarray(Image.open(image)), truth, preds,
                             attention=rng.random((48, 48)), pixel=(5, 5),
                             class_names=["bg", "a", "b"])  # fmt: skip
    assert len(checked_savefig) == 4
