"""The documentation site: its generated pages and its ``mkdocs build --strict``.

The generators of ``docs/_hooks/gen_pages.py`` (the MkDocs hook) run here on the real code:
the configuration reference names every key of every config dataclass with its default, the
command-line reference holds every command's ``--help``, the API pages name every public module
and the model list counts parameters and multiply-adds as ``nlnet cost`` does.  The whole build
(about half a minute) is a slow test and the ``make docs`` step of CI.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nlnet.analysis.cost import model_cost
from nlnet.cli import COMMANDS, build_parser

REPO = Path(__file__).resolve().parents[1]


def _gen():
    spec = importlib.util.spec_from_file_location("gen_pages", REPO / "docs/_hooks/gen_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _gen()


def test_config_reference_has_every_key_with_default_and_meaning():
    from nlnet.engine.config import Config, OptimConfig

    page = gen.config_page()
    sections = gen.config_sections()
    assert [p for p, _ in sections][:5] == ["", "model.", "optim.", "train.", "eval."]
    for prefix, cls in sections:
        key_prefix = prefix.split(") ")[-1]
        for f in dataclasses.fields(cls):
            assert re.search(rf"^\| `{re.escape(key_prefix + f.name)}` \|", page, re.M), f.name
    row = next(line for line in page.splitlines() if line.startswith("| `optim.lr` |"))
    assert f"`{OptimConfig().lr!r}`" in row and "learning rate" in row
    # every key of the top level and of the sections has a meaning (from the docstrings)
    for line in page.splitlines():
        if line.startswith("| `") and not line.startswith("| `data."):
            assert not line.rstrip().endswith("|  |"), f"no meaning: {line}"
    assert re.search(r"^\| `data\.num_frames` \|.* `32` \| clip length T", page, re.M)
    assert Config.__doc__ and "(Config)" in page


def test_cli_reference_has_every_command_help():
    page = gen.cli_page()
    for name in COMMANDS:
        assert f"## `nlnet {name}`" in page
        first_option = build_parser(name)._actions[1].option_strings or [""]
        assert first_option[0] in page
    assert "usage: nlnet predict" in page


def test_api_pages_name_every_public_module():
    for package in gen.API_PACKAGES:
        page = gen.api_page(package)
        assert f"::: nlnet.{package}" in page
        for path in (
            (REPO / "nlnet" / package).rglob("*.py") if (REPO / "nlnet" / package).is_dir() else []
        ):
            rel = path.relative_to(REPO).with_suffix("")
            if any(part.startswith("_") for part in rel.parts):
                continue
            assert f"::: {'.'.join(rel.parts)}\n" in page, rel


def test_model_list_counts_like_nlnet_cost():
    rows = gen.model_rows("c2d_tiny_nl1")
    row = next(r for r in rows if r["name"] == "c2d_tiny_nl1")
    report = model_cost("c2d_tiny_nl1", (8, 32, 32))
    assert (row["params"], row["macs"]) == (report.params, report.macs)
    assert row["input"].startswith("3×8×32×32") and row["task"] == "video_classification"
    page = gen.models_page(rows)
    assert "| `c2d_tiny_nl1` |" in page and f"{report.params / 1e6:.2f}M" in page
    weights = gen._weights(__import__("nlnet").models.get_model_entry("c2d_r50_nl5"))
    assert "pretrained_2d" in weights and "resnet50" in weights


def test_nav_lists_existing_or_generated_pages():
    text = (REPO / "mkdocs.yml").read_text()
    generated = {"reference/models.md", "reference/config.md", "reference/cli.md"}
    generated |= {f"api/{p}.md" for p in gen.API_PACKAGES}
    pages = re.findall(r":\s+([\w/]+\.md)\s*$", text, re.M)
    assert len(pages) > 15
    for page in pages:
        assert page in generated or (REPO / "docs" / page).is_file(), page
    guides = {p.name for p in (REPO / "docs").glob("*.md")}
    assert guides <= set(pages), f"pages missing from the nav: {guides - set(pages)}"


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="install the docs extra: pip install -e '.[docs]'")
    site = tmp_path / "site"
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO, capture_output=True, text=True, timeout=900,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    assert (site / "index.html").is_file()
    models = (site / "reference" / "models" / "index.html").read_text()
    assert "c2d_r50_nl5" in models and "maskrcnn_r50_fpn_nl" in models
    api = (site / "api" / "inference" / "index.html").read_text()
    assert "load_model" in api and "Preprocessing" in api
    shutil.rmtree(site)
