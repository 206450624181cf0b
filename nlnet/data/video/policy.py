"""The bad-video policy of the video datasets: skip, warn once per file, say why none is usable.

A video is bad when its frame count could not be read, when it is shorter than ``min_frames``, or
when decoding one of its clips fails later. A bad video's items are ``None`` (dropped and counted
by :func:`nlnet.data.video.batches.collate_skip_bad`); the file is named in one
:class:`nlnet.data.video.batches.BadVideoWarning` per process, and :meth:`BadVideoPolicy.unusable_reason`
names the common cause when no video is left, so that training stops before it starts.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from nlnet.data.video.batches import BadVideoWarning
from nlnet.data.video.sampling import is_too_short

__all__ = ["NAMED", "BadVideoPolicy"]

#: Bad videos named one by one when a dataset is built; the rest are counted in one line.
NAMED = 5


class BadVideoPolicy:
    """Which videos are bad and why, from the frame-count index and later decode failures.

    Built unbound (the settings: ``min_frames``) and handed to a dataset, which binds it to its
    videos (:meth:`bind`).

    Args:
        min_frames: videos with fewer frames are bad (None: one clip's length, given to
            :meth:`bind`).
    """

    def __init__(self, min_frames: int | None = None) -> None:
        self.min_frames = None if min_frames is None else int(min_frames)
        self.videos: list[str] = []
        self.bad: dict[int, str] = {}
        self._warned: set[str] = set()

    def bind(
        self, videos: Sequence[str], index: Sequence[dict[str, Any]], clip_len: int
    ) -> BadVideoPolicy:
        """A policy for ``videos`` (warns naming each bad one).

        Args:
            videos: the dataset's video paths.
            index: per video, ``{"num_frames", "fps", "error"}`` (:func:`build_frame_index`).
            clip_len: the clip length, the default ``min_frames``.
        """
        min_frames = clip_len if self.min_frames is None else self.min_frames
        bound = BadVideoPolicy(min_frames)
        bound.videos = list(videos)
        for v, e in enumerate(index):
            if e.get("error"):
                bound.bad[v] = str(e["error"])
            elif is_too_short(int(e["num_frames"]), min_frames):
                bound.bad[v] = f"too short: {int(e['num_frames'])} frames < min_frames={min_frames}"
        bound._warn_known()
        return bound

    def _warn_known(self) -> None:
        """Warn about the videos already known to be bad, here in the main process, so that
        data-loader workers (copies of this object) do not warn again: each of the first
        :data:`NAMED` by name, the rest in one line; nothing when no video is usable (the
        dataset's one-line error, :meth:`unusable_reason`, says why)."""
        known = sorted(self.bad.items())
        self._warned.update(self.videos[v] for v, _ in known)
        if self.unusable_reason() is not None:
            return
        for v, reason in known[:NAMED]:
            warnings.warn(f"skipping video {self.videos[v]!r}: {reason}", BadVideoWarning,
                          stacklevel=4)  # fmt: skip
        rest = [reason for _, reason in known[NAMED:]]
        if rest:
            short = sum(r.startswith("too short") for r in rest)
            warnings.warn(
                f"skipping {len(rest)} more videos ({short} too short, {len(rest) - short} "
                "unreadable)", BadVideoWarning, stacklevel=4,
            )  # fmt: skip

    def is_bad(self, video: int) -> bool:
        """Whether ``video`` is bad (warns once per file, in every process that asks)."""
        if video in self.bad:
            self.mark(video, self.bad[video])
            return True
        return False

    def mark(self, video: int, reason: str) -> None:
        """Record ``video`` as bad; the first time in this process, warn naming the file."""
        path = self.videos[video]
        self.bad[video] = reason
        if path not in self._warned:
            self._warned.add(path)
            warnings.warn(f"skipping video {path!r}: {reason}", BadVideoWarning, stacklevel=3)

    def unusable_reason(self) -> str | None:
        """Why no video can be used (``None`` while at least one can)."""
        n = len(self.videos)
        if n and len(self.bad) < n:
            return None
        if not n:
            return "the dataset lists no video"
        reasons = list(self.bad.values())
        first = self.videos[min(self.bad)]
        if all(r.startswith("too short") for r in reasons):
            return (
                f"all {n} videos are shorter than a clip of min_frames={self.min_frames} frames "
                f"(e.g. {first!r}: {reasons[0]}); use shorter clips (data.num_frames, "
                "data.stride) or data.min_frames"
            )
        return f"none of the {n} videos can be decoded (e.g. {first!r}: {self.bad[min(self.bad)]})"
