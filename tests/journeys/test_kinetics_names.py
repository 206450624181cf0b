"""An imported Kinetics model names its classes (the released order), not ``class_385``."""

from __future__ import annotations

import torch

from nlnet.cli import main
from nlnet.engine.checkpoint import load_checkpoint
from nlnet.models.kinetics_classes import kinetics400_classes


def test_the_shipped_list_is_the_400_kinetics_names_in_alphabetical_order():
    names = kinetics400_classes()
    assert len(names) == len(set(names)) == 400
    assert list(names) == sorted(names)  # the released numbering: alphabetical
    assert (names[0], names[1], names[-1]) == ("abseiling", "air drumming", "zumba")


def _import(tmp_path, num_classes: int, released: bool = True):
    from nlnet.models.caffe2 import export_caffe2
    from nlnet.models.registry import create_model

    torch.manual_seed(0)
    src = create_model("c2d_r50_nl5", num_classes=num_classes, width=4).eval()
    pkl = tmp_path / f"released_{num_classes}.pkl"
    export_caffe2(src, pkl)
    out = tmp_path / f"imported_{num_classes}.pt"
    # a released file (the zoo's row names its protocol) vs. a file of one's own (--model)
    which = (
        ["--released", "c2d_nonlocal_32x2_IN_pretrain_400k"]
        if released
        else ["--model", "c2d_r50_nl5"]
    )
    argv = ["import-caffe2", str(pkl), *which, "--output", str(out), "--override", "width=4"]
    assert main(argv) == 0
    return load_checkpoint(out)


def test_an_imported_400_class_model_carries_the_kinetics_names(tmp_path, capsys):
    ckpt = _import(tmp_path, 400)
    assert ckpt["class_names"] == list(kinetics400_classes())
    assert "Kinetics-400 class names" in capsys.readouterr().out
    other = _import(tmp_path, 3)  # not a Kinetics head: no names made up
    assert not other["class_names"]
    own = _import(tmp_path, 400, released=False)  # one's own 400-class file: its ids are kept
    assert not own["class_names"]
