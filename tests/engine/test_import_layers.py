"""Imports flow one way: functional -> layers -> models -> data/analysis -> engine -> inference/demo
-> commands.

Every ``import nlnet.X`` / ``from nlnet.X import`` in the package (function-level ones too) is
read from the source with ``ast``; a module may import only from its own or a lower layer, and
the graph of module imports has no cycle.  ``make lint`` runs this file.

The top-level ``nlnet/__init__.py`` is the one exception: it re-exports names of every layer
(``nlnet.create_model``, ``nlnet.predict``, ...) lazily, through its module ``__getattr__`` and for
type checkers under ``if TYPE_CHECKING:``; it imports no nlnet module when ``import nlnet`` runs.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "nlnet"

#: Layer of each top-level part of the package; a module imports only from layers <= its own.
LAYERS = {
    "__init__": 0,
    "functional": 1,
    "layers": 2,
    "models": 3,
    "data": 4,
    "analysis": 4,
    "engine": 5,
    "inference": 6,
    "segmentation": 6,
    "export": 6,
    "model_input": 6,
    "demo": 6,
    "commands": 7,
    "cli": 8,
    "__main__": 9,
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("nlnet")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("nlnet"):
                out.add(node.module)
    return out


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else "__init__"]


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {m: {i for i in _imports(p) if i in modules and i != m} for m, p in modules.items()}


def test_imports_never_go_up_a_layer():
    upward = [
        f"{m} imports {i}"
        for m, deps in _graph().items()
        for i in deps
        if _layer(i) > _layer(m) and m != "nlnet"  # the lazy facade, checked below
    ]
    assert not upward, "upward imports:\n" + "\n".join(sorted(upward))


def test_top_level_package_imports_lazily():
    """``nlnet/__init__.py`` imports nlnet modules only inside functions or ``if TYPE_CHECKING``."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    eager = []
    for node in tree.body:  # module-level statements only
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                break
            if isinstance(sub, ast.ImportFrom) and (sub.module or "").startswith("nlnet"):
                eager.append(sub.module)
            if isinstance(sub, ast.Import) and any(a.name.startswith("nlnet") for a in sub.names):
                eager.append(ast.unparse(sub))
    assert not eager, f"nlnet/__init__.py imports at import time: {eager}"
    code = "import sys, nlnet; print(sorted(m for m in sys.modules if m.startswith(('nlnet.', 'torch'))))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True,
        env={"PYTHONPATH": str(PACKAGE.parent), "PATH": ""},
    )  # fmt: skip
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_module_imports_have_no_cycle():
    graph = _graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for i in sorted(graph.get(m, ())):
            if state.get(i) == 1:
                cycles.append(" -> ".join([*stack[stack.index(i) :], i]))
            elif i not in state:
                visit(i, [*stack, i])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_help_imports_no_torch():
    code = (
        "import sys\n"
        "from nlnet.cli import main\n"
        "for argv in (['--help'], ['train', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', file=sys.stderr)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True,
        env={"PYTHONPATH": str(PACKAGE.parent), "PATH": ""},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "examples:" in out.stdout and "usage: nlnet" in out.stdout
    assert out.stderr.strip().endswith("NO-TORCH"), out.stderr


def _graph_with_submodules() -> dict[str, set[str]]:
    """:func:`_graph` plus the submodules named in ``from package import module``."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = _graph()
    for m, p in modules.items():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                graph[m] |= {f"{node.module}.{a.name}" for a in node.names} & set(modules)
        graph[m].discard(m)
    return graph
