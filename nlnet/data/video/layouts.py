"""Dataset layouts: class folders (Kinetics) and annotation lists (UCF101/HMDB51, Charades).

Each is a :class:`nlnet.data.video.dataset.VideoClipDataset` whose videos and targets come from
the layout; the formats are described in :mod:`nlnet.data.video.builder` and :mod:`nlnet.data.video.lists`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nlnet.data.class_folders import media_files, split_classes, visible_dirs
from nlnet.data.video.config import VIDEO_EXTENSIONS
from nlnet.data.video.dataset import VideoClipDataset
from nlnet.data.video.lists import max_label, parse_list, read_class_index
from nlnet.data.video_io.frame_index import index_file_for

__all__ = ["VIDEO_EXTENSIONS", "MultiLabelVideoDataset", "VideoFolderDataset", "VideoListDataset"]


class VideoFolderDataset(VideoClipDataset):
    """Class-per-folder layout (Kinetics): ``root/<split>/<class>/<video>``.

    Args:
        root: dataset root.
        split: sub-folder of ``root`` (e.g. ``"train"``, ``"val"``); None when ``root`` itself
            holds the class folders.
        classes: class names or a class-index file; default: the sorted class folders of the
            training splits (:func:`nlnet.data.class_folders.split_classes`), so that every split
            numbers classes the same way; a class folder of ``split`` no training split has is
            refused (``ValueError`` naming the folder and the split).
        extensions: video file extensions (case-insensitive).
        cache: True (JSON index in ``root``), False (memory only) or a JSON path.
        **parts: the parts and settings of :class:`VideoClipDataset` (``sampler``, ``decoder``,
            ``transform``, ``policy``; :func:`nlnet.data.video.builder.build_parts`).
    """

    def __init__(
        self,
        root: str | os.PathLike,
        split: str | None = "train",
        *,
        classes: str | os.PathLike | Sequence[str] | None = None,
        extensions: Sequence[str] = VIDEO_EXTENSIONS,
        cache: bool | str | os.PathLike | None = True,
        **parts: Any,
    ) -> None:
        root = Path(root)
        split_dir = root if split is None else root / split
        if not split_dir.is_dir():
            raise ValueError(f"root: folder {str(split_dir)!r} does not exist")
        exts = tuple(e.lower() for e in extensions)
        if classes is None:
            if split is None:
                names = [c.name for c in visible_dirs(split_dir)]
                if not names:
                    raise ValueError(f"root: no class folders in {str(split_dir)!r}")
            else:
                names = split_classes(root, split)
            token_to_pos = {n: k for k, n in enumerate(names)}
        else:
            names, token_to_pos = read_class_index(classes)
        videos: list[str] = []
        targets: list[int] = []
        for class_dir in visible_dirs(split_dir):
            if class_dir.name not in token_to_pos:
                raise ValueError(f"classes: folder {class_dir.name!r} is not in the class index")
            files = media_files(class_dir, exts)
            videos += [str(f) for f in files]
            targets += [token_to_pos[class_dir.name]] * len(files)
        if not videos:
            raise ValueError(f"root: no videos with extensions {exts} under {str(split_dir)!r}")
        self.root = root
        self.split = split
        labeled = list(zip(videos, targets))
        super().__init__(labeled, names, index_file=index_file_for(root, cache), **parts)
        self.from_folders = classes is None  # numbered by the sorted class folders


class VideoListDataset(VideoClipDataset):
    """Annotation-list layout (UCF101/HMDB51 style): ``path label`` per line.

    Args:
        annotations: the list file. A line is ``path label`` (label = class id or name) or just
            ``path`` (class = parent folder name, needs ``classes``); ``#`` starts a comment.
        root: folder the paths are relative to (default: the list file's folder).
        classes: class names or a class-index file (see the module docstring).
        num_classes: number of classes when there is no class index (default: largest label + 1).
        cache: True (JSON index next to the list file), False (memory only) or a JSON path.
        **parts: the parts and settings of :class:`VideoClipDataset` (``sampler``, ``decoder``,
            ``transform``, ``policy``; :func:`nlnet.data.video.builder.build_parts`).
    """

    _multilabel = False

    def __init__(
        self,
        annotations: str | os.PathLike,
        root: str | os.PathLike | None = None,
        *,
        classes: str | os.PathLike | Sequence[str] | None = None,
        num_classes: int | None = None,
        cache: bool | str | os.PathLike | None = True,
        **parts: Any,
    ) -> None:
        annotations = Path(annotations)
        root_path = annotations.parent if root is None else Path(root)
        if classes is not None:
            names, token_to_pos = read_class_index(classes)
            if num_classes is not None and num_classes != len(names):
                raise ValueError(
                    f"num_classes={num_classes} disagrees with the {len(names)} classes given"
                )
        else:
            names, token_to_pos = [], None
        videos, targets = parse_list(annotations, root_path, token_to_pos, self._multilabel)
        if token_to_pos is None:
            n = max_label(targets, self._multilabel) + 1 if num_classes is None else num_classes
            if not isinstance(n, int) or n < 1:
                raise ValueError(f"num_classes must be a positive integer, got {n!r}")
            names = [str(i) for i in range(n)]
        self.root = root_path
        self.annotations = annotations
        super().__init__(
            list(zip(videos, targets)),
            names,
            multilabel=self._multilabel,
            index_file=index_file_for(annotations.parent, cache),
            **parts,
        )


class MultiLabelVideoDataset(VideoListDataset):
    """Multi-label lists (Charades, Section 5.2): ``path l1 l2,l3 ...`` per line.

    Labels are separated by spaces, commas or semicolons and are class ids or names; the target is
    a float multi-hot vector of ``num_classes`` (for a per-category sigmoid + BCE loss). Arguments
    as in :class:`VideoListDataset`; paths must not contain spaces or commas.
    """

    _multilabel = True
