"""What README.md and docs/*.md tell a user to run exists and resolves; citations are real.

* every shipped config name they mention (``kinetics/...``, ``charades/...``, ``smoke/...``) loads;
* every model name given to ``create_model("...")`` / ``nlnet cost NAME`` is registered;
* every ``nlnet COMMAND ...`` line is a registered command whose ``--help`` builds, and the
  command lines of code blocks parse with that command's own parser (dry resolution: nothing
  runs), their ``--config`` loading;
* no file of the repository cites the local reference-text file names (the paper is cited by
  title, authors, arXiv number and section);
* every ``python`` and ``bash`` code block runs (python blocks of a page in order, in one
  namespace; bash lines as ``nlnet``/``python`` commands), in a scratch directory holding the
  ``final.pt`` and ``video.mp4`` the examples use, unless the line right before the block is
  ``<!-- docs-test: no-run (REASON) -->`` (trains, downloads, needs the user's data, a sketch).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from nlnet.cli import COMMANDS, build_parser
from nlnet.cli import main as cli_main
from nlnet.engine.config import list_configs, load_config
from nlnet.models.registry import list_models

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

_CONFIG_RE = re.compile(r"(?<![\w/.-])((?:kinetics|charades|smoke)/[A-Za-z0-9_]+)(?![\w/.-])")
_CREATE_RE = re.compile(r"create_model\(\s*[\"']([A-Za-z0-9_]+)[\"']")
_FENCE_RE = re.compile(r"^```(\w*)\s*$")


def _doc_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _commands(path: Path) -> list[tuple[str, bool]]:
    """``(command line, from a code block)`` for every ``nlnet ...`` invocation in a file."""
    out: list[tuple[str, bool]] = []
    lang, buf = None, ""
    for line in _doc_text(path).splitlines():
        fence = _FENCE_RE.match(line.strip())
        if fence:
            lang = None if lang is not None else fence.group(1) or "text"
            continue
        if lang is None:
            out += [(m, False) for m in re.findall(r"`(nlnet [^`]+)`", line)]
            continue
        text = line.strip()
        if lang == "console":
            if not (text.startswith("$ ") or buf):
                continue
            text = text.removeprefix("$ ")
        text = buf + text
        if text.endswith("\\"):
            buf = text[:-1] + " "
            continue
        buf = ""
        if re.match(r"^(nlnet |torchrun .* -m nlnet |python -m nlnet )", text):
            out.append((text, True))
    return out


def _split(cmd: str) -> tuple[str, list[str]]:
    tokens = shlex.split(cmd, comments=True)
    rest = tokens[tokens.index("nlnet") + 1 :]
    while rest and rest[0] in GLOBAL_OPTIONS:  # `nlnet --debug train ...`, `nlnet --help`
        rest = rest[1:]
    return (rest[0], rest[1:]) if rest else ("", [])


GLOBAL_OPTIONS = ("--debug", "--help", "-h", "--version")


ALL_COMMANDS = [(p.name, c, block) for p in DOCS for c, block in _commands(p)]


def test_the_docs_mention_commands_and_configs():
    """The scanners find something (a broken scanner must not make the tests vacuous)."""
    assert len(ALL_COMMANDS) > 20
    assert len({m for p in DOCS for m in _CONFIG_RE.findall(_doc_text(p))}) >= 5


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_config_names_in_docs_load(doc):
    shipped = set(list_configs())
    for name in sorted(set(_CONFIG_RE.findall(_doc_text(doc)))):
        assert name in shipped, f"{doc.name} names config {name!r}, not shipped"
        load_config(name)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_model_names_in_docs_are_registered(doc):
    models = set(list_models())
    text = _doc_text(doc)
    names = set(_CREATE_RE.findall(text))
    names |= set(re.findall(r"nlnet cost ([a-z][a-z0-9_]+)", text))
    for name in sorted(names):
        assert name in models, f"{doc.name} names model {name!r}, not registered"


@pytest.mark.parametrize(("doc", "cmd", "block"), ALL_COMMANDS)
def test_commands_in_docs_resolve(doc, cmd, block):
    sub, rest = _split(cmd)
    if not sub:  # only global options: the dispatcher itself must accept them
        assert cli_main([t for t in shlex.split(cmd) if t in GLOBAL_OPTIONS]) == 0
        return
    assert sub in COMMANDS, f"{doc}: `{cmd}`: no command {sub!r}"
    parser = build_parser(sub)
    assert parser.format_help()
    if not block or any("..." in t or t.startswith("[") for t in rest):
        return  # prose with placeholders: the command and its --help are enough
    try:
        args = parser.parse_intermixed_args(rest)
    except SystemExit as exc:  # argparse error
        pytest.fail(f"{doc}: `{cmd}` does not parse (exit {exc.code})")
    if getattr(args, "config", None) and not Path(args.config).suffix:
        load_config(args.config)


def test_no_reference_file_names_are_cited():
    """Sources cite the paper / article / guide, never the local reference-text files."""
    pattern = re.compile("seeds" + "/" + r"|00[012]_[0-9a-f]{16}")
    skip = {".git", ".venv", "runs", "__pycache__", ".pytest_cache", ".ruff_cache", "data"}
    bad = []
    for path in REPO.rglob("*"):
        rel = path.relative_to(REPO)
        if any(part in skip or part.endswith(".egg-info") for part in rel.parts):
            continue
        if not path.is_file() or path.suffix not in {".py", ".md", ".yaml", ".yml", ".txt",
                                                     ".toml", ".cfg", ""}:  # fmt: skip
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="ignore").splitlines()):
            if pattern.search(line):
                bad.append(f"{rel}:{n + 1}: {line.strip()[:80]}")
    assert not bad, "cite the paper, not local file names:\n" + "\n".join(bad)


# ------------------------------------------------------------------------------ runnable blocks
#: The line right before a fence that keeps the block out of the run, with its reason.
NO_RUN_RE = re.compile(r"^<!--\s*docs-test:\s*no-run\s*\((?P<reason>[^)]+)\)\s*-->$")
RUN_LANGS = ("python", "bash")


def _blocks(path: Path) -> list[tuple[str, int, str, str | None]]:
    """``(language, first line number, code, no-run reason or None)`` of every fenced block."""
    out = []
    lines = _doc_text(path).splitlines()
    lang, start, buf, reason, previous = None, 0, [], None, ""
    for n, line in enumerate(lines, 1):
        fence = _FENCE_RE.match(line.strip())
        if fence and lang is None:
            m = NO_RUN_RE.match(previous.strip())
            lang, start, buf = fence.group(1) or "text", n, []
            reason = m.group("reason").strip() if m else None
        elif fence:
            out.append((lang, start, "\n".join(buf) + "\n", reason))
            lang = None
        elif lang is not None:
            buf.append(line)
        if line.strip():
            previous = line
    return out


RUNNABLE = [
    (p, [b for b in _blocks(p) if b[0] in RUN_LANGS and b[3] is None])
    for p in DOCS
    if any(b[0] in RUN_LANGS and b[3] is None for b in _blocks(p))
]


def test_no_run_markers_give_a_reason_and_precede_a_block():
    for path in DOCS:
        text = _doc_text(path).splitlines()
        for n, line in enumerate(text):
            if "docs-test:" in line and line.strip().startswith("<!--"):
                assert NO_RUN_RE.match(line.strip()), f"{path.name}:{n + 1}: bad marker {line!r}"
                following = next((t for t in text[n + 1 :] if t.strip()), "")
                assert _FENCE_RE.match(following.strip()), (
                    f"{path.name}:{n + 1}: a no-run marker must come right before a code block"
                )
    assert sum(len(blocks) for _, blocks in RUNNABLE) >= 6  # the scanner finds blocks to run


@pytest.fixture(scope="module")
def example_files(tmp_path_factory):
    """The scratch directory of the examples: ``final.pt`` (a tiny checkpoint), ``video.mp4``."""
    import torch

    from nlnet.data.video_io.backends import write_video
    from nlnet.engine.checkpoint import save_checkpoint
    from nlnet.models.registry import create_model

    tmp = tmp_path_factory.mktemp("docs_examples")
    torch.manual_seed(0)
    model = create_model("c2d_tiny_nl1", num_classes=3, width=4)
    prep = {"mean": [0.5] * 3, "std": [0.25] * 3, "num_frames": 4, "stride": 2, "size": 32,
            "crop": None}  # fmt: skip
    save_checkpoint(tmp / "final.pt", model=model, model_name="c2d_tiny_nl1", num_classes=3,
                    class_names=["red", "green", "blue"], model_options={"width": 4},
                    preprocessing=prep, config={"eval": {"clips": 2, "crops": 1}})  # fmt: skip
    frames = torch.randint(0, 256, (10, 32, 48, 3), dtype=torch.uint8)
    write_video(tmp / "video.mp4", frames)
    return tmp


def _run_bash(code: str, where: str) -> None:
    import subprocess
    import sys

    logical, buf = [], ""
    for line in code.splitlines():
        text = buf + line.strip()
        if text.endswith("\\"):
            buf = text[:-1] + " "
            continue
        buf = ""
        if text and not text.startswith("#"):
            logical.append(text)
    for text in logical:
        tokens = shlex.split(text, comments=True)
        if tokens[0] == "nlnet":
            assert cli_main(tokens[1:]) == 0, f"{where}: `{text}` failed"
        elif tokens[0] in ("python", "python3") or tokens[0].endswith("/python"):
            done = subprocess.run([sys.executable, *tokens[1:]], capture_output=True, text=True)
            assert done.returncode == 0, f"{where}: `{text}` failed:\n{done.stderr[-2000:]}"
        else:
            pytest.fail(f"{where}: cannot run `{text}` in a test; put "
                        "`<!-- docs-test: no-run (REASON) -->` right before the block")  # fmt: skip


@pytest.mark.parametrize(("doc", "blocks"), RUNNABLE, ids=[p.name for p, _ in RUNNABLE])
def test_code_blocks_run(doc, blocks, example_files, monkeypatch, capsys):
    """Every python/bash block of a page runs (python blocks in order, one namespace)."""
    monkeypatch.chdir(example_files)
    monkeypatch.setenv("TORCH_HOME", str(example_files / "torch_home"))  # nothing downloads
    namespace: dict = {"__name__": f"docs_{doc.stem}"}
    for lang, line, code, _ in blocks:
        where = f"{doc.name}:{line}"
        if lang == "python":
            exec(compile(code, where, "exec"), namespace)  # noqa: S102 - the docs' own examples
        else:
            _run_bash(code, where)
    capsys.readouterr()
