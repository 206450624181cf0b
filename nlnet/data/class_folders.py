"""Class names of a ``root/<split>/<class>/<file>`` layout, one numbering for every split.

The classes are the sorted class folders of the *training* splits (the split folders whose name
starts with ``train``: ``train``, ``trainval``; every split folder when there is none), so that
``train`` and ``val`` share one numbering. A class folder of another split that no training split
has would be a class the model never trained on: :func:`split_classes` refuses it in one line
naming the folder and the split, for the image and the video tasks alike.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["split_classes", "training_splits", "visible_dirs"]


def visible_dirs(folder: Path) -> list[Path]:
    """Sub-folders of ``folder`` not starting with a dot, sorted by name."""
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


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
