"""Class names of a ``root/<split>/<class>/<file>`` layout, one numbering for every split.

The classes are the sorted class folders of the *training* splits (the split folders whose name
starts with ``train``: ``train``, ``trainval``; every split folder when there is none), so that
``train`` and ``val`` share one numbering. A class folder of another split that no training split
has would be a class the model never trained on: :func:`split_classes` refuses it in one line
naming the folder and the split, for the image and the video tasks alike.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from pathlib import Path

__all__ = [
    "classes_without_items",
    "media_files",
    "split_classes",
    "training_splits",
    "visible_dirs",
]


def visible_dirs(folder: Path) -> list[Path]:
    """Sub-folders of ``folder`` not starting with a dot, sorted by name."""
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def media_files(folder: str | os.PathLike, extensions: Sequence[str]) -> list[Path]:
    """The files under ``folder`` (sub-folders too, symbolic links to folders followed, each
    real folder once) whose name ends with one of ``extensions`` (any case), sorted; names
    starting with a dot are left out (``.DS_Store``, macOS' ``._clip.mp4`` resource forks,
    hidden folders)."""
    exts = tuple(e.lower() for e in extensions)
    found: list[Path] = []
    seen: set[str] = set()
    for top, dirs, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(top)
        if real in seen:  # a link back up the tree, or a second link to one folder
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found += [Path(top, f) for f in files
                  if not f.startswith(".") and f.lower().endswith(exts)]  # fmt: skip
    return sorted(p for p in found if p.is_file())


def training_splits(root: str | os.PathLike) -> list[str]:
    """The split folders of ``root`` that are trained on (``train*``; all of them if none is)."""
    splits = [d.name for d in visible_dirs(Path(root))]
    return [s for s in splits if s.startswith("train")] or splits


def split_classes(root: str | os.PathLike, split: str) -> list[str]:
    """The sorted class names of the training splits of ``root``, checked against ``split``.

    Raises:
        ValueError: ``root/<split>`` holds a class folder that no training split has (named,
            with the split), or no training split has a class folder.
    """
    root = Path(root)
    train = training_splits(root)
    names = sorted({c.name for s in train for c in visible_dirs(root / s)})
    if not names:
        raise ValueError(f"root: no class folders in {str(root)!r}/<split>/")
    known = set(names)
    for folder in visible_dirs(root / split):
        if folder.name not in known:
            raise ValueError(
                f"class folder {folder.name!r} of split {split!r} is in no training split "
                f"({', '.join(train)}): a class never trained; remove it or add training data"
            )
    return names


def classes_without_items(
    classes: Sequence[str], targets: Sequence[int], bad: Collection[int] = ()
) -> list[str]:
    """The names of ``classes`` that no item has, the items in ``bad`` (known unusable: an
    unreadable or too short video) not counted: a class folder with no file the dataset can use
    would be an output trained only to be wrong."""
    have = {int(t) for i, t in enumerate(targets) if i not in bad}
    return [str(c) for k, c in enumerate(classes) if k not in have]
