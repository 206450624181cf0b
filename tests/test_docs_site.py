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


def _hook(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / f"docs/_hooks/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _hook("gen_pages")


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
    assert "model.init" in weights and "resnet50" in weights


def test_nav_lists_existing_or_generated_pages():
    text = (REPO / "mkdocs.yml").read_text()
    generated = {"reference/models.md", "reference/config.md", "reference/cli.md"}
    generated |= {f"api/{p}.md" for p in gen.API_PACKAGES}
    pages = re.findall(r":\s+([\w/-]+\.md)\s*$", text, re.M)
    assert len(pages) > 15
    for page in pages:
        assert page in generated or (REPO / "docs" / page).is_file(), page
    guides = {p.name for p in (REPO / "docs").glob("*.md")}
    assert guides <= set(pages), f"pages missing from the nav: {guides - set(pages)}"


SAMPLE = """Summary with :class:`~nlnet.x.Block` and :func:`nlnet.x.make`, see :mod:`.images`.

Not ours: :class:`torch.nn.Module`, :meth:`Run.step` and a `site <https://example.org>`_.
The layout::

    root/<split>/a.png    an image
        indented more

    root/<split>/b.png

After the block, a bare marker follows

::

    x = f(1)

Args:
    block: a :class:`~nlnet.x.Block`, shaped ::

        N x C

Returns:
    The output.

>>> y = make(2)
>>> y + 1
3

Example:
    >>> make(1)

Examples:
    >>> make(3)
"""


def _fake_resolve(target: str) -> str | None:
    """A stand-in for the package's scope: three targets that the API pages render."""
    known = {"nlnet.x.Block": "nlnet.x.Block", "nlnet.x.make": "nlnet.x.make",
             ".images": "nlnet.x.images"}  # fmt: skip
    return known.get(target)


def test_rest_roles_become_cross_references_or_code():
    roles = _hook("rest_roles")
    out = roles.convert(SAMPLE, _fake_resolve)
    assert "[`Block`][nlnet.x.Block]" in out  # ~: the last component shown
    assert "[`nlnet.x.make`][nlnet.x.make]" in out  # as written otherwise
    assert "[`images`][nlnet.x.images]" in out  # relative target, resolved
    assert "`torch.nn.Module`" in out and "[`torch.nn.Module`]" not in out  # not ours: code
    assert "`Run.step`" in out and "[`Run.step`]" not in out  # unresolved: code
    assert "[site](https://example.org)" in out
    assert not re.search(r":(class|func|mod|meth|attr|data|exc):`", out)
    # Google section headers stay; no line ends in "::"; the blocks are fenced
    for header in ("Args:", "Returns:", "Example:"):
        assert re.search(rf"^{header}$", out, re.M), header
    assert not re.search(r"::\s*$", out, re.M)
    assert "The layout:\n\n```text\nroot/<split>/a.png    an image\n    indented more\n\n" in out
    assert "root/<split>/b.png\n```\n" in out
    assert "a bare marker follows\n\n```python\nx = f(1)\n```" in out
    assert (
        "    block: a [`Block`][nlnet.x.Block], shaped\n\n        ```text\n        N x C\n" in out
    )
    assert "```pycon\n>>> y = make(2)\n>>> y + 1\n3\n```" in out  # a doctest paragraph
    # "Example:" is a note in griffe: its doctest is fenced; "Examples:" parses ">>>" itself
    assert "Example:\n    ```pycon\n    >>> make(1)\n    ```\n\nExamples:\n    >>> make(3)" in out
    assert out.count("```") == 10
    # roles inside a code block stay as written; a second pass changes nothing
    code = "Text::\n\n    a = ':class:`X`'\n"
    assert ":class:`X`" in roles.convert(code, _fake_resolve)
    fenced = "```python\na = 1\n\n\nb = ':func:`f`'\n```"  # a Markdown fence stays as written
    assert roles.convert(fenced, _fake_resolve) == fenced
    assert roles.convert(out, _fake_resolve) == out


def test_rest_roles_resolve_in_the_package():
    griffe = pytest.importorskip("griffe", reason="install the docs extra")
    roles = _hook("rest_roles")
    loader = griffe.GriffeLoader(extensions=griffe.load_extensions(roles.RestToMarkdown()))
    pkg = loader.load("nlnet")
    loop = pkg["engine.loop"]
    resolve = roles.resolver_for(loop)
    assert resolve("Run.step") == "nlnet.engine.loop.Run.step"  # unqualified, in the scope
    assert resolve("nlnet.engine.loop.train") == "nlnet.engine.loop.train"
    assert resolve("torch.nn.Module") is None and resolve("NoSuchName") is None
    seg = roles.resolver_for(pkg["data.segmentation"])
    assert seg(".images") == "nlnet.data.segmentation.images"  # relative to the package
    # the extension rewrote the docstrings while loading
    assert "[`Run.step`][nlnet.engine.loop.Run.step]" in loop.docstring.value
    assert ":func:`" not in loop.docstring.value and "::\n" not in loop.docstring.value
    # names the API pages do not render are plain code (mkdocs --strict would fail on them)
    assert resolve("nlnet.cli.main") is None  # the CLI has no API page


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
    # the docstrings' reST roles and "::" literal blocks are rendered (docs/_hooks/rest_roles.py)
    pages = sorted((site / "api").glob("*/index.html"))
    assert len(pages) == len(gen.API_PACKAGES)
    for page in pages:
        html = page.read_text()
        role = re.search(r":(class|func|mod|meth|attr|data|exc):", html)
        assert role is None, f"{page}: {html[role.start() - 200 : role.end() + 100]}"
        literal = re.search(r"::\s*</(p|li|td|dd)>", html)
        assert literal is None, f"{page}: {html[literal.start() - 200 : literal.end()]}"
        assert not re.search(r"<blockquote>\s*<blockquote>", html), f"{page}: a doctest as quotes"
    engine = (site / "api" / "engine" / "index.html").read_text()
    assert re.search(
        r'<a class="autorefs autorefs-internal"[^>]*href="#nlnet\.engine\.loop\.Run', engine
    )
    shutil.rmtree(site)
