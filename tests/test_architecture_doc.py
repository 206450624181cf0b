"""docs/ARCHITECTURE.md names only what exists, and draws ``train()``'s steps in the code's order.

Read from the page: every backticked file or folder path (``engine/loop.py``, ``nlnet/data/``,
``tasks/video/task.py``), exactly: relative to the repository, ``nlnet/``, ``nlnet/engine/`` or a
folder named before it in the same table row or paragraph, never the tail of a path elsewhere;
every dotted ``nlnet.`` name, every backticked class-like name
(``CamelCase``) and ``Class.method`` in its diagrams, every ``nlnet <command>``; and the step
names of the one path from a config to a finished run.  Each must resolve in the repository, the
package, or a well-known library it builds on; the steps must be the calls that
``nlnet.engine.loop.train`` makes on its ``Run``, in that order.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "ARCHITECTURE.md"
TEXT = DOC.read_text()
CODE_BLOCKS = re.findall(r"```[a-z]*\n(.*?)```", TEXT, flags=re.S)
PROSE = re.sub(r"```[a-z]*\n.*?```", "", TEXT, flags=re.S)
TICKED = re.findall(r"`([^`\n]+)`", PROSE)

#: the libraries whose classes the page names beside the package's own
LIBRARIES = ("torch", "torch.nn", "torch.optim", "torch.optim.lr_scheduler",
             "torch.optim.swa_utils", "torch.utils.data", "typing", "torchvision.transforms.v2",
             "torch.distributed")  # fmt: skip


#: the folders a path on the page may be relative to (besides a folder named before it)
ANCHORS = (REPO, REPO / "nlnet", REPO / "nlnet" / "engine")


def _path_tokens(text: str) -> list[str]:
    """The backticked file and folder paths of ``text`` (``x.py``, ``pkg/x.py``, ``pkg/``)."""
    out = []
    for tok in re.findall(r"`([^`\n]+)`", text):
        for part in re.split(r"[,\s]+", tok):
            part = part.strip("(),")
            if re.fullmatch(r"[A-Za-z0-9_./-]+(\.py|/)", part) and not part.startswith("."):
                out.append(part)
    return out


def _units() -> list[str]:
    """The prose as table rows and paragraphs (a path's folder is named in the same one)."""
    units, para = [], []
    for line in PROSE.splitlines() + [""]:
        if line.startswith("|") or not line.strip():
            if para:
                units.append(" ".join(para))
                para = []
            if line.startswith("|"):
                units.append(line)
        else:
            para.append(line)
    return units


def _paths() -> list[tuple[str, str]]:
    """``(path, where)`` for every path of the page: of each table row and paragraph, and of
    the diagrams' ``(file.py)`` notes."""
    found = []
    for unit in _units():
        found += [(p, unit) for p in _path_tokens(unit)]
    for block in CODE_BLOCKS:
        for line in block.splitlines():
            found += [(p, "") for p in re.findall(r"\(([^()\s]+\.py|[a-z_/]+/)\)", line)]
            found += [(p, "") for m in re.findall(r"\(([^()]+)\)", line)
                      for p in re.split(r",\s*", m) if re.fullmatch(r"[a-z_/]+\.py", p)]  # fmt: skip
    return found


def _missing(line_paths: list[str]) -> list[str]:
    """The paths of one row or paragraph that do not exist exactly: each is relative to the
    repository, ``nlnet/``, ``nlnet/engine/``, or a folder named earlier in it (a file named
    earlier names its folder), never the tail of some path elsewhere."""
    folders, missing = list(ANCHORS), []
    for path in line_paths:
        hits = [d / path for d in folders if (d / path).exists()]
        if not hits:
            missing.append(path)
        for hit in hits:
            folder = hit if hit.is_dir() else hit.parent
            if folder not in folders:
                folders.append(folder)
    return missing


def _lines() -> dict[str, list[str]]:
    lines: dict[str, list[str]] = {}
    for path, where in _paths():
        lines.setdefault(where, []).append(path)
    return lines


def test_a_path_resolves_only_where_the_page_puts_it():
    assert _missing(["engine/stop.py", "seeding.py"]) == ["seeding.py"]  # not engine/seeding.py
    assert _missing(["nlnet/data/", "seeding.py", "video/", "sampling.py"]) == []
    assert _missing(["tasks/video.py"]) == ["tasks/video.py"]


def _package_tables() -> list[tuple[Path, str]]:
    """``(package folder, name)`` of every module named in the first column of a package
    docstring's table (``name``  what it holds)."""
    out = []
    for init in sorted((REPO / "nlnet").rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        for m in re.finditer(r"^``([a-z_][a-z0-9_]*)``\s{2,}", doc, flags=re.M):
            out.append((init.parent, m.group(1)))
    return out


@pytest.mark.parametrize(("folder", "name"), _package_tables(),
                         ids=lambda v: v.name if isinstance(v, Path) else v)  # fmt: skip
def test_package_docstring_tables_name_their_own_modules(folder, name):
    assert (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file(), (
        f"{folder.relative_to(REPO)}/__init__.py names the module {name!r}, which it does not have"
    )


@pytest.mark.parametrize("where", sorted(_lines()), ids=lambda w: w[:40] or "diagrams")
def test_named_paths_exist_exactly(where):
    missing = _missing(_lines()[where])
    assert not missing, f"docs/ARCHITECTURE.md names {missing} ({where[:60]!r}), which do not exist"


def _resolve_dotted(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def _dotted() -> set[str]:
    names = set()
    for tok in TICKED + CODE_BLOCKS:
        names |= set(re.findall(r"\bnlnet(?:\.[A-Za-z_][A-Za-z0-9_]*)+", tok))
    return {n for n in names if not n.endswith((".py", ".md"))}


@pytest.mark.parametrize("name", sorted(_dotted()))
def test_dotted_names_resolve(name):
    assert _resolve_dotted(name), f"docs/ARCHITECTURE.md names {name!r}, which does not exist"


def _defined_in_package() -> dict[str, set[str]]:
    """Class (and other top-level) names defined in ``nlnet/``, with their methods."""
    defined: dict[str, set[str]] = {}
    for path in (REPO / "nlnet").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
                methods |= {t.id for n in node.body if isinstance(n, ast.AnnAssign | ast.Assign)
                            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                            if isinstance(t, ast.Name)}  # fmt: skip
                defined.setdefault(node.name, set()).update(methods)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        defined.setdefault(t.id, set())
    return defined


DEFINED = _defined_in_package()


def _library_has(name: str) -> bool:
    if hasattr(builtins, name):
        return True
    for lib in LIBRARIES:
        try:
            if hasattr(importlib.import_module(lib), name):
                return True
        except ImportError:  # pragma: no cover - an optional library
            continue
    return False


def _class_names() -> set[str]:
    names = set()
    for tok in TICKED:
        head = tok.split("(")[0].split(".")[0].strip()
        if re.fullmatch(r"[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*", head):
            names.add(head)
    return names


@pytest.mark.parametrize("name", sorted(_class_names()))
def test_named_classes_exist(name):
    assert name in DEFINED or _library_has(name), (
        f"docs/ARCHITECTURE.md names the class {name!r}, defined neither in nlnet/ nor in "
        f"{', '.join(LIBRARIES)}"
    )


def _methods_in_diagrams() -> set[tuple[str, str]]:
    pairs = set()
    for block in CODE_BLOCKS:
        pairs |= set(re.findall(r"\b([A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*)\.([a-z_][a-z0-9_]*)\b",
                                block))  # fmt: skip
    return pairs


@pytest.mark.parametrize(("cls", "method"), sorted(_methods_in_diagrams()))
def test_class_methods_in_diagrams_exist(cls, method):
    if cls not in DEFINED:
        assert _library_has(cls), f"docs/ARCHITECTURE.md draws {cls}.{method}: no class {cls}"
        return
    assert method in DEFINED[cls], f"docs/ARCHITECTURE.md draws {cls}.{method}, not defined"


def test_named_commands_exist():
    from nlnet.cli import COMMANDS

    named = set()
    for text in TICKED + CODE_BLOCKS:  # `nlnet train`, or in a diagram `nlnet eval / predict`
        for chain in re.findall(r"(?<![\w/.-])nlnet ([a-z][a-z0-9-]*(?: / [a-z][a-z0-9-]*)*)",
                                text):  # fmt: skip
            named |= set(chain.split(" / "))
    assert named, "the page names no nlnet command"
    unknown = sorted(named - set(COMMANDS))
    assert not unknown, f"docs/ARCHITECTURE.md names nlnet commands that do not exist: {unknown}"


def _train_steps_in_code() -> list[str]:
    """The methods ``train()`` calls on its ``run``, in source order."""
    tree = ast.parse((REPO / "nlnet" / "engine" / "loop.py").read_text())
    train = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "train")
    calls = [
        node for node in ast.walk(train)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name) and node.func.value.id == "run"
    ]  # fmt: skip
    return [c.func.attr for c in sorted(calls, key=lambda c: (c.lineno, c.col_offset))]


def _train_steps_in_doc() -> list[str]:
    """The step names of the diagram under ``-> train(cfg):`` (one per line, indented five)."""
    block = next(b for b in CODE_BLOCKS if "-> train(cfg):" in b)
    lines = block.split("-> train(cfg):", 1)[1].splitlines()[1:]
    steps = []
    for line in lines:
        if line.startswith("  -> "):
            break
        m = re.match(r"^ {5}([a-z_]+) {2,}", line)
        if m:
            steps.append(m.group(1))
    return steps


def test_train_steps_are_drawn_in_the_order_of_the_code():
    code = _train_steps_in_code()
    assert code[:2] == ["check_dir", "build_data"], code  # the parse found train()'s calls
    assert _train_steps_in_doc() == code


def test_train_steps_in_the_engine_table_follow_the_code():
    row = next(line for line in TEXT.splitlines() if line.startswith("| `engine/loop.py`"))
    named = re.findall(r"`(\w+)`", row)
    code = _train_steps_in_code()
    assert [n for n in named if n in code] == code
