"""Swin Transformer image classifiers assembled from nlnet's window-attention layers.

Liu et al., "Swin Transformer: Hierarchical Vision Transformer using Shifted Windows" (ICCV 2021),
Sec. 3.1-3.2 ("Shifted Window based Self-Attention"): self-attention
restricted to ``M x M`` windows (cost linear in the number of patches), windows shifted by
``floor(M/2)`` in every other block so information crosses window borders, a learned relative
position bias ``B`` in ``softmax(Q K^T / sqrt(d) + B) V`` (Eq. 4), and patch merging layers that
halve the resolution and double the width between stages (Sec. 3.1, "Architecture").

Built from :class:`~nlnet.layers.SwinBlock` / :class:`~nlnet.layers.WindowAttention2d`.
:func:`load_torchvision_swin` maps a torchvision ``SwinTransformer`` (v1) state dict -- and so its
ImageNet weights -- onto this model; outputs then equal torchvision's to float round-off.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F
from torch import Tensor, nn

from nlnet.layers.window_attention import SwinBlock
from nlnet.models.checks import check_input
from nlnet.models.features import ClassifierContract, feature_info_of, feature_take_indices
from nlnet.models.model_cfg import ModelCfg
from nlnet.models.registry import register_model
from nlnet.models.vit import attend, torchvision_state_dict

__all__ = [
    "PatchMerging",
    "SwinTransformer",
    "load_torchvision_swin",
    "swin_state_dict_from_torchvision",
]


def merge_patches(x: Tensor) -> Tensor:
    """``(B, H, W, C) -> (B, ceil(H/2), ceil(W/2), 4C)``: the features of each 2x2 group of
    neighbouring patches concatenated (odd sizes zero-padded at the end). Order of the four:
    (even row, even col), (odd row, even col), (even row, odd col), (odd row, odd col)."""
    h, w = x.shape[-3], x.shape[-2]
    x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))
    return torch.cat(
        [
            x[..., 0::2, 0::2, :],
            x[..., 1::2, 0::2, :],
            x[..., 0::2, 1::2, :],
            x[..., 1::2, 1::2, :],
        ],
        dim=-1,
    )


torch.fx.wrap("attend")
torch.fx.wrap("merge_patches")  # padding depends on the (odd/even) size
torch.fx.wrap("check_input")


class PatchMerging(nn.Module):
    """Patch merging (Sec. 3.1): concatenate 2x2 neighbours (4C), LayerNorm, linear to 2C."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, H, W, C) -> (B, ceil(H/2), ceil(W/2), 2C)``."""
        return self.reduction(self.norm(merge_patches(x)))


class _Block(SwinBlock):
    """:class:`~nlnet.layers.SwinBlock` whose window attention is one opaque call under FX."""

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.stochastic_depth(attend(self.attn, self.norm1(x)))
        return x + self.stochastic_depth(self.mlp(self.norm2(x)))


class SwinTransformer(ClassifierContract, nn.Module):
    """Swin Transformer (v1) classifier.

    Args:
        patch_size: side of the patches of the stem (4 in Swin).
        embed_dim: width ``C`` of stage 1; stage ``k`` has ``C * 2**k``.
        depths: blocks per stage (alternating W-MSA and SW-MSA).
        num_heads: heads per stage.
        window_size: window side ``M`` (7 in Swin).
        mlp_ratio: MLP hidden width relative to the stage width.
        stochastic_depth_prob: drop-path probability of the last block (linear in depth).
        num_classes: logits.
        in_channels: image channels.

    Input ``(B, in_channels, H, W)`` (any size; windows are padded); output ``(B, num_classes)``.
    """

    classifier_name = "head"

    def __init__(
        self,
        patch_size: int = 4,
        embed_dim: int = 96,
        depths: Sequence[int] = (2, 2, 6, 2),
        num_heads: Sequence[int] = (3, 6, 12, 24),
        window_size: int = 7,
        *,
        mlp_ratio: float = 4.0,
        stochastic_depth_prob: float = 0.2,
        num_classes: int = 1000,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        depths, num_heads = tuple(depths), tuple(num_heads)
        if not depths or len(depths) != len(num_heads) or min(depths) < 1:
            raise ValueError(
                f"depths/num_heads: expected equally many positive stage sizes, got {depths} and "
                f"{num_heads}"
            )
        self.in_channels, self.num_classes = in_channels, num_classes
        self.patch_embed = nn.Conv2d(in_channels, embed_dim, patch_size, stride=patch_size)
        self.patch_norm = nn.LayerNorm(embed_dim)
        total, done = sum(depths), 0
        self.stages = nn.ModuleList()
        self.merges = nn.ModuleList()
        window = [window_size, window_size]
        for k, (depth, heads) in enumerate(zip(depths, num_heads)):
            dim = embed_dim * 2**k
            blocks = []
            for i in range(depth):
                prob = stochastic_depth_prob * done / max(total - 1, 1)
                shift = [0, 0] if i % 2 == 0 else [m // 2 for m in window]
                blocks.append(
                    _Block(
                        dim, heads, window, shift, mlp_ratio=mlp_ratio, stochastic_depth_prob=prob
                    )
                )
                done += 1
            self.stages.append(nn.Sequential(*blocks))
            if k < len(depths) - 1:
                self.merges.append(PatchMerging(dim))
        self.num_features = embed_dim * 2 ** (len(depths) - 1)
        self.norm = nn.LayerNorm(self.num_features)
        self.head = nn.Linear(self.num_features, num_classes)
        n = len(depths)
        self.feature_info = feature_info_of(
            [f"stages.{k}" for k in range(n)], [embed_dim * 2**k for k in range(n)],
            [patch_size * 2**k for k in range(n)],
        )  # fmt: skip
        if not self.head.weight.is_meta:
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.trunc_normal_(m.weight, std=0.02)
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)

    def forward_features(self, x: Tensor) -> Tensor:
        """Channels-last features of the last stage after the final LayerNorm ``(B, h, w, C)``."""
        check_input(x, 4, self.in_channels)
        x = self.patch_norm(self.patch_embed(x).permute(0, 2, 3, 1))  # (B, H/P, W/P, C)
        for k, stage in enumerate(self.stages):
            if k > 0:
                x = self.merges[k - 1](x)
            x = stage(x)
        return self.norm(x)

    def _forward_intermediates(
        self, x: Tensor, indices: int | Sequence[int] | None, stop_early: bool
    ) -> tuple[Tensor, list[Tensor]]:
        """The outputs of the stages asked for (:attr:`feature_info`) as channels-first maps
        ``(B, C_k, h_k, w_k)``, and the final features (:meth:`forward_features`'s; with
        ``stop_early`` before the last stage, the channels-last map of the last stage run,
        without the final LayerNorm)."""
        take, last = feature_take_indices(len(self.stages), indices)
        check_input(x, 4, self.in_channels)
        x = self.patch_norm(self.patch_embed(x).permute(0, 2, 3, 1))
        out = []
        for k, stage in enumerate(self.stages):
            if stop_early and k > last:
                break
            if k > 0:
                x = self.merges[k - 1](x)
            x = stage(x)
            if k in take:
                out.append(x.permute(0, 3, 1, 2))
        return (x if stop_early and last < len(self.stages) - 1 else self.norm(x)), out

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        """Global average pool of the channels-last features ``(B, h, w, C)``, then ``head``
        (``pre_logits``: the pooled features ``(B, C)``)."""
        x = x.mean(dim=(1, 2))
        return x if pre_logits else self.head(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


# ------------------------------------------------------------------------ torchvision weights
def swin_state_dict_from_torchvision(
    state_dict: Mapping[str, Tensor], num_stages: int = 4
) -> dict[str, Tensor]:
    """Rename a torchvision ``SwinTransformer`` (v1) state dict to :class:`SwinTransformer` keys.

    torchvision's ``features`` holds the stem at 0, stage ``k`` at ``2k + 1`` and the patch
    merging after it at ``2k + 2``. The ``relative_position_index`` buffers are kept (our window
    attention recomputes and ignores them when loading).
    """
    out = {}
    for key, value in state_dict.items():
        m = re.match(r"^features\.(\d+)\.(.*)$", key)
        if key.startswith(("norm.", "head.")):
            out[key] = value
        elif m is None:
            raise ValueError(f"state_dict: unexpected torchvision Swin key {key!r}")
        elif m.group(1) == "0":
            stem = {"0": "patch_embed", "2": "patch_norm"}
            part, rest = m.group(2).split(".", 1)
            if part not in stem:
                raise ValueError(f"state_dict: unexpected torchvision Swin key {key!r}")
            out[f"{stem[part]}.{rest}"] = value
        else:
            i = int(m.group(1))
            k = (i - 1) // 2
            if k >= num_stages:
                raise ValueError(f"state_dict: {key!r} is beyond {num_stages} stages")
            out[f"{'stages' if i % 2 else 'merges'}.{k}.{m.group(2)}"] = value
    return out


def load_torchvision_swin(
    model: SwinTransformer, weights: Any, arch: str = "swin_t"
) -> SwinTransformer:
    """Load torchvision Swin (v1) weights (a state dict, a path or a torchvision weights
    name/enum) into ``model`` strictly and return it."""
    sd = swin_state_dict_from_torchvision(torchvision_state_dict(weights, arch), len(model.stages))
    model.load_state_dict(sd)
    return model


# --------------------------------------------------------------------------------- registry
_SWIN_ARCHS = {
    # name: (embed_dim, depths, heads, stochastic depth) -- Liu et al. Sec. 3.3 / torchvision
    "swin_t": (96, (2, 2, 6, 2), (3, 6, 12, 24), 0.2),
    "swin_s": (96, (2, 2, 18, 2), (3, 6, 12, 24), 0.3),
    "swin_b": (128, (2, 2, 18, 2), (4, 8, 16, 32), 0.5),
}
_TINY_SWIN = {"embed_dim": 8, "num_heads": (1, 1, 2, 2), "depths": (2, 2, 2, 2)}


def _swin(name: str, weights: Any, **kwargs: Any) -> nn.Module:
    """Build ``name`` of :data:`_SWIN_ARCHS`, then load torchvision ``weights`` if given."""
    embed, depths, heads, sd = _SWIN_ARCHS[name]
    cfg = {"embed_dim": embed, "depths": depths, "num_heads": heads, "stochastic_depth_prob": sd}
    model = SwinTransformer(**{**cfg, **kwargs})
    if weights is not None:
        load_torchvision_swin(model, weights, name)
    return model


_SWIN_CFG = ModelCfg(
    task="image_classification",
    num_classes=1000,
    input_size=(3, 224, 224),
    first_conv="patch_embed",
    classifier=("head",),
    family="swin",
    weights_format="swin",
    takes_dropout=False,
    test_overrides=_TINY_SWIN,
    test_input_size=(3, 64, 64),
)


@register_model(default_cfg=_SWIN_CFG.replace(weights_arch="swin_t"))
def swin_t(weights: Any = None, **kwargs: Any) -> nn.Module:
    """Swin-T from nlnet window attention (torchvision weights load)"""
    return _swin("swin_t", weights, **kwargs)


@register_model(default_cfg=_SWIN_CFG.replace(weights_arch="swin_s"))
def swin_s(weights: Any = None, **kwargs: Any) -> nn.Module:
    """Swin-S from nlnet window attention (torchvision weights load)"""
    return _swin("swin_s", weights, **kwargs)


@register_model(default_cfg=_SWIN_CFG.replace(weights_arch="swin_b"))
def swin_b(weights: Any = None, **kwargs: Any) -> nn.Module:
    """Swin-B from nlnet window attention (torchvision weights load)"""
    return _swin("swin_b", weights, **kwargs)


@register_model(
    default_cfg=_SWIN_CFG.replace(
        num_classes=10, input_size=(3, 32, 32), test_overrides={}, test_input_size=(3, 32, 32)
    )
)
def swin_tiny(**kwargs: Any) -> nn.Module:
    """Tiny Swin for CPUs (32x32 images, 2x2 patches, 4x4 windows, two stages)."""
    cfg = {
        "patch_size": 2,
        "embed_dim": 16,
        "depths": (2, 2),
        "num_heads": (2, 4),
        "window_size": 4,
        "stochastic_depth_prob": 0.1,
        "num_classes": 10,
    }
    return SwinTransformer(**{**cfg, **kwargs})
