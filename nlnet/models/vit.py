"""Vision Transformer (ViT) image classifiers assembled from nlnet's own layers.

Dosovitskiy et al., "An Image is Worth 16x16 Words" (ICLR 2021), Sec. 3.1, Eqs. 1-4 (patches as
tokens; the position embedding because self-attention is permutation-equivariant, Vaswani et al.,
"Attention Is All You Need", NeurIPS 2017, Sec. 3.5):

* Eq. 1: the image is cut into ``P x P`` patches, each linearly projected to ``D`` channels (a
  strided convolution), a learned class token is prepended and a learned position embedding
  (:class:`~nlnet.layers.LearnedPositionEmbedding`) is added;
* Eqs. 2-3: ``L`` pre-norm encoder blocks ``z' = MSA(LN(z)) + z``, ``z = MLP(LN(z')) + z'`` with
  :class:`~nlnet.layers.MultiheadSelfAttention` (global attention between all patches: the
  non-local operation of Wang et al. 2018 with the embedded-Gaussian ``f`` per head);
* Eq. 4: the classifier reads ``LN`` of the class token.

:func:`load_torchvision_vit` maps a torchvision ``VisionTransformer`` state dict (and so its
ImageNet weights) onto this model; outputs then equal torchvision's to float round-off.
Attention maps: :func:`nlnet.analysis.attention_record.record_attention` (``kind="transformer"``) and
:func:`nlnet.analysis.rollout.attention_rollout`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx
from torch import Tensor, nn

from nlnet.layers.attention import MultiheadSelfAttention
from nlnet.layers.pos_embed import LearnedPositionEmbedding
from nlnet.models.features import (
    ClassifierContract,
    feature_info_of,
    token_intermediates,
)
from nlnet.models.model_cfg import ModelCfg
from nlnet.models.registry import register_model

__all__ = [
    "EncoderBlock",
    "TokenClassifier",
    "VisionTransformer",
    "attend",
    "check_image",
    "embed_tokens",
    "load_torchvision_vit",
    "torchvision_state_dict",
    "vit_state_dict_from_torchvision",
]


def attend(module: nn.Module, x: Tensor) -> Tensor:
    """``module(x)``; recorded by ``torch.fx`` as one opaque call (the attention layers validate
    their inputs in Python, which a symbolic trace cannot run). Eager mode, ``torch.compile``
    and ``torch.export`` run it as a plain call, so hooks (attention recording) still fire."""
    return module(x)


def embed_tokens(
    x: Tensor,
    patch_embed: nn.Module,
    cls_token: Tensor,
    pos_embed: LearnedPositionEmbedding,
    pos_drop: nn.Module,
) -> Tensor:
    """Eq. 1: the patches (or tubelets) of ``x`` projected by ``patch_embed`` to ``(B, N, D)``
    (row-major), the class token prepended, the position embedding added, then ``pos_drop``:
    ``(B, 1 + N, D)``."""
    x = patch_embed(x).flatten(2).transpose(1, 2)  # (B, N, D)
    cls = cls_token.expand(x.shape[0], -1, -1)  # (B, 1, D)
    return pos_drop(torch.cat([cls, x], dim=1) + pos_embed.pos_embed)


def check_image(x: Tensor, channels: int, size: tuple[int, int]) -> None:
    """``ValueError`` naming ``x`` unless it is ``(B, channels, *size)``."""
    if not isinstance(x, Tensor) or x.dim() != 4 or tuple(x.shape[1:]) != (channels, *size):
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(
            f"x: expected an image batch (B, {channels}, {size[0]}, {size[1]}), got {shape}"
        )


torch.fx.wrap("attend")
torch.fx.wrap("check_image")


class EncoderBlock(nn.Module):
    """Pre-norm transformer encoder block (ViT Eqs. 2-3).

    Args:
        dim: token width ``D``.
        num_heads: heads of the self-attention.
        mlp_dim: hidden width of the MLP.
        dropout: dropout after the attention and in the MLP.
        attention_dropout: dropout on the attention weights.
        eps: LayerNorm epsilon (1e-6 in ViT).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_dim: int,
        *,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = MultiheadSelfAttention(dim, num_heads, dropout=attention_dropout)
        self.drop = nn.Dropout(dropout)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = nn.Sequential(
            nn.Linear(dim, mlp_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(mlp_dim, dim),
            nn.Dropout(dropout),
        )

    def forward(self, x: Tensor) -> Tensor:
        """``x``: ``(B, N, D)`` tokens; returns the same shape."""
        x = x + self.drop(attend(self.attn, self.norm1(x)))  # Eq. 2
        return x + self.mlp(self.norm2(x))  # Eq. 3


class TokenClassifier(ClassifierContract, nn.Module):
    """A class-token transformer classifier: the forward paths that ViT (Eqs. 1-4) and the video
    transformers share. A subclass sets ``blocks``, ``norm``, ``head``, ``grid`` (the patch
    grid) and the ``feature_info`` of its blocks, and defines ``_tokens(x)`` (Eq. 1)."""

    classifier_name = "head"
    grid: tuple[int, ...]

    def _tokens(self, x: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} defines no _tokens")

    def forward_features(self, x: Tensor) -> Tensor:
        """All tokens after the final LayerNorm ``(B, 1 + N, D)`` (class token first)."""
        return self.norm(self.blocks(self._tokens(x)))

    def _forward_intermediates(
        self, x: Tensor, indices: int | Sequence[int] | None, stop_early: bool
    ) -> tuple[Tensor, list[Tensor]]:
        """The patch tokens after the blocks asked for (:attr:`feature_info`) as maps
        ``(B, D, *grid)`` (the class token left out), and the tokens after the final LayerNorm
        (after the last block asked for, ``stop_early``)."""
        x, out = token_intermediates(self.blocks, self._tokens(x), self.grid, indices, stop_early)
        return self.norm(x), out

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        """The classifier on the class token (Eq. 4); ``pre_logits``: the class token ``(B, D)``."""
        x = x[:, 0]
        return x if pre_logits else self.head(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


class VisionTransformer(TokenClassifier):
    """ViT classifier (Sec. 3.1, Eqs. 1-4).

    Args:
        image_size: input side (square images, as torchvision's ViT).
        patch_size: patch side ``P``.
        num_layers: encoder blocks ``L``.
        num_heads: heads per block.
        hidden_dim: token width ``D``.
        mlp_dim: MLP hidden width.
        num_classes: logits.
        dropout: dropout on the embedded tokens, after attention and in the MLPs.
        attention_dropout: dropout on the attention weights.
        in_channels: image channels.

    Input ``(B, in_channels, image_size, image_size)``; output ``(B, num_classes)``.
    """

    def __init__(
        self,
        image_size: int = 224,
        patch_size: int = 16,
        num_layers: int = 12,
        num_heads: int = 12,
        hidden_dim: int = 768,
        mlp_dim: int = 3072,
        num_classes: int = 1000,
        *,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        for name, v in (("image_size", image_size), ("patch_size", patch_size)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected a positive int, got {v!r}")
        if image_size % patch_size:
            raise ValueError(
                f"image_size: {image_size} is not divisible by patch_size={patch_size}"
            )
        self.image_size, self.patch_size, self.in_channels = image_size, patch_size, in_channels
        self.grid_size = (image_size // patch_size, image_size // patch_size)
        self.grid = self.grid_size
        self.hidden_dim = hidden_dim
        self.num_classes = num_classes
        # Eq. 1: x_p E as a P x P stride-P convolution; class token; position embedding E_pos
        self.patch_embed = nn.Conv2d(in_channels, hidden_dim, patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
        self.pos_embed = LearnedPositionEmbedding(self.grid_size, hidden_dim, num_prefix_tokens=1)
        self.pos_drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(
            *[
                EncoderBlock(
                    hidden_dim,
                    num_heads,
                    mlp_dim,
                    dropout=dropout,
                    attention_dropout=attention_dropout,
                )
                for _ in range(num_layers)
            ]
        )
        self.norm = nn.LayerNorm(hidden_dim, eps=1e-6)
        self.head = nn.Linear(hidden_dim, num_classes)
        self.num_features = hidden_dim
        self.feature_info = feature_info_of(
            [f"blocks.{i}" for i in range(num_layers)], [hidden_dim] * num_layers,
            [patch_size] * num_layers,
        )  # fmt: skip
        if not self.head.weight.is_meta:
            self._init_weights()

    def _init_weights(self) -> None:
        # torchvision's ViT initialisation (LeCun-normal patch projection, zero head)
        fan_in = self.patch_embed.in_channels * self.patch_size**2
        nn.init.trunc_normal_(self.patch_embed.weight, std=(1.0 / fan_in) ** 0.5)
        nn.init.zeros_(self.patch_embed.bias)
        nn.init.normal_(self.pos_embed.pos_embed, std=0.02)
        for block in self.blocks:
            for lin in (block.mlp[0], block.mlp[3]):
                nn.init.xavier_uniform_(lin.weight)
                nn.init.normal_(lin.bias, std=1e-6)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def _tokens(self, x: Tensor) -> Tensor:
        """Eq. 1: patch embeddings, class token, position embedding ``(B, 1 + N, D)``."""
        check_image(x, self.in_channels, (self.image_size, self.image_size))
        return embed_tokens(x, self.patch_embed, self.cls_token, self.pos_embed, self.pos_drop)


# ------------------------------------------------------------------------ torchvision weights
_TV_RULES = (
    (r"^conv_proj\.", "patch_embed."),
    (r"^class_token$", "cls_token"),
    (r"^encoder\.pos_embedding$", "pos_embed.pos_embed"),
    (r"^encoder\.ln\.", "norm."),
    (r"^heads\.head\.", "head."),
    (r"^encoder\.layers\.encoder_layer_(\d+)\.ln_1\.", r"blocks.\1.norm1."),
    (r"^encoder\.layers\.encoder_layer_(\d+)\.ln_2\.", r"blocks.\1.norm2."),
    (r"^encoder\.layers\.encoder_layer_(\d+)\.self_attention\.", r"blocks.\1.attn."),
    (r"^encoder\.layers\.encoder_layer_(\d+)\.mlp\.(?:linear_1|0)\.", r"blocks.\1.mlp.0."),
    (r"^encoder\.layers\.encoder_layer_(\d+)\.mlp\.(?:linear_2|3)\.", r"blocks.\1.mlp.3."),
)


def vit_state_dict_from_torchvision(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Rename a torchvision ``VisionTransformer`` state dict to :class:`VisionTransformer` keys.

    The attention weights keep their names (``in_proj_weight``, ``out_proj.*``: both use the
    ``nn.MultiheadAttention`` layout). ``heads.pre_logits`` (``representation_size``) has no
    counterpart and is an error.
    """
    out = {}
    for key, value in state_dict.items():
        for pattern, repl in _TV_RULES:
            new, n = re.subn(pattern, repl, key)
            if n:
                out[new] = value
                break
        else:
            raise ValueError(f"state_dict: unexpected torchvision ViT key {key!r}")
    return out


def torchvision_state_dict(spec: Any, arch: str) -> Mapping[str, Tensor]:
    """A torchvision state dict from a state dict, a file path or torchvision weights (an enum
    member, ``"ViT_B_16_Weights.IMAGENET1K_V1"`` or a bare ``"IMAGENET1K_V1"`` of ``arch``),
    through the library's one weights resolver (:func:`nlnet.models.weights.load_weights`)."""
    from nlnet.models.weights import load_weights

    return load_weights(spec, arch)


def load_torchvision_vit(
    model: VisionTransformer, weights: Any, arch: str = "vit_b_16"
) -> VisionTransformer:
    """Load torchvision ViT weights (a state dict, a path or a torchvision weights name/enum)
    into ``model`` strictly and return it."""
    model.load_state_dict(vit_state_dict_from_torchvision(torchvision_state_dict(weights, arch)))
    return model


# --------------------------------------------------------------------------------- registry
_VIT_ARCHS = {
    # name: (patch, layers, heads, hidden, mlp) -- Dosovitskiy et al. Table 1 / torchvision
    "vit_b_16": (16, 12, 12, 768, 3072),
    "vit_b_32": (32, 12, 12, 768, 3072),
    "vit_l_16": (16, 24, 16, 1024, 4096),
    "vit_tiny": (8, 4, 2, 32, 64),
}
_TINY_VIT = {"hidden_dim": 16, "mlp_dim": 32, "num_layers": 2, "num_heads": 2}


def _vit(name: str, weights: Any, **kwargs: Any) -> nn.Module:
    """Build ``name`` of :data:`_VIT_ARCHS`, then load torchvision ``weights`` if given."""
    patch, layers, heads, hidden, mlp = _VIT_ARCHS[name]
    tiny = name == "vit_tiny"
    cfg = {
        "image_size": 32 if tiny else 224,
        "patch_size": patch,
        "num_layers": layers,
        "num_heads": heads,
        "hidden_dim": hidden,
        "mlp_dim": mlp,
        "num_classes": 10 if tiny else 1000,
        **kwargs,
    }
    model = VisionTransformer(**cfg)
    if weights is not None:
        load_torchvision_vit(model, weights, name)
    return model


_VIT_CFG = ModelCfg(
    task="image_classification",
    num_classes=1000,
    input_size=(3, 224, 224),
    first_conv="patch_embed",
    classifier=("head",),
    family="vit",
    weights_format="vit",
    test_overrides=_TINY_VIT,
    test_input_size=(3, 224, 224),
)


@register_model(default_cfg=_VIT_CFG.replace(weights_arch="vit_b_16"))
def vit_b_16(weights: Any = None, **kwargs: Any) -> nn.Module:
    """ViT-B/16 from nlnet layers (torchvision weights load)"""
    return _vit("vit_b_16", weights, **kwargs)


@register_model(default_cfg=_VIT_CFG.replace(weights_arch="vit_b_32"))
def vit_b_32(weights: Any = None, **kwargs: Any) -> nn.Module:
    """ViT-B/32 from nlnet layers (torchvision weights load)"""
    return _vit("vit_b_32", weights, **kwargs)


@register_model(default_cfg=_VIT_CFG.replace(weights_arch="vit_l_16"))
def vit_l_16(weights: Any = None, **kwargs: Any) -> nn.Module:
    """ViT-L/16 from nlnet layers (torchvision weights load)"""
    return _vit("vit_l_16", weights, **kwargs)


@register_model(
    default_cfg=_VIT_CFG.replace(
        num_classes=10, input_size=(3, 32, 32), test_overrides={}, test_input_size=(3, 32, 32)
    )
)
def vit_tiny(weights: Any = None, **kwargs: Any) -> nn.Module:
    """tiny ViT for CPUs (32x32 images, 8x8 patches)"""
    return _vit("vit_tiny", weights, **kwargs)
