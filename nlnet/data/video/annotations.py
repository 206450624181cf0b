"""Readers for the official Kinetics and Charades annotation files.

They turn the CSV files the datasets are distributed with into the annotation lists that
:class:`nlnet.data.video.builder.VideoListDataset` (Kinetics, single label) and
:class:`nlnet.data.video.builder.MultiLabelVideoDataset` (Charades, multi-label) read, so a config
only names the written list (``data.type: list`` / ``multilabel``, ``data.annotations``,
``data.classes``). "Non-local Neural Networks" (Wang, Girshick, Gupta, He, CVPR 2018,
arXiv:1711.07971) trains on Kinetics-400 (Section 5.1: train on the training set, test on the
validation set) and Charades (Section 5.2: 157 classes, per-category sigmoid, mAP on the val
split).

Kinetics (``kinetics_{train,val,test}.csv``): header ``label,youtube_id,time_start,time_end,split``
(``is_cc`` may follow; the test file has no ``label``). A clip is stored, as the ActivityNet
crawler for Kinetics writes it, under ``<root>/<label>/<youtube_id>_<start:06d>_<end:06d>.mp4``
(start/end in whole seconds); both the folder and the file name are templates.

Charades (``Charades_v1_{train,test}.csv``): header
``id,subject,scene,quality,relevance,verified,script,objects,descriptions,actions,length``;
``actions`` is ``c### start end`` segments separated by ``;`` (seconds, may be empty), ``length``
the video length in seconds; videos are ``<id>.mp4`` (``Charades_v1_480/``); the classes file
``Charades_v1_classes.txt`` has ``c### name`` lines. A video's training target is the union of its
action classes (a multi-hot vector); :meth:`CharadesVideo.labels_between` gives the classes
active within a time window for clip-level targets.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "KINETICS_FILE",
    "KINETICS_DIR",
    "KineticsClip",
    "CharadesVideo",
    "ListReport",
    "read_kinetics_csv",
    "write_kinetics_list",
    "read_charades_csv",
    "read_charades_classes",
    "write_charades_list",
]

#: File name of a downloaded Kinetics clip (the ActivityNet crawler's ``%06d`` trim format).
KINETICS_FILE = "{youtube_id}_{time_start:06d}_{time_end:06d}.mp4"
#: Folder of a clip below the video root ("" for one flat folder).
KINETICS_DIR = "{label}"

_KINETICS_REQUIRED = ("youtube_id", "time_start", "time_end")
_CHARADES_REQUIRED = ("id", "actions")


def _rows(path: str | os.PathLike, required: Sequence[str], what: str) -> Iterable[tuple]:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{what}: no such file {str(path)!r}")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in required if c not in header]
        if missing:
            raise ValueError(
                f"{what} {str(path)!r}: missing column(s) {missing}; header is {header}"
            )
        for n, row in enumerate(reader, start=2):
            yield n, {k.strip(): (v or "").strip() for k, v in row.items() if k is not None}


def _seconds(value: str, where: str, name: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{where}: {name} {value!r} is not a number of seconds") from None


# ------------------------------------------------------------------------------------ Kinetics
@dataclass(frozen=True)
class KineticsClip:
    """One row of a Kinetics CSV: a 10 s clip of a YouTube video."""

    youtube_id: str
    time_start: int
    time_end: int
    split: str
    label: str | None = None  # None in the test file

    def path(self, file: str = KINETICS_FILE, folder: str = KINETICS_DIR) -> str:
        """Relative path ``<folder>/<file>`` of the downloaded clip (templates, see module)."""
        fields = {
            "youtube_id": self.youtube_id,
            "time_start": self.time_start,
            "time_end": self.time_end,
            "split": self.split,
            "label": self.label or "",
            "label_underscore": (self.label or "").replace(" ", "_"),
        }
        name = file.format(**fields)
        sub = folder.format(**fields) if folder else ""
        return f"{sub}/{name}" if sub else name


def read_kinetics_csv(path: str | os.PathLike) -> list[KineticsClip]:
    """Read ``kinetics_*.csv`` (``label,youtube_id,time_start,time_end,split[,is_cc]``)."""
    clips = []
    for n, row in _rows(path, _KINETICS_REQUIRED, "kinetics csv"):
        where = f"kinetics csv {str(path)!r} line {n}"
        start = _seconds(row["time_start"], where, "time_start")
        end = _seconds(row["time_end"], where, "time_end")
        if not start.is_integer() or not end.is_integer() or end <= start:
            raise ValueError(f"{where}: expected whole seconds start < end, got {start}, {end}")
        if not row["youtube_id"]:
            raise ValueError(f"{where}: empty youtube_id")
        label = row.get("label") or None
        clips.append(KineticsClip(row["youtube_id"], int(start), int(end), row.get("split", ""),
                                  label))  # fmt: skip
    if not clips:
        raise ValueError(f"kinetics csv {str(path)!r}: no rows")
    return clips


@dataclass
class ListReport:
    """What a ``write_*_list`` function wrote."""

    list_file: Path
    classes_file: Path | None
    written: int = 0
    missing: list[str] = field(default_factory=list)  # videos not found under video_root


def _keep(rel: str, video_root: Path | None, missing: str, report: ListReport) -> bool:
    if video_root is None or (video_root / rel).is_file():
        return True
    if missing == "error":
        raise ValueError(f"video_root: no video {str(video_root / rel)!r}")
    report.missing.append(rel)
    return missing == "keep"


def _check_missing(missing: str) -> None:
    if missing not in ("skip", "keep", "error"):
        raise ValueError(f"missing: expected 'skip', 'keep' or 'error', got {missing!r}")


def write_kinetics_list(
    csv_path: str | os.PathLike,
    list_path: str | os.PathLike,
    *,
    classes: str | os.PathLike | Sequence[str] | None = None,
    classes_out: str | os.PathLike | None = None,
    video_root: str | os.PathLike | None = None,
    file: str = KINETICS_FILE,
    folder: str = KINETICS_DIR,
    missing: str = "skip",
) -> ListReport:
    """Write a ``path class_id`` list (:class:`~nlnet.data.video.builder.VideoListDataset`).

    Args:
        csv_path: ``kinetics_train.csv`` / ``kinetics_val.csv``.
        list_path: the list to write; paths in it are relative to ``video_root``.
        classes: the class names in id order (a list or a JSON file written by an earlier call,
            so train and val share one numbering); default: the sorted labels of this CSV.
        classes_out: where to write the class names (JSON list, ``data.classes``).
        video_root: when given, clips whose file is absent are handled by ``missing``.
        file, folder: path templates (fields ``youtube_id``, ``time_start``, ``time_end``,
            ``split``, ``label``, ``label_underscore``).
        missing: ``"skip"`` (default: leave the clip out, listed in the report), ``"keep"`` or
            ``"error"``.
    """
    _check_missing(missing)
    clips = read_kinetics_csv(csv_path)
    unlabeled = [c.youtube_id for c in clips if c.label is None]
    if unlabeled:
        raise ValueError(f"kinetics csv {str(csv_path)!r}: {len(unlabeled)} rows without label")
    if classes is None:
        names = sorted({c.label for c in clips})
    elif isinstance(classes, (str, os.PathLike)):
        names = [str(n) for n in json.loads(Path(classes).read_text(encoding="utf-8"))]
    else:
        names = [str(n) for n in classes]
    index = {n: i for i, n in enumerate(names)}
    unknown = sorted({c.label for c in clips} - set(index))
    if unknown:
        raise ValueError(f"classes: label(s) {unknown[:5]} of {str(csv_path)!r} not in classes")
    root = Path(video_root) if video_root is not None else None
    report = ListReport(Path(list_path), Path(classes_out) if classes_out else None)
    lines = []
    for c in clips:
        rel = c.path(file, folder)
        if _keep(rel, root, missing, report):
            lines.append(f"{rel} {index[c.label]}")
    _write(report, lines, names)
    return report


def _write(report: ListReport, lines: list[str], names: list[str]) -> None:
    report.list_file.parent.mkdir(parents=True, exist_ok=True)
    report.list_file.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    report.written = len(lines)
    if report.classes_file is not None:
        report.classes_file.parent.mkdir(parents=True, exist_ok=True)
        report.classes_file.write_text(json.dumps(names, indent=0) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------ Charades
@dataclass(frozen=True)
class CharadesVideo:
    """One row of a Charades CSV."""

    id: str
    actions: tuple[tuple[str, float, float], ...]  # (class code, start s, end s)
    length: float | None = None
    scene: str = ""

    @property
    def labels(self) -> list[str]:
        """The video's classes (union of its segments), sorted: the video-level target."""
        return sorted({code for code, _, _ in self.actions})

    def labels_between(self, t0: float, t1: float) -> list[str]:
        """Classes with a segment overlapping ``[t0, t1]`` seconds (clip-level target)."""
        return sorted({code for code, s, e in self.actions if s <= t1 and e >= t0})


def _parse_actions(text: str, where: str) -> tuple[tuple[str, float, float], ...]:
    out = []
    for seg in filter(None, (s.strip() for s in text.split(";"))):
        parts = seg.split()
        if len(parts) != 3 or not parts[0].startswith("c"):
            raise ValueError(f"{where}: action {seg!r} is not 'c### start end'")
        start, end = (_seconds(p, where, "action time") for p in parts[1:])
        out.append((parts[0], start, end))
    return tuple(out)


def read_charades_csv(path: str | os.PathLike) -> list[CharadesVideo]:
    """Read ``Charades_v1_train.csv`` / ``Charades_v1_test.csv``."""
    videos = []
    for n, row in _rows(path, _CHARADES_REQUIRED, "charades csv"):
        where = f"charades csv {str(path)!r} line {n}"
        if not row["id"]:
            raise ValueError(f"{where}: empty id")
        length = _seconds(row["length"], where, "length") if row.get("length") else None
        actions = _parse_actions(row["actions"], where)
        videos.append(CharadesVideo(row["id"], actions, length, row.get("scene", "")))
    if not videos:
        raise ValueError(f"charades csv {str(path)!r}: no rows")
    return videos


def read_charades_classes(path: str | os.PathLike) -> list[tuple[str, str]]:
    """``Charades_v1_classes.txt``: ``[(code, name), ...]`` in file order (``c000`` first)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"classes: no such file {str(path)!r}")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            code, _, name = line.strip().partition(" ")
            if not code.startswith("c") or not name:
                raise ValueError(f"classes {str(path)!r} line {n}: expected 'c### name'")
            out.append((code, name.strip()))
    return out


def write_charades_list(
    csv_path: str | os.PathLike,
    list_path: str | os.PathLike,
    *,
    classes: str | os.PathLike | None = None,
    video_root: str | os.PathLike | None = None,
    file: str = "{id}.mp4",
    missing: str = "skip",
) -> ListReport:
    """Write a ``path c001,c017`` multi-label list (:class:`MultiLabelVideoDataset`).

    The labels are the class codes, so the config's ``data.classes`` is the official
    ``Charades_v1_classes.txt`` (its ``c### name`` lines map codes to ids in file order). A video
    without actions gets a line without labels (an all-zero target).

    Args:
        csv_path: the Charades CSV.
        list_path: the list to write (paths relative to ``video_root``).
        classes: ``Charades_v1_classes.txt``; when given, every code must be in it.
        video_root: when given, videos whose file is absent are handled by ``missing``.
        file: file-name template (field ``id``).
        missing: ``"skip"``, ``"keep"`` or ``"error"``.
    """
    _check_missing(missing)
    videos = read_charades_csv(csv_path)
    if classes is not None:
        known = {code for code, _ in read_charades_classes(classes)}
        unknown = sorted({c for v in videos for c in v.labels} - known)
        if unknown:
            raise ValueError(f"classes: action(s) {unknown[:5]} not in {str(classes)!r}")
    root = Path(video_root) if video_root is not None else None
    report = ListReport(Path(list_path), None)
    lines = []
    for v in videos:
        rel = file.format(id=v.id)
        if _keep(rel, root, missing, report):
            lines.append(f"{rel} {','.join(v.labels)}".rstrip())
    _write(report, lines, [])
    return report
