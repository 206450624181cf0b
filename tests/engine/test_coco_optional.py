"""pycocotools is the optional ``coco`` extra: without it the dense digits task still writes its
COCO json, and whatever needs it says so in one line (a user error, exit 2, in the CLI).

The missing package is simulated by ``None`` entries in ``sys.modules`` (import then fails).
"""

from __future__ import annotations

import json
import re
import sys

import pytest
import torch

from nlnet.data.detection.coco import CocoDataset, import_pycocotools, load_coco
from nlnet.data.digits.dense import DenseDigitsConfig, prepare_dense_digits
from nlnet.engine.errors import MissingPackageError, UserError
from nlnet.engine.tasks.detection import coco_evaluate, outputs_to_coco

HINT = "needs pycocotools: pip install 'nlnet[coco]'"
TINY = DenseDigitsConfig(size=48, num_train=2, num_val=1, num_test=1, seed=3)


@pytest.fixture
def no_pycocotools(monkeypatch):
    for name in ("pycocotools", "pycocotools.coco", "pycocotools.cocoeval", "pycocotools.mask"):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    mp = pytest.MonkeyPatch()  # written while pycocotools cannot be imported
    for name in ("pycocotools", "pycocotools.coco", "pycocotools.cocoeval", "pycocotools.mask"):
        mp.setitem(sys.modules, name, None)
    try:
        return prepare_dense_digits(TINY, tmp_path_factory.mktemp("dense"))
    finally:
        mp.undo()


def test_dense_digits_are_written_without_pycocotools(root):
    coco = json.loads((root / "annotations" / "instances_train.json").read_text())
    assert len(coco["images"]) == 2 and coco["annotations"]
    seg = coco["annotations"][0]["segmentation"]
    assert set(seg) == {"counts", "size"} and sum(seg["counts"]) == 48 * 48


def test_each_use_names_the_package_and_the_extra(root, no_pycocotools):
    with pytest.raises(ModuleNotFoundError, match="^COCO AP needs pycocotools") as info:
        import_pycocotools("cocoeval", "COCO AP")
    assert str(info.value).endswith(HINT) and info.value.name == "pycocotools"
    ann = root / "annotations" / "instances_train.json"
    with pytest.raises(
        ModuleNotFoundError, match=re.escape("reading a COCO annotation file " + HINT)
    ):
        load_coco(ann)
    with pytest.raises(ModuleNotFoundError, match=re.escape(HINT)):
        CocoDataset(root / "train" / "images", ann)
    with pytest.raises(FileNotFoundError, match="annotation_file"):  # checked first
        load_coco(root / "missing.json")
    # the engine's evaluation: a user error
    outputs = [{"boxes": torch.zeros(0, 4), "scores": torch.zeros(0), "labels": torch.zeros(0)}]
    for call in (lambda: outputs_to_coco(outputs, [1]), lambda: coco_evaluate(None, [])):
        with pytest.raises(MissingPackageError, match=re.escape(HINT)):
            call()
    assert issubclass(MissingPackageError, UserError)


def test_the_cli_prints_one_line_and_exits_2(root, tmp_path, no_pycocotools, capsys):
    from nlnet.cli import main

    over = [f"data.root={root}", f"output_dir={tmp_path / 'cli'}", "optim.epochs=0",
            "optim.max_iters=1", "optim.steps=[]", "train.batch_size=1", "train.device=cpu",
            "train.val_split=null", "model.name=maskrcnn_tiny"]  # fmt: skip
    assert main(["train", "--config", "smoke/maskrcnn_tiny_digits.yaml", *over]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.endswith(HINT), err
