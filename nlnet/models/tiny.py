"""A tiny C2D ResNet family for CPUs: the models of ``nlnet demo``.

The same topology as the C2D baseline of Table 1 in ``001_4890b07ab5be0a19.txt`` (a stem,
four stages res2..res5 of bottleneck blocks with ``1x1 / 3x3 / 1x1`` kernels and only 2D
(``1 x k x k``) convolutions, global average pooling, dropout, a linear classifier), scaled down
for small clips (e.g. 8 x 32 x 32) so that it trains in a minute on a laptop CPU:

* the ``7x7`` stride-2 stem becomes a ``1x3x3`` stride-1 convolution followed by the ``1x2x2``
  max pool (total stride 16 at res5 instead of 32, so a 32 x 32 frame keeps a 4 x 4 res4 grid);
* ``width`` (bottleneck width of res2, 64 in Table 1) defaults to 8 and the stages hold
  ``(1, 2, 3, 1)`` residual blocks;
* by default no temporal pooling (``temporal_pool=False``): every frame keeps its own features
  until the global average pool, so the C2D baseline is exactly a sum of per-frame terms. With
  ``temporal_pool=True`` the paper's pool1/pool2 temporal strides of 2 are used.

The non-local placements are the paper's presets applied to this stage structure
(:func:`nlnet.models.surgery.non_local_paths`): ``nl1`` = one block in res4 right before its
last residual block (Table 2a), ``nl5`` = 2 blocks in res3 + 3 in res4 (Table 2c), and the
``space`` / ``time`` / ``spacetime`` variants of Table 2d.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from nlnet.models.registry import _split_block_options, register_model
from nlnet.models.resnet3d import ResNet3d
from nlnet.models.surgery import insert_non_local

__all__ = ["TinyC2D", "build_tiny"]

TINY_LAYERS: tuple[int, int, int, int] = (1, 2, 3, 1)


class TinyC2D(ResNet3d):
    """A narrow C2D ResNet (Table 1 topology) with a small stem, for tiny clips on a CPU.

    Args:
        layers: residual blocks of res2..res5 (default ``(1, 2, 3, 1)``).
        num_classes: number of logits.
        width: bottleneck width of res2; stage ``k`` uses ``width * 2**k`` (outputs ``4x``).
        temporal_pool: use the paper's temporal strides 2 in pool1 and pool2 (default off: the
            frames are never mixed before the global pool).
        dropout: dropout ratio before ``fc``.
        in_channels: input channels.

    Input ``(B, in_channels, T, H, W)`` with ``H, W >= 16``; output ``(B, num_classes)``.
    """

    def __init__(
        self,
        layers: Sequence[int] = TINY_LAYERS,
        num_classes: int = 4,
        *,
        width: int = 8,
        temporal_pool: bool = False,
        dropout: float = 0.2,
        in_channels: int = 3,
    ) -> None:
        if not isinstance(temporal_pool, bool):
            raise TypeError(f"temporal_pool: expected a bool, got {temporal_pool!r}")
        super().__init__(
            layers,
            num_classes,
            width=width,
            dropout=dropout,
            in_channels=in_channels,
            temporal_strides=(1, 2, 2) if temporal_pool else (1, 1, 1),
        )
        self.temporal_pool = temporal_pool
        # Small-input stem: 1x3x3 conv, stride 1 (the frames are 32 px, not 224 px).
        self.conv1 = nn.Conv3d(in_channels, width, (1, 3, 3), padding=(0, 1, 1), bias=False)
        nn.init.kaiming_normal_(self.conv1.weight, mode="fan_out", nonlinearity="relu")
        if temporal_pool:
            self.maxpool = nn.MaxPool3d((3, 2, 2), stride=(2, 2, 2), padding=(1, 0, 0))
        else:
            self.maxpool = nn.MaxPool3d((1, 2, 2), stride=(1, 2, 2))


def build_tiny(blocks: str | None = None, **kwargs: Any) -> nn.Module:
    """Build a :class:`TinyC2D` with non-local blocks at a placement preset.

    Args:
        blocks: ``None`` (the C2D baseline) or a preset (``"nl1"``, ``"nl5"``, ``"nl10"``,
            ``"res2"``..``"res5"``) or explicit module paths.
        **kwargs: :class:`TinyC2D` options, ``nl_at`` (overrides ``blocks``), ``nl_options`` and
            the block options of :data:`nlnet.models.registry.BLOCK_OPTIONS` (e.g. ``mode``).
    """
    at = kwargs.pop("nl_at", blocks)
    opts = _split_block_options(kwargs)
    model = TinyC2D(**kwargs)
    if at:
        insert_non_local(model, at, **opts)
    elif opts:
        raise ValueError(
            f"block options {sorted(opts)} given to a model without non-local blocks; "
            "pass nl_at= to place blocks"
        )
    return model


def _cfg(blocks: str | None, mode: str = "spacetime") -> dict[str, Any]:
    return {
        "num_classes": 4,
        "input_size": (3, 8, 32, 32),
        "task": "video_classification",
        "family": "tiny",
        "arch": "c2d",
        "blocks": blocks,
        "mode": mode,
        "test_overrides": {"width": 2},
        "test_input_size": (3, 4, 32, 32),
    }


@register_model(name="c2d_tiny", default_cfg=_cfg(None))
def c2d_tiny(**kwargs: Any) -> nn.Module:
    """Tiny C2D baseline for CPUs (the demo's baseline; no non-local block)."""
    return build_tiny(None, **kwargs)


@register_model(name="c2d_tiny_nl1", default_cfg=_cfg("nl1"))
def c2d_tiny_nl1(**kwargs: Any) -> nn.Module:
    """Tiny C2D + 1 spacetime non-local block in res4 (Table 2a/2d spacetime)."""
    return build_tiny("nl1", **kwargs)


@register_model(name="c2d_tiny_nl1_space", default_cfg=_cfg("nl1", "space"))
def c2d_tiny_nl1_space(**kwargs: Any) -> nn.Module:
    """Tiny C2D + 1 space-only non-local block in res4 (Table 2d space-only)."""
    kwargs.setdefault("mode", "space")
    return build_tiny("nl1", **kwargs)


@register_model(name="c2d_tiny_nl1_time", default_cfg=_cfg("nl1", "time"))
def c2d_tiny_nl1_time(**kwargs: Any) -> nn.Module:
    """Tiny C2D + 1 time-only non-local block in res4 (Table 2d time-only)."""
    kwargs.setdefault("mode", "time")
    return build_tiny("nl1", **kwargs)


@register_model(name="c2d_tiny_nl5", default_cfg=_cfg("nl5"))
def c2d_tiny_nl5(**kwargs: Any) -> nn.Module:
    """Tiny C2D + 5 spacetime non-local blocks (2 in res3, 3 in res4; Table 2c)."""
    return build_tiny("nl5", **kwargs)
