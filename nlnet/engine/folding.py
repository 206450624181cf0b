"""Frozen BatchNorm folded into the convolution before it, for fine-tuning (``train.fold_frozen_bn``).

With ``train.freeze_bn`` (Sec. 5.1 of Wang et al., "Non-local Neural Networks", CVPR 2018) a
BatchNorm layer is a fixed per-channel affine map, ``bn(y) = y * s + t`` with
``s = gamma / sqrt(running_var + eps)`` and ``t = beta - running_mean * s``. Applied to a
convolution's output it equals one convolution with the weight scaled per output channel and a
bias: ``bn(conv(x, W)) = conv(x, W * s) + t``. Folding computes that instead: one pass over the
activation less per BatchNorm (the usual conv + BN fusion of inference, e.g.
``torch.fx.experimental.optimization.fuse``), while training keeps ``W`` as the parameter (the
scaled weight is computed from it at every step), so gradients, optimizer state and checkpoints
are those of the unfolded model. Each folded BatchNorm stays in the model (its state-dict keys
and buffers unchanged) and passes its input through.

Pairs are found on the model's ``torch.fx`` graph: a convolution whose only user is a frozen
BatchNorm (eval mode, no trainable scale or shift) of its channel count. A model that does not
trace folds nothing, with a warning.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

__all__ = ["fold_frozen_batchnorm", "FoldedConv1d", "FoldedConv2d", "FoldedConv3d"]

_BN = nn.modules.batchnorm._BatchNorm


def _frozen(bn: nn.Module) -> bool:
    return (
        isinstance(bn, _BN)
        and not bn.training
        and bn.track_running_stats
        and not any(p.requires_grad for p in bn.parameters(recurse=False))
    )


def _folded_forward(self: nn.modules.conv._ConvNd, x: torch.Tensor) -> torch.Tensor:
    bn = self.folded_bn  # (C_out,) statistics and affine parameters, all fixed
    scale = bn.running_var.add(bn.eps).rsqrt()
    if bn.weight is not None:
        scale = scale * bn.weight
    shift = -bn.running_mean * scale
    if bn.bias is not None:
        shift = shift + bn.bias
    if self.bias is not None:
        shift = shift + self.bias * scale
    weight = self.weight * scale.view(-1, *[1] * (self.weight.dim() - 1))  # W * s per out channel
    return self._conv_forward(x, weight, shift)


class FoldedConv1d(nn.Conv1d):
    """A ``Conv1d`` computing ``bn(conv(x))`` of its frozen ``folded_bn`` in one convolution."""

    forward = _folded_forward


class FoldedConv2d(nn.Conv2d):
    """A ``Conv2d`` computing ``bn(conv(x))`` of its frozen ``folded_bn`` in one convolution."""

    forward = _folded_forward


class FoldedConv3d(nn.Conv3d):
    """A ``Conv3d`` computing ``bn(conv(x))`` of its frozen ``folded_bn`` in one convolution."""

    forward = _folded_forward


class _FoldedAwayBN(_BN):
    """A BatchNorm whose affine map its convolution computes: the identity here."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return x

    def train(self, mode: bool = True) -> _FoldedAwayBN:  # stays frozen: always eval
        return super().train(False)


_FOLDED = {nn.Conv1d: FoldedConv1d, nn.Conv2d: FoldedConv2d, nn.Conv3d: FoldedConv3d}
_FOLDED_BN: dict[type, type] = {}  # BatchNorm class -> its folded-away subclass


def _folded_bn_class(cls: type) -> type:
    if cls not in _FOLDED_BN:
        _FOLDED_BN[cls] = type(f"FoldedAway{cls.__name__}", (_FoldedAwayBN, cls),
                               {"__module__": __name__})  # fmt: skip
    return _FOLDED_BN[cls]


def __getattr__(name: str) -> type:
    """``FoldedAway<BatchNorm class of torch.nn>`` by name (PEP 562): what a pickled folded
    model (``torch.save(model)``) asks this module for when it is loaded."""
    base = (
        getattr(nn, name.removeprefix("FoldedAway"), None)
        if name.startswith("FoldedAway")
        else None
    )
    if isinstance(base, type) and issubclass(base, _BN):
        return _folded_bn_class(base)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _pairs(model: nn.Module) -> list[tuple[str, str]]:
    """``(conv path, bn path)`` for every convolution whose only user is a frozen BN."""
    import torch.fx

    graph = torch.fx.symbolic_trace(model).graph
    modules = dict(model.named_modules())
    calls: dict[str, int] = {}  # a module called at several sites is not folded
    for node in graph.nodes:
        if node.op == "call_module":
            calls[node.target] = calls.get(node.target, 0) + 1
    out = []
    for node in graph.nodes:
        if node.op != "call_module" or not _frozen(modules.get(node.target)):
            continue
        src = node.args[0]
        conv = modules.get(src.target) if isinstance(src, torch.fx.Node) else None
        if (src.op == "call_module" and type(conv) in _FOLDED and len(src.users) == 1
                and calls[src.target] == calls[node.target] == 1
                and conv.out_channels == modules[node.target].num_features):  # fmt: skip
            out.append((src.target, node.target))
    return out


def fold_frozen_batchnorm(model: nn.Module) -> int:
    """Fold every frozen BatchNorm into the convolution before it, in place (module docstring).

    Call after the BatchNorm layers are frozen (:func:`nlnet.engine.modeling.freeze_batchnorm`).
    Returns the number of BatchNorm layers folded (0, with a warning, for a model that
    ``torch.fx`` cannot trace).
    """
    try:
        pairs = _pairs(model)
    except Exception as exc:  # noqa: BLE001 -- tracing user models fails in many ways
        warnings.warn(
            f"train.fold_frozen_bn: the model does not trace with torch.fx "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
            "nothing folded",
            RuntimeWarning,
            stacklevel=2,
        )
        return 0
    modules = dict(model.named_modules())
    for conv_path, bn_path in pairs:
        conv, bn = modules[conv_path], modules[bn_path]
        conv.__class__ = _FOLDED[type(conv)]
        object.__setattr__(conv, "folded_bn", bn)  # a reference, not a submodule: keys unchanged
        bn.__class__ = _folded_bn_class(type(bn))
    return len(pairs)
