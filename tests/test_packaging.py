"""Package conventions: ``torch.hub`` from a clone, ``py.typed`` for type checkers, the extras.

* ``torch.hub.load(<clone>, NAME, source="local", ...)`` builds every registered model by name
  (checked on the ``meta`` device and with a tiny forward pass) and loads checkpoints;
* a type checker (mypy) run on a script that imports nlnet as an installed package sees its
  annotations (it needs ``py.typed``, PEP 561) and reports a wrongly typed call;
* the wheel carries ``py.typed`` (slow: builds the wheel).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from nlnet.engine.checkpoint import save_checkpoint
from nlnet.layers import NonLocalNd
from nlnet.models.registry import list_models

REPO = Path(__file__).resolve().parents[1]


def _hubconf():
    spec = importlib.util.spec_from_file_location("nlnet_hubconf", REPO / "hubconf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hub_entry_points_are_the_registry():
    hub = _hubconf()
    assert set(hub.__all__) == {"load_model", *list_models()}
    assert all(callable(getattr(hub, n)) for n in hub.__all__)
    assert hub.c2d_r50_nl5.__doc__.startswith("C2D")
    for dep in hub.dependencies:  # torch.hub checks that these import
        assert importlib.util.find_spec(dep) is not None, dep


def test_torch_hub_load_from_a_local_clone(tmp_path):
    with torch.device("meta"):
        model = torch.hub.load(str(REPO), "c2d_r50_nl5", source="local", num_classes=7)
    assert model.fc.out_features == 7
    assert sum(isinstance(m, NonLocalNd) for m in model.modules()) == 5  # Table 2c
    torch.manual_seed(0)
    tiny = torch.hub.load(str(REPO), "c2d_tiny_nl1", source="local", num_classes=3, width=4)
    assert tiny(torch.randn(1, 3, 4, 32, 32)).shape == (1, 3)
    ckpt = save_checkpoint(tmp_path / "final.pt", model=tiny, model_name="c2d_tiny_nl1",
                           num_classes=3, model_options={"width": 4})  # fmt: skip
    loaded = torch.hub.load(str(REPO), "load_model", str(ckpt), source="local")
    x = torch.randn(2, 3, 4, 32, 32)
    torch.testing.assert_close(loaded(x), tiny.eval()(x))


_MYPY_INI = """[mypy]
follow_imports = silent
ignore_missing_imports = True
[mypy-torch.*,torchvision.*,numpy.*,av.*,matplotlib.*,sklearn.*,PIL.*,yaml.*,tqdm.*,pycocotools.*]
follow_imports = skip
"""
_SCRIPT = """import nlnet

model = nlnet.load_model("final.pt")
results = nlnet.predict(model, ["video.mp4"], batch_size="2")
reveal_type(results[0].top(3))
transform = nlnet.preprocessing("final.pt")  # a VideoTransform or an ImageTransform
assert isinstance(transform, nlnet.VideoTransform)
reveal_type(transform.num_frames)
"""


def test_a_type_checker_sees_the_annotations(tmp_path):
    """mypy treats nlnet as an installed package (a ``sys.path`` entry outside the checked
    files), so it reads its annotations only because of ``py.typed``; the heavy third-party
    packages are not followed (fast)."""
    pytest.importorskip("mypy", reason="mypy is in the dev extra")
    site = tmp_path / "site"
    site.mkdir()
    (site / "nlnet").symlink_to(REPO / "nlnet", target_is_directory=True)
    (tmp_path / "mypy.ini").write_text(_MYPY_INI)
    (tmp_path / "check_me.py").write_text(_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--config-file", "mypy.ini", "check_me.py"],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    text = out.stdout + out.stderr
    assert 'Argument "batch_size" to "predict" has incompatible type "str"; expected "int"' in text
    assert 'Revealed type is "list[tuple[str, float]]"' in text
    assert 'Revealed type is "int"' in text
    assert out.returncode == 1, text  # exactly the one intended error
    assert "Found 1 error" in text, text


def test_py_typed_and_extras_are_declared():
    text = (REPO / "pyproject.toml").read_text()  # (tomllib is Python 3.11+)
    assert (REPO / "nlnet" / "py.typed").is_file()
    assert re.search(r'(?m)^nlnet = \[.*"py\.typed".*\]', text), "py.typed not in package-data"
    extras = dict(
        re.findall(
            r"(?m)^(\w+) = \[(.*)\]\s*(?:#.*)?$",
            text.split("[project.optional-dependencies]")[1].split("\n[")[0],
        )
    )
    assert {"export", "coco", "tensorboard", "docs", "dev", "medical"} <= set(extras), extras
    assert "nibabel" in extras["medical"] and "nibabel" in extras["dev"]  # CI runs the NIfTI test
    assert not {"griffe", "pytest"} & {
        d.strip('" ').split(">")[0].split("-")[0] for d in extras["medical"].split(",")
    }  # what it is for only
    assert "pycocotools" in extras["coco"] and "pycocotools" in extras["dev"]
    assert "pycocotools" not in text.split("dependencies = [")[1].split("]")[0]  # optional
    assert "onnxruntime" in extras["export"] and "mkdocstrings" in extras["docs"]
    assert "mypy" in extras["dev"]


@pytest.mark.slow
def test_the_wheel_carries_py_typed(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", ".venv", "site", "runs",
                                                             "*.egg-info", "__pycache__"))  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
         str(tmp_path / "dist"), str(src)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    [wheel] = (tmp_path / "dist").glob("nlnet-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "nlnet/py.typed" in names and "nlnet/inference.py" in names
    assert any(n.startswith("nlnet/configs/") and n.endswith(".yaml") for n in names)


def test_import_from_the_folder_that_holds_the_clone(tmp_path):
    """``import nlnet`` next to a folder named ``nlnet`` (the clone's own folder, seen from its
    parent) is the installed package, not an empty namespace package: the Makefile installs
    the project in setuptools' ``compat`` editable mode (a path entry, which a regular package
    found anywhere on ``sys.path`` wins over), not through an import finder that comes after
    the namespace lookup."""
    import subprocess
    import sys

    (tmp_path / "nlnet").mkdir()  # what a user sees in the parent folder of the clone
    code = "import nlnet; print(nlnet.__file__); nlnet.create_model"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith(str(Path("nlnet", "__init__.py")))
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    assert "editable_mode=compat" in makefile
