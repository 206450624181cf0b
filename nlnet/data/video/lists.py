"""Class indices and annotation lists of the video datasets (parsing only, no decoding).

Formats (the module docstring of :mod:`nlnet.data.video.builder` lists the config keys): a class index
is a list of names, a ``.json`` file (a list or ``{name: id}``) or a text file with ``name`` or
``id name`` per line; an annotation list has ``path label`` (single-label), ``path`` (class = parent
folder) or ``path l1 l2,l3`` (multi-label) per line, ``#`` starting a comment.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["annotation_file", "infer_num_classes", "max_label", "parse_list", "read_class_index"]


_CODE_RE = re.compile(r"^[A-Za-z]*\d+$")


def read_class_index(source: str | os.PathLike | Sequence[str]) -> tuple[list[str], dict[str, int]]:
    """Reads class names and the label-token -> class-position map.

    Args:
        source: a list of names, or a ``.json`` file (list of names or ``{name: id}``), or a text
            file with ``name`` or ``id name`` per line.

    Returns:
        ``(names, token_to_position)``; tokens are the ids (as strings) and the names.
    """
    if not isinstance(source, str | os.PathLike):
        names = [str(n) for n in source]
        ids = [str(i) for i in range(len(names))]
    else:
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"classes: class-index file {str(path)!r} does not exist")
        if path.suffix.lower() == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, list):
                names = [str(n) for n in data]
                ids = [str(i) for i in range(len(names))]
            elif isinstance(data, dict):
                pairs = sorted(((int(v), str(k)) for k, v in data.items()), key=lambda p: p[0])
                ids, names = [str(i) for i, _ in pairs], [n for _, n in pairs]
            else:
                raise ValueError(f"classes: {str(path)!r} must hold a list or a {{name: id}} dict")
        else:
            lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
            lines = [ln for ln in lines if ln and not ln.startswith("#")]
            firsts = [ln.split(maxsplit=1) for ln in lines]
            with_ids = bool(lines) and all(len(p) == 2 and _CODE_RE.match(p[0]) for p in firsts)
            if with_ids:
                ids, names = [p[0] for p in firsts], [p[1].strip() for p in firsts]
            else:
                names, ids = lines, [str(i) for i in range(len(lines))]
    if not names:
        raise ValueError(f"classes: no class names in {source!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"classes: duplicate class names in {source!r}")
    token_to_pos = {name: k for k, name in enumerate(names)}
    token_to_pos.update({i: k for k, i in enumerate(ids)})  # ids win over equal names
    return names, token_to_pos


def _resolve_label(token: str, token_to_pos: Mapping[str, int] | None, where: str) -> int:
    if token_to_pos is not None:
        if token in token_to_pos:
            return token_to_pos[token]
        raise ValueError(f"{where}: unknown class {token!r} (not in the class index)")
    try:
        value = int(token)
    except ValueError:
        raise ValueError(
            f"{where}: label {token!r} is not an integer; give a class-index file ('classes') "
            "to use class names"
        ) from None
    if value < 0:
        raise ValueError(f"{where}: labels must be >= 0, got {value}")
    return value


def _annotation_lines(path: Path) -> Iterable[tuple[int, str]]:
    if not path.is_file():
        raise ValueError(f"annotations: file {str(path)!r} does not exist")
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = line.strip()
        if line and not line.startswith("#"):
            yield n, line


def parse_list(
    annotations: Path, root: Path, token_to_pos: Mapping[str, int] | None, multilabel: bool
) -> tuple[list[str], list[Any]]:
    videos: list[str] = []
    targets: list[Any] = []
    for n, line in _annotation_lines(annotations):
        where = f"annotations {str(annotations)!r} line {n}"
        if multilabel:
            parts = [t for t in re.split(r"[\s,;]+", line) if t]
            path, labels = parts[0], parts[1:]
            target: Any = sorted({_resolve_label(t, token_to_pos, where) for t in labels})
        else:
            parts = line.split()
            if len(parts) == 1:
                path = parts[0]
                if token_to_pos is None:
                    raise ValueError(
                        f"{where}: a line without a label needs a class-index file ('classes') "
                        "to take the class from the parent folder name"
                    )
                parent = Path(path).parent.name
                target = _resolve_label(parent, token_to_pos, where)
            else:
                path = " ".join(parts[:-1])
                if len(parts) > 2 and not (root / path).exists() and (root / parts[0]).exists():
                    raise ValueError(
                        f"{where}: expected 'path label', got {len(parts)} fields (frame-folder "
                        "lists with a frame count are not supported; use video files)"
                    )
                target = _resolve_label(parts[-1], token_to_pos, where)
        videos.append(str(root / path))
        targets.append(target)
    if not videos:
        raise ValueError(f"annotations: no entries in {str(annotations)!r}")
    return videos, targets


def max_label(targets: Sequence[Any], multilabel: bool) -> int:
    flat = [i for t in targets for i in t] if multilabel else list(targets)
    return max(flat, default=-1)


def annotation_file(cfg: Any, split: str) -> Path:
    """The annotation file of ``split`` named by a data config (``annotations``, ``root``)."""
    ann = cfg.annotations
    if ann is None:
        raise ValueError(f"data.annotations: required for type={cfg.type!r}")
    if isinstance(ann, Mapping):
        if split not in ann:
            raise ValueError(f"data.annotations: no entry for split {split!r}")
        ann = ann[split]
    elif isinstance(ann, str):
        ann = ann.replace("{split}", split)
    else:
        raise ValueError(f"data.annotations: expected a string or a dict, got {ann!r}")
    path = Path(ann)
    if not path.is_absolute() and cfg.root is not None:
        path = Path(cfg.root) / path
    return path


def infer_num_classes(cfg: Any, multilabel: bool) -> int | None:
    """Largest label + 1 over all annotation files named in the config (consistent splits)."""
    ann = cfg.annotations
    if not isinstance(ann, Mapping):
        return None
    best = -1
    for split in ann:
        path = annotation_file(cfg, split)
        _, targets = parse_list(path, path.parent, None, multilabel)
        best = max(best, max_label(targets, multilabel))
    return best + 1 if best >= 0 else None
