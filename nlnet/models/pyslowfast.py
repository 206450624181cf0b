"""Import PySlowFast checkpoints of its C2D / I3D (+ non-local) ResNets into nlnet models.

PySlowFast (facebookresearch/SlowFast) re-implements the video models of "Non-local Neural
Networks" (Wang et al., CVPR 2018, arXiv:1711.07971) in PyTorch; its checkpoints (``.pyth``)
are dicts whose ``model_state`` is the state dict of ``slowfast/models/video_model_builder.py``'s
``ResNet`` (``MODEL.ARCH`` ``c2d`` / ``i3d``, one pathway). Name mapping, with ``{k}`` the stage
2..5 (``layer{k-1}``) and ``{i}`` the residual block::

    s1.pathway0_stem.conv / .bn                      conv1 / bn1
    s{k}.pathway0_res{i}.branch2.a / .a_bn           layer{k-1}.{i}.conv1 / .bn1   (b, c alike)
    s{k}.pathway0_res{i}.branch1 / .branch1_bn       layer{k-1}.{i}.downsample.0 / .1
    s{k}.pathway0_nonlocal{i}.conv_theta|phi|g       layer{k-1}.{i}.non_local.theta|phi|g
    s{k}.pathway0_nonlocal{i}.conv_out / .bn         layer{k-1}.{i}.non_local.W_z / .norm
    head.projection                                  fc

``conv_out`` has a bias that nlnet's BN-normed block does not: it is folded into the BN's
running mean (exact in eval mode). The architecture of those models in nlnet terms:
``temporal_strides=(1, 1, 2)`` (8x8 clips), ``pooling="pyslowfast"`` (a padded ``1x3x3``
stem pool, an unpadded ``2x1x1`` ``pathway0_pool``), blocks at ``NONLOCAL.LOCATION``
(``[[], [1, 3], [1, 3, 5], []]`` in its ``*_NLN_*`` configs) with softmax (embedded Gaussian)
and ``(1, 2, 2)`` pooling before ``phi``/``g``; inputs normalised with mean 0.45 / std 0.225.
Checkpoints are read with ``torch.load(weights_only=True)``: no pickled code runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import torch
from torch import nn

from nlnet.models.loading import LoadReport, load_partial

__all__ = [
    "PYSLOWFAST_OPTIONS",
    "pyslowfast_key",
    "read_pyslowfast",
    "import_pyslowfast",
]

#: ``create_model`` options of PySlowFast's Kinetics C2D/I3D(+NLN) 8x8 ResNet-50 configs.
PYSLOWFAST_OPTIONS: dict[str, object] = {"pooling": "pyslowfast", "temporal_strides": [1, 1, 2]}

_CONV = {"conv1": "a", "conv2": "b", "conv3": "c"}
_NL = {"theta": "conv_theta", "phi": "conv_phi", "g": "conv_g", "W_z": "conv_out", "norm": "bn"}


def pyslowfast_key(key: str) -> str | None:
    """PySlowFast's state-dict key of an nlnet key (``None`` when it has none)."""
    parts = key.split(".")
    if parts[0] in ("conv1", "bn1"):
        return f"s1.pathway0_stem.{'conv' if parts[0] == 'conv1' else 'bn'}.{parts[1]}"
    if parts[0] == "fc":
        return f"head.projection.{parts[1]}"
    m = re.fullmatch(r"layer([1-4])\.(\d+)\.(.+)", key)
    if m is None:
        return None
    stage, idx, rest = int(m.group(1)) + 1, m.group(2), m.group(3).split(".")
    res = f"s{stage}.pathway0_res{idx}"
    if rest[0] in _CONV:
        return f"{res}.branch2.{_CONV[rest[0]]}.{rest[1]}"
    if rest[0] in ("bn1", "bn2", "bn3"):
        return f"{res}.branch2.{_CONV['conv' + rest[0][2]]}_bn.{rest[1]}"
    if rest[0] == "downsample":
        return f"{res}.branch1{'' if rest[1] == '0' else '_bn'}.{rest[2]}"
    if rest[0] == "non_local" and rest[1] in _NL:
        return f"s{stage}.pathway0_nonlocal{idx}.{_NL[rest[1]]}.{rest[2]}"
    return None


def read_pyslowfast(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The ``model_state`` of a PySlowFast checkpoint (``weights_only`` load; ``module.``
    prefixes of DistributedDataParallel removed)."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # not a torch file, or one that needs code to unpickle
        raise ValueError(f"FILE: not a readable PySlowFast checkpoint ({err})") from None
    state = ckpt.get("model_state") if isinstance(ckpt, Mapping) else None
    if not isinstance(state, Mapping):
        raise ValueError("FILE: no 'model_state' in the checkpoint (not a PySlowFast .pyth)")
    return {k.removeprefix("module."): v for k, v in state.items()}


def import_pyslowfast(
    model: nn.Module,
    source: str | os.PathLike | Mapping[str, torch.Tensor],
    *,
    strict: bool = True,
) -> LoadReport:
    """Load a PySlowFast C2D/I3D (+NLN) state into an nlnet ResNet3d model, in place.

    Args:
        model: e.g. ``create_model("i3d311_r50_nl5", **PYSLOWFAST_OPTIONS)``.
        source: a ``.pyth`` path or its ``model_state``.
        strict: raise on a missing key, a shape mismatch or an unused PySlowFast key.
    """
    state = dict(source) if isinstance(source, Mapping) else read_pyslowfast(source)
    report = LoadReport("pyslowfast")
    new_state: dict[str, torch.Tensor] = {}
    used, bad = set(), []
    for key, target in model.state_dict().items():
        name = pyslowfast_key(key)
        if name is None or name not in state:
            report.kept.append(key)
            continue
        used.add(name)
        if tuple(state[name].shape) != tuple(target.shape):
            bad.append(f"{name} {tuple(state[name].shape)} -> {key} {tuple(target.shape)}")
            continue
        new_state[key] = state[name].to(target.dtype)
        report.loaded.append(key)
    for key in [k for k in new_state if k.endswith("non_local.norm.running_mean")]:
        bias = pyslowfast_key(key).replace(".bn.running_mean", ".conv_out.bias")
        if bias in state and key.replace("norm.running_mean", "W_z.bias") not in new_state:
            new_state[key] = new_state[key] - state[bias].to(new_state[key].dtype)
            used.add(bias)
            report.convert("folded", key)
    report.unused = sorted(set(state) - used)
    if strict and (bad or report.kept or report.unused):
        raise ValueError(
            "pyslowfast: the checkpoint does not match this model"
            + (f"; shape mismatch: {', '.join(bad[:4])}" if bad else "")
            + (f"; no key for: {', '.join(report.kept[:4])}" if report.kept else "")
            + (f"; unused keys: {', '.join(report.unused[:4])}" if report.unused else "")
        )
    load_partial(model, new_state, [k for k in model.state_dict() if k not in new_state],
                 what="pyslowfast")  # fmt: skip
    return report
