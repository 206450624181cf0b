"""Griffe extension: the docstrings' reST-isms as Markdown, at build time (issue 26, item 8).

The package's Google-style docstrings use two reST constructs that Markdown prints literally:

* cross-reference roles (``:class:`~nlnet.x.Y```, ``:func:``, ``:mod:``, ``:meth:``,
  ``:attr:``, ``:data:``, ``:exc:``, ``:obj:``) become mkdocstrings cross-references
  (``[`Y`][nlnet.x.Y]`` for a ``~`` target, the target as written otherwise) when the target
  is an nlnet object that the API pages render; any other target (``torch.nn.Module``, a
  private helper, a name that does not resolve) becomes a plain code span, so that
  ``mkdocs build --strict`` never meets an unresolved reference. Unqualified (``Foo``,
  ``Run.step``) and relative (``.images``) targets are resolved in the object's scope;
* a paragraph ending in ``::`` (``text::`` -> ``text:``, a bare ``::`` line dropped) and the
  indented literal block after it become a fenced code block, as does a ``>>>`` doctest
  paragraph outside an ``Examples:`` section (griffe renders those itself; it shows the
  singular ``Example:`` as a note, whose ``>>>`` lines Markdown would take for quotes);
* a hyperlink `` `text <https://...>`_ `` becomes ``[text](https://...)``.

``mkdocs.yml`` loads :class:`RestToMarkdown` in the Python handler's ``extensions:``; the text
functions (:func:`convert`, :func:`convert_roles`, :func:`convert_literal_blocks`) are tested
on sample docstrings in ``tests/test_docs_site.py``.
"""

from __future__ import annotations

import ast
import pkgutil
import re
from collections.abc import Callable
from typing import Any

import griffe

LINK = re.compile(r"`([^`<]+?)\s*<(https?://[^>]+)>`__?")
ROLE = re.compile(r":(?:py:)?(class|func|mod|meth|attr|data|exc|obj|const):`([^`]+)`")
#: griffe parses the ``>>>`` lines of an ``Examples:`` section itself (``Example:`` is a note).
EXAMPLES = "Examples"
#: Google sections whose entries are ``name: text`` items (a block's fence goes inside the item).
ITEM_SECTIONS = ("Args", "Arguments", "Parameters", "Params", "Attributes", "Raises",
                 "Exceptions", "Returns", "Yields", "Receives", "Warns", "Warnings",
                 "Keyword Args", "Keyword Arguments", "Other Parameters", "Methods",
                 "Functions", "Classes", "Modules")  # fmt: skip
HEADER = re.compile(r"^\s*([A-Z][A-Za-z ]*):\s*$")
#: The packages that the API pages render module by module (docs/_hooks/gen_pages.py).
API_PACKAGES = ("functional", "layers", "models", "data", "analysis", "engine", "inference")

Resolver = Callable[[str], "str | None"]


# ------------------------------------------------------------------------------ roles
def convert_roles(text: str, resolve: Resolver) -> str:
    """Every role of ``text`` as a cross-reference (``resolve(target)`` gives its path) or code.

    ``resolve`` takes the target as written (without ``~`` or ``!``) and returns the full path
    of a rendered object, or ``None`` when the target should stay plain code.
    """

    def one(m: re.Match) -> str:
        target = m.group(2).strip()
        if "<" in target and target.endswith(">"):  # :class:`title <target>`
            title, target = (s.strip() for s in target[:-1].split("<", 1))
        else:
            title = None
        short = target.startswith("~")
        target = re.sub(r"\s+", "", target.lstrip("~!"))  # a target wrapped over two lines
        shown = title or (target.rsplit(".", 1)[-1] if short else target.lstrip("."))
        path = resolve(target)
        return f"[`{shown}`][{path}]" if path else f"`{shown}`"

    return LINK.sub(r"[\1](\2)", ROLE.sub(one, text))


# ------------------------------------------------------------------------------ literal blocks
def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _language(block: list[str]) -> str:
    text = "\n".join(block)
    if text.lstrip().startswith(">>>"):
        return "pycon"
    try:
        ast.parse(text)
    except SyntaxError:
        return "text"
    return "python"


def _fence(block: list[str], indent: str, after: list[str]) -> list[str]:
    """``block`` fenced at ``indent``; a blank line first unless ``after`` ends in one or in the
    header of the section the fence opens (griffe takes a header then a blank line for text)."""
    while block and not block[-1].strip():
        block.pop()
    cut = min((_indent(b) for b in block if b.strip()), default=0)
    body = [indent + b[cut:] if b.strip() else "" for b in block]
    lang = _language([b[cut:] for b in block])
    last = after[-1] if after else ""
    header = HEADER.match(last) and _indent(last) < len(indent)  # the fence opens its section
    blank = [""] if last.strip() and not header else []
    return [*blank, f"{indent}```{lang}", *body, f"{indent}```", ""]


def convert_literal_blocks(text: str) -> str:
    """``::`` literal blocks and doctest paragraphs of ``text`` as fenced code blocks."""
    lines = text.splitlines()
    out: list[str] = []
    i, fenced, section = 0, False, None  # section: (name, indent of its header)
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
        if fenced or stripped.startswith(("```", "~~~")):
            out.append(line)
            i += 1
            continue
        if not stripped and out and out[-1] == "":
            i += 1  # one blank line (a fence we wrote ends in one)
            continue
        if section is not None and stripped and _indent(line) <= section[1]:
            section = None  # left the Google section
        if (m := HEADER.match(line)) and not stripped.endswith("::"):
            section = (m.group(1), _indent(line))
        if stripped.endswith("::") and not stripped.endswith(":::"):
            base = _indent(line)
            item = section is not None and section[0] in ITEM_SECTIONS
            fence_at = base + 4 if item and base == section[1] + 4 else base
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and _indent(lines[j]) > base:
                end = j
                while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > base):
                    end += 1
                if stripped != "::":
                    head = line.rstrip()[:-2]
                    out.append(head.rstrip() if head.endswith(" ") else head + ":")
                out += _fence(lines[j:end], " " * fence_at, after=out)
                i = end
                continue
        if stripped.startswith(">>>") and (section is None or section[0] != EXAMPLES):
            end = i
            while end < len(lines) and lines[end].strip():
                end += 1
            out += _fence(lines[i:end], " " * _indent(line), after=out)
            i = end
            continue
        out.append(line)
        i += 1
    return "\n".join(out).strip("\n")


def convert(text: str, resolve: Resolver) -> str:
    """Both conversions: the roles (outside code blocks) and the literal blocks."""
    parts = re.split(r"(^[ \t]*```.*?^[ \t]*```[ \t]*$)", convert_literal_blocks(text),
                     flags=re.M | re.S)  # fmt: skip
    return "".join(p if p.lstrip().startswith("```") else convert_roles(p, resolve) for p in parts)


# ------------------------------------------------------------------------------ griffe
def _lookup(root: Any, path: str, depth: int = 0) -> Any:
    """The object at ``path`` in the collection ``root`` (aliases followed), or ``None``."""
    parts = path.split(".")
    try:
        obj = root[parts[0]]
        for part in parts[1:]:
            if obj.is_alias:
                if depth > 10:
                    return None
                obj = _lookup(root, obj.target_path, depth + 1)
                if obj is None:
                    return None
            obj = obj.members[part]
    except (KeyError, AttributeError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    if obj.is_alias:
        return None if depth > 10 else _lookup(root, obj.target_path, depth + 1)
    return obj


def _runtime_path(path: str) -> str | None:
    """Where the object that ``path`` names at run time is defined (``None``: not found).

    Names exported lazily by a package ``__getattr__`` (``nlnet.engine.lazy``) are members that
    griffe cannot see; importing the package finds their defining module.
    """
    try:
        obj = pkgutil.resolve_name(path)
    except (ImportError, AttributeError, ValueError):
        return None
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{module}.{qualname}" if isinstance(module, str) and qualname else None


def is_rendered(obj: Any) -> bool:
    """Whether the API pages render ``obj`` (and so give it an anchor)."""
    parts = obj.path.split(".")
    if parts[0] != "nlnet" or len(parts) < 3 or parts[1] not in API_PACKAGES:
        return False  # outside the API pages, or a package page without its heading
    if any(p.startswith("_") and p != "__call__" for p in parts[1:]):
        return False
    node = obj
    while not node.is_module:
        if not node.docstring:  # show_if_no_docstring: false
            return False
        node = node.parent
    return True


def resolver_for(obj: Any) -> Resolver:
    """Resolves role targets in the scope of the griffe object ``obj``."""
    root = obj.modules_collection
    module = obj.module
    package = module if module.is_package else (module.parent or module)

    def resolve(target: str) -> str | None:
        candidates = []
        if target.startswith("."):
            candidates = [module.path + target, package.path + target]
        else:
            head, _, rest = target.partition(".")
            try:
                full = obj.resolve(head)
                candidates.append(full + ("." + rest if rest else ""))
            except (griffe.NameResolutionError, AttributeError):
                pass
            candidates.append(target)
        if not target.startswith("."):  # a lazy package export (PEP 562), seen when imported
            candidates += [p for p in (_runtime_path(f"{module.path}.{target}"),
                                       _runtime_path(target)) if p]  # fmt: skip
        for path in candidates:
            found = _lookup(root, path)
            if found is not None and is_rendered(found):
                return found.path
        return None

    return resolve


class RestToMarkdown(griffe.Extension):
    """Rewrites every docstring of a loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._walk(pkg, set())

    def _walk(self, obj: Any, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value, resolver_for(obj))
        for member in obj.members.values():
            if not member.is_alias:
                self._walk(member, seen)
