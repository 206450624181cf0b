"""The digits video task on disk: ``root/<split>/<class>/*.mp4`` + ``manifest.json``.

:func:`prepare_digits` writes the clips of :mod:`nlnet.data.digits.video` as real mp4 files (H.264,
``yuv444p``, ``crf 0``: nearly lossless) in the class-per-folder layout read back by
``nlnet.data.video.builder.VideoFolderDataset``, with a manifest that lets a later call skip the work.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from nlnet.data.digits.video import GENERATOR_VERSION, SPLITS, DigitsTaskConfig, generate_split
from nlnet.data.video_io.writer import write_video

__all__ = ["MANIFEST", "default_cache_dir", "prepare_digits", "read_manifest"]

MANIFEST = "manifest.json"


def _write_mp4(path: Path, clip: np.ndarray, fps: int = 8) -> None:
    """Write a uint8 (T, H, W, 3) clip as a (near-)lossless H.264 mp4 (``crf`` 0, ``yuv444p``)."""
    write_video(path, clip, fps=fps, codec="libx264", crf=0, pix_fmt="yuv444p", preset="ultrafast")


def default_cache_dir() -> Path:
    """``$NLNET_CACHE`` or ``~/.cache/nlnet`` (``./.cache/nlnet`` if the home is read-only)."""
    env = os.environ.get("NLNET_CACHE")
    if env:
        return Path(env)
    home = Path.home() / ".cache" / "nlnet"
    try:
        home.mkdir(parents=True, exist_ok=True)
        return home
    except OSError:
        return Path.cwd() / ".cache" / "nlnet"


def read_manifest(root: str | os.PathLike) -> dict[str, Any] | None:
    """The manifest of a generated dataset directory, or None."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def prepare_digits(
    cfg: DigitsTaskConfig,
    root: str | os.PathLike | None = None,
    *,
    force: bool = False,
    progress: bool = False,
) -> Path:
    """Generate the task as mp4 files under ``root`` (skipped when the manifest already matches).

    The layout is ``root/<split>/<colour>/<split>_<index>.mp4`` plus ``root/manifest.json``
    recording the configuration, its fingerprint, the class names and, per split, every clip's
    file, label, cue class and the boxes of the cue and of its match (for visualisation).

    Args:
        cfg: the task configuration.
        root: target directory; default ``default_cache_dir() / "digits-<fingerprint>"``.
        force: regenerate even if a matching manifest exists.
        progress: show a progress bar (tqdm) while writing.

    Returns:
        The dataset root directory.
    """
    root = Path(root) if root is not None else default_cache_dir() / f"digits-{cfg.fingerprint()}"
    manifest = read_manifest(root)
    if not force and manifest is not None and manifest.get("fingerprint") == cfg.fingerprint():
        return root
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    names = cfg.class_names
    out: dict[str, Any] = {
        "generator": "nlnet.data.digits.video",
        "version": GENERATOR_VERSION,
        "fingerprint": cfg.fingerprint(),
        "config": cfg.to_dict(),
        "classes": names,
        "splits": {},
    }
    total = sum(cfg.split_size(s) for s in SPLITS)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="digits: writing mp4", unit="clip", leave=False)
    for split in SPLITS:
        data = generate_split(cfg, split)
        for name in names:
            (tmp / split / name).mkdir(parents=True, exist_ok=True)
        records = []
        for i in range(len(data.labels)):
            rel = f"{split}/{names[data.labels[i]]}/{split}_{i:05d}.mp4"
            _write_mp4(tmp / rel, data.clips[i])
            records.append(
                {
                    "file": rel,
                    "label": int(data.labels[i]),
                    "cue": int(data.cue[i]),
                    "cue_box": [int(v) for v in data.cue_box[i]],
                    "match_box": [int(v) for v in data.match_box[i]],
                }
            )
            if bar is not None:
                bar.update(1)
        out["splits"][split] = records
    if bar is not None:
        bar.close()
    (tmp / MANIFEST).write_text(json.dumps(out, indent=1))
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return root
