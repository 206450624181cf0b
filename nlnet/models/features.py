"""timm's feature contract, shared by the classification families of nlnet.

Every classification model (C2D/I3D :class:`~nlnet.models.video.resnet3d.ResNet3d`, the image
ResNets, ViT, Swin, the video transformers, SlowFast, the demo's tiny C2D) offers the methods
that timm's models offer (``timm.models.resnet``, ``vision_transformer``; ``_features.py``), so
code written for one family works on all:

* ``feature_info``: one dict per feature the model can return, ``num_chs`` (channels),
  ``reduction`` (spatial stride from the input) and ``module`` (the module path that outputs it);
* ``forward_intermediates(x, indices=None, stop_early=False, intermediates_only=False)``:
  ``(final features, [feature maps])``, the maps channels-first ``(B, C, *grid)``, picked by
  ``indices`` (``None``: all; an int ``n``: the last ``n``; a list: those indices, negative
  ones counted from the end); ``stop_early`` stops after the last one asked for (then the final
  features are those of that point);
* ``forward_head(x, pre_logits=False)``: the head on ``forward_features(x)``; ``pre_logits``
  stops before the classifier (the pooled features);
* ``get_classifier()`` / ``reset_classifier(num_classes)``: the classifier module (the one
  ``ModelCfg.classifier`` names) and a fresh one with ``num_classes`` outputs (0: identity).

For a ResNet-style network (Table 1 of "Non-local Neural Networks", Wang et al., CVPR 2018,
arXiv:1711.07971: stem, ``pool1``, res2, ``pool2``, res3..res5) the features are the stem
output and the four stage outputs, as in timm's ResNet.

Each model class inherits :class:`ClassifierContract` (``forward_intermediates``,
``get_classifier``, ``reset_classifier``) and writes its own ``feature_info``,
``_forward_intermediates`` (with :func:`resnet_intermediates` or :func:`token_intermediates`)
and ``forward_head``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import nn

from nlnet.models.resnet_layout import STAGE_NAMES

__all__ = [
    "ClassifierContract",
    "feature_take_indices",
    "feature_info_of",
    "new_classifier",
    "resnet_feature_info",
    "resnet_intermediates",
    "token_intermediates",
]


def feature_take_indices(
    num_features: int, indices: int | Sequence[int] | None = None
) -> tuple[list[int], int]:
    """The absolute indices of the features to return and the largest of them.

    Args:
        num_features: how many features the model can return (``len(model.feature_info)``).
        indices: ``None`` (all), an int ``n`` (the last ``n``) or a sequence of indices
            (negative ones count from the end).

    Raises:
        ValueError: an index out of range, or ``n`` not in ``1..num_features``.
    """
    if indices is None:
        take = list(range(num_features))
    elif isinstance(indices, int) and not isinstance(indices, bool):
        if not 0 < indices <= num_features:
            raise ValueError(f"indices: expected 1..{num_features} last features, got {indices!r}")
        take = list(range(num_features - indices, num_features))
    else:
        take = [num_features + i if i < 0 else i for i in indices]
        if not take or any(not 0 <= i < num_features for i in take):
            raise ValueError(
                f"indices: expected indices in [-{num_features}, {num_features}), got {indices!r}"
            )
    return take, max(take)


class ClassifierContract:
    """The classifier half of timm's contract, for a classification ``nn.Module`` to inherit
    first (``class ResNet3d(ClassifierContract, nn.Module)``).

    The subclass declares, in its own body: :attr:`classifier_name` (the module path of the
    classifier, the module ``ModelCfg.classifier`` names), optionally
    :attr:`classifier_init_std`; sets ``num_features`` (the classifier's input width) and
    ``num_classes`` and ``feature_info`` in ``__init__``; and implements
    ``_forward_intermediates(x, indices, stop_early) -> (final, maps)``. This class adds
    :meth:`forward_intermediates`, :meth:`get_classifier` and :meth:`reset_classifier`.
    """

    #: Module path of the classifier (``"fc"``, ``"head"``, ``"head.projection"``); declared by
    #: every subclass.
    classifier_name: ClassVar[str]
    #: Standard deviation of a fresh classifier's weights; ``None``: PyTorch's default init.
    classifier_init_std: ClassVar[float | None] = None
    num_features: int
    num_classes: int
    feature_info: list[dict[str, Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not isinstance(getattr(cls, "classifier_name", None), str):
            raise TypeError(f"{cls.__name__}: declare classifier_name (the classifier attribute)")

    def _forward_intermediates(
        self, x: torch.Tensor, indices: int | Sequence[int] | None, stop_early: bool
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        raise NotImplementedError(f"{type(self).__name__} defines no _forward_intermediates")

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | Sequence[int] | None = None,
        stop_early: bool = False,
        intermediates_only: bool = False,
    ) -> tuple[torch.Tensor, list[torch.Tensor]] | list[torch.Tensor]:
        """timm's ``forward_intermediates``: ``(final features, [maps])``, the maps of
        :attr:`feature_info` picked by ``indices`` (all, the last ``n``, or a list), each
        channels-first ``(B, C, *grid)``; ``stop_early`` stops after the last one asked for;
        ``intermediates_only`` returns the maps alone."""
        final, maps = self._forward_intermediates(x, indices, stop_early)
        return maps if intermediates_only else (final, maps)

    def get_classifier(self) -> nn.Module:
        """The classifier module (module path :attr:`classifier_name`)."""
        return self.get_submodule(self.classifier_name)

    def reset_classifier(self, num_classes: int) -> None:
        """A fresh classifier with ``num_classes`` outputs (0: none, the head then returns the
        pooled features)."""
        fc = new_classifier(self.num_features, num_classes, self.classifier_init_std)
        parent, _, attr = self.classifier_name.rpartition(".")
        setattr(self.get_submodule(parent), attr, fc)  # "" is the model itself
        self.num_classes = num_classes


def feature_info_of(
    modules: Sequence[str], channels: Sequence[int], reductions: Sequence[int]
) -> list[dict[str, Any]]:
    """timm's ``feature_info`` list: ``{"num_chs", "reduction", "module"}`` per feature."""
    return [
        {"num_chs": int(c), "reduction": int(r), "module": m}
        for m, c, r in zip(modules, channels, reductions, strict=True)
    ]


def new_classifier(num_features: int, num_classes: int, std: float | None = None) -> nn.Module:
    """A fresh ``nn.Linear(num_features, num_classes)`` (weights ``N(0, std)`` and zero bias
    when ``std`` is given), or ``nn.Identity()`` for ``num_classes == 0`` (timm's convention)."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0:
        raise ValueError(f"num_classes: expected a non-negative int, got {num_classes!r}")
    if num_classes == 0:
        return nn.Identity()
    fc = nn.Linear(num_features, num_classes)
    if std is not None and not fc.weight.is_meta:
        nn.init.normal_(fc.weight, std=std)
        nn.init.zeros_(fc.bias)
    return fc


def resnet_feature_info(
    stem_channels: int, stage_channels: Sequence[int], reductions: Sequence[int]
) -> list[dict[str, Any]]:
    """``feature_info`` of a ResNet: the stem (``relu``) and the four stages (``layer1`` ..)."""
    modules = ("relu", *STAGE_NAMES.values())
    return feature_info_of(modules, (stem_channels, *stage_channels), reductions)


def resnet_intermediates(
    model: nn.Module,
    x: torch.Tensor,
    indices: int | Sequence[int] | None = None,
    stop_early: bool = False,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``forward_intermediates`` of a torchvision-named ResNet (2D or 3D).

    ``model`` has ``conv1``, ``bn1``, ``relu``, ``maxpool`` (pool1), ``layer1`` .. ``layer4`` and
    optionally ``pool2`` (between res2 and res3, Table 1). Feature 0 is the stem output, 1..4
    the outputs of res2..res5; the final features are res5's (``forward_features``), or those of
    the last feature asked for with ``stop_early``.
    """
    take, last = feature_take_indices(5, indices)
    x = model.relu(model.bn1(model.conv1(x)))
    out = [x] if 0 in take else []
    x = model.maxpool(x)
    for i, name in enumerate(STAGE_NAMES.values(), start=1):
        if stop_early and i > last:
            break
        if i == 2 and hasattr(model, "pool2"):
            x = model.pool2(x)
        x = getattr(model, name)(x)
        if i in take:
            out.append(x)
    if stop_early and last == 0:
        x = out[-1]
    return x, out


def token_intermediates(
    blocks: nn.Sequential,
    x: torch.Tensor,
    grid: Sequence[int],
    indices: int | Sequence[int] | None = None,
    stop_early: bool = False,
    num_prefix_tokens: int = 1,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``forward_intermediates`` of a transformer encoder (ViT, video transformer).

    ``x`` holds the embedded tokens ``(B, prefix + N, D)`` (class token first); feature ``i``
    is the output of ``blocks[i]`` without the prefix tokens, as a map ``(B, D, *grid)``. Returns
    the tokens after the last block run (all blocks, or with ``stop_early`` up to the last
    feature asked for) and the maps.
    """
    take, last = feature_take_indices(len(blocks), indices)
    out = []
    for i, block in enumerate(blocks):
        if stop_early and i > last:
            break
        x = block(x)
        if i in take:
            out.append(x[:, num_prefix_tokens:].transpose(1, 2).unflatten(2, tuple(grid)))
    return x, out
