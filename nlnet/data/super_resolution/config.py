"""The typed ``data`` section of ``task: super_resolution``, beside the photographs and patches
it configures (:mod:`nlnet.data.super_resolution.dataset`).

A bad value is a ``ValueError`` naming the key (``data.<key>: expected ..., got ...``); the
engine reports it as its one-line config error.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SOURCES", "SuperResolutionData"]

#: The photographs a ``super_resolution`` config can train on.
SOURCES: tuple[str, ...] = ("builtin", "self_similar", "folder")


@dataclass(frozen=True)
class SuperResolutionData:
    """The ``data`` section of a ``super_resolution`` config.

    Attributes:
        source: ``"builtin"`` (photographs shipped in scikit-image / scikit-learn, no download;
            splits train, test), ``"self_similar"`` (textures and text of scikit-image, each cut
            into train / val / test bands) or ``"folder"`` (``root/<split>/*.png``).
        root: the folder of a ``"folder"`` source.
        patch: low-resolution training patch size (48 in EDSR).
        num_patches: training patches per epoch (a fresh random patch per item).
        augment: random flips / 90-degree rotations of training patches.
        eval_tile: high-resolution test tile size (``None``: whole images).
        eval_max_tiles: tiles per test image.
    """

    source: str = "builtin"
    root: str | None = None
    patch: int = 48
    num_patches: int = 1000
    augment: bool = True
    eval_tile: int | None = 192
    eval_max_tiles: int = 4

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"data.source: expected one of {list(SOURCES)}, got {self.source!r}")
        if self.source == "folder" and not self.root:
            raise ValueError("data.root: a 'folder' source needs root (root/<split>/*.png)")
        for key in ("patch", "num_patches", "eval_max_tiles"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 1:
                raise ValueError(f"data.{key}: expected a positive int, got {getattr(self, key)!r}")
