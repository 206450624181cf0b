"""Import (and export) the released Caffe2 models of the paper's video code.

The Kinetics models of "Non-local Neural Networks" (Wang, Girshick, Gupta, He, CVPR 2018,
arXiv:1711.07971) were released with the Caffe2 code facebookresearch/video-nonlocal-net as
``.pkl`` files: a pickled dict ``{"blobs": {blob name: numpy array}, ...}`` (written by
``save_model_params`` in ``lib/utils/checkpoints.py``; ``model_iter``, ``lr`` and SGD
``*_momentum`` blobs may sit next to the weights). This module maps those blobs onto nlnet's
C2D/I3D +/- non-local models (:mod:`nlnet.models.video.resnet3d`, torchvision parameter names).

Name mapping (blob names as built by ``lib/models/resnet_video.py``, ``resnet_helper.py`` and
``nonlocal_helper.py`` of the released code; ``{s}`` = stage 2..5 = ``layer{s-1}``, ``{i}`` =
residual block index)::

    conv1_w                          conv1.weight
    res_conv1_bn_{s,b,rm,riv}        bn1.{weight,bias,running_mean,running_var}
    res{s}_{i}_branch2{a,b,c}_w      layer{s-1}.{i}.conv{1,2,3}.weight
    res{s}_{i}_branch2{a,b,c}_bn_*   layer{s-1}.{i}.bn{1,2,3}.*
    res{s}_{i}_branch1_w / _bn_*     layer{s-1}.{i}.downsample.0.weight / downsample.1.*
    nonlocal_conv{s}_{i}_{theta,phi,g}_{w,b}
                                     layer{s-1}.{i}.non_local.{theta,phi,g}.{weight,bias}
    nonlocal_conv{s}_{i}_out_w       layer{s-1}.{i}.non_local.W_z.weight
    nonlocal_conv{s}_{i}_bn_*        layer{s-1}.{i}.non_local.norm.*
    pred_w, pred_b                   fc.weight, fc.bias

BN suffixes: ``_s`` scale (gamma), ``_b`` shift (beta), ``_rm`` running mean, ``_riv`` running
variance (Caffe2's SpatialBN takes the variance, not its inverse, despite the name). Models
trained with ``USE_AFFINE`` hold only ``_s``/``_b`` (a frozen affine layer); they are imported as
BN with running mean 0 and running variance ``1 - eps``, i.e. ``y = s * x + b`` up to float
rounding.

Layouts: Caffe2 convolutions are NCHW-ordered like PyTorch, so a ``ConvNd`` weight is
``(O, I, T, H, W)`` exactly as ``nn.Conv3d``; no transposition. ``pred_w`` is ``(classes, C)``
for the training/validation nets (``FC``) and ``(classes, C, 1, 1, 1)`` for the fully
convolutional test net; both are reshaped to ``fc.weight``. ``_out_b`` (the bias of W_z, absent
under ``NO_BIAS``) is folded into the following BN's running mean, where nlnet's W_z has no
bias: exact in evaluation mode. theta/phi/g biases that the file does not have (``NO_BIAS``) are
set to zero.

Safety: :func:`read_caffe2_pickle` unpickles with a restricted ``pickle.Unpickler`` that
resolves only numpy's array/dtype/scalar reconstructors, ``_codecs.encode`` (how Python 2 byte
strings arrive) and ``collections.OrderedDict``; any other global (``os.system``,
``builtins.eval``, ...) is refused before it can be called.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import os
import pickle
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from nlnet.models.loading import LoadReport, load_partial

__all__ = [
    "Caffe2FormatError",
    "read_caffe2_pickle",
    "caffe2_blob_name",
    "import_caffe2",
    "export_caffe2",
    "torch_key_of_blob",
    "caffe2_state_dict",
]

#: (module, name) pairs the restricted unpickler resolves; ``numpy.core`` is numpy < 2.
_ALLOWED_GLOBALS = {
    (mod, name)
    for core in ("numpy.core", "numpy._core")
    for mod, name in (
        (f"{core}.multiarray", "_reconstruct"),
        (f"{core}.multiarray", "scalar"),
        (f"{core}.numeric", "_frombuffer"),
    )
} | {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
    ("collections", "OrderedDict"),
}

_BN = {"weight": "s", "bias": "b", "running_mean": "rm", "running_var": "riv"}
_BRANCH = {"conv1": "branch2a", "conv2": "branch2b", "conv3": "branch2c"}
_NL_CONV = {"theta": "theta", "phi": "phi", "g": "g", "W_z": "out"}
_TRAINING_STATE = re.compile(r"(_momentum$|^model_iter$|^lr$)")


class Caffe2FormatError(ValueError):
    """The file is not a Caffe2 blob pickle, or it references code it must not run."""


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED_GLOBALS:
            raise Caffe2FormatError(
                f"refusing to load {module}.{name}: a Caffe2 model file holds only numpy arrays "
                "and plain containers (this file would run code when unpickled)"
            )
        if module.startswith("numpy.core") and importlib.util.find_spec("numpy._core"):
            module = module.replace("numpy.core", "numpy._core", 1)  # numpy >= 2
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return getattr(importlib.import_module(module), name)


def read_caffe2_pickle(path: str | os.PathLike | bytes) -> dict[str, np.ndarray]:
    """Read a released ``.pkl`` model without executing code; return ``{blob name: array}``.

    Accepts ``{"blobs": {...}, ...}`` or a flat ``{name: array}`` dict, Python 2 (``latin1``
    strings) or Python 3 pickles. Non-array entries (``model_iter``) are dropped.

    Raises:
        Caffe2FormatError: a foreign global in the pickle, or not a dict of arrays.
    """
    data = bytes(path) if isinstance(path, bytes) else Path(path).read_bytes()
    try:
        obj = _RestrictedUnpickler(io.BytesIO(data), encoding="latin1").load()
    except Caffe2FormatError:
        raise
    except Exception as err:  # truncated / not a pickle
        raise Caffe2FormatError(f"not a readable Caffe2 .pkl model: {err}") from None
    if isinstance(obj, Mapping) and isinstance(obj.get("blobs"), Mapping):
        obj = obj["blobs"]
    if not isinstance(obj, Mapping):
        raise Caffe2FormatError(f"expected a dict of blobs, got {type(obj).__name__}")
    blobs = {str(k): v for k, v in obj.items() if isinstance(v, np.ndarray)}
    if not blobs:
        raise Caffe2FormatError("the file holds no numpy arrays (no blobs)")
    return blobs


def caffe2_blob_name(key: str) -> str | None:
    """The released code's blob name of an nlnet state-dict key, or ``None`` if it has none."""
    parts = key.split(".")
    if parts[-1] == "num_batches_tracked":
        return None
    if key == "conv1.weight":
        return "conv1_w"
    if parts[0] == "bn1":
        return f"res_conv1_bn_{_BN[parts[1]]}"
    if parts[0] == "fc":
        return f"pred_{'w' if parts[1] == 'weight' else 'b'}"
    m = re.fullmatch(r"layer([1-4])\.(\d+)\.(.+)", key)
    if m is None:
        return None
    stage, idx, rest = int(m.group(1)) + 1, m.group(2), m.group(3).split(".")
    block = f"res{stage}_{idx}"
    if rest[0] in _BRANCH and rest[1] == "weight":
        return f"{block}_{_BRANCH[rest[0]]}_w"
    if rest[0] in ("bn1", "bn2", "bn3"):
        return f"{block}_{_BRANCH['conv' + rest[0][2]]}_bn_{_BN[rest[1]]}"
    if rest[0] == "downsample":
        if rest[1] == "0":
            return f"{block}_branch1_w"
        return f"{block}_branch1_bn_{_BN[rest[2]]}"
    if rest[0] == "non_local":
        nl = f"nonlocal_conv{stage}_{idx}"
        if rest[1] in _NL_CONV:
            return f"{nl}_{_NL_CONV[rest[1]]}_{'w' if rest[2] == 'weight' else 'b'}"
        if rest[1] == "norm" and rest[2] in _BN:
            return f"{nl}_bn_{_BN[rest[2]]}"
    return None


_INV_BN = {v: k for k, v in _BN.items()}
_INV_BRANCH = {v: k for k, v in _BRANCH.items()}
_INV_NL = {v: k for k, v in _NL_CONV.items()}


def torch_key_of_blob(name: str) -> str | None:
    """The nlnet (torchvision-layout) state-dict key of a released blob name, or ``None``.

    The inverse of :func:`caffe2_blob_name`; ``_out_b`` maps to ``W_z.bias`` (blocks without
    a norm). Training state (momentum, ``lr``, ``model_iter``) has no key.
    """
    if name == "conv1_w":
        return "conv1.weight"
    if name in ("pred_w", "pred_b"):
        return "fc.weight" if name == "pred_w" else "fc.bias"
    m = re.fullmatch(r"res_conv1_bn_(s|b|rm|riv)", name)
    if m:
        return f"bn1.{_INV_BN[m.group(1)]}"
    m = re.fullmatch(r"res([2-5])_(\d+)_(branch2[abc]|branch1)(_bn_(s|b|rm|riv)|_w)", name)
    if m:
        layer = f"layer{int(m.group(1)) - 1}.{m.group(2)}"
        branch, bn = m.group(3), m.group(5)
        if branch == "branch1":
            return f"{layer}.downsample.1.{_INV_BN[bn]}" if bn else f"{layer}.downsample.0.weight"
        idx = _INV_BRANCH[branch][-1]
        return f"{layer}.bn{idx}.{_INV_BN[bn]}" if bn else f"{layer}.conv{idx}.weight"
    m = re.fullmatch(r"nonlocal_conv([2-5])_(\d+)_(theta|phi|g|out|bn)_(w|b|s|rm|riv)", name)
    if m:
        block = f"layer{int(m.group(1)) - 1}.{m.group(2)}.non_local"
        part, kind = m.group(3), m.group(4)
        if part == "bn":
            return f"{block}.norm.{_INV_BN[kind]}"
        return f"{block}.{_INV_NL[part]}.{'weight' if kind == 'w' else 'bias'}"
    return None


def caffe2_state_dict(
    source: str | os.PathLike | Mapping[str, np.ndarray], *, eps: float = 1e-5
) -> dict[str, torch.Tensor]:
    """A released ``.pkl`` (e.g. the Caffe2 ImageNet ResNet ``r50_pretrain_c2_model_iter450450_
    clean.pkl``) as a torchvision-layout state dict, kernels in their file shape (2D kernels
    stay 4D: :func:`nlnet.models.inflate.load_pretrained_2d` inflates them, Section 4).

    Affine-only BN blobs (``_s``/``_b``) get running mean 0 and variance ``1 - eps``.

    Raises:
        Caffe2FormatError: not a blob pickle; ValueError: a weight blob with no nlnet name.
    """
    blobs = dict(source) if isinstance(source, Mapping) else read_caffe2_pickle(source)
    out: dict[str, torch.Tensor] = {}
    unknown = []
    for name, arr in blobs.items():
        if _TRAINING_STATE.search(name):
            continue
        key = torch_key_of_blob(name)
        if key is None:
            unknown.append(name)
            continue
        out[key] = torch.from_numpy(np.array(arr, dtype=np.float32))
    if unknown:
        raise ValueError(f"caffe2: blobs without an nlnet name: {', '.join(sorted(unknown)[:6])}")
    for key in [k for k in out if k.endswith(".weight") and _is_bn(k)]:
        base = key[: -len("weight")]
        if base + "running_mean" not in out:
            out[base + "running_mean"] = torch.zeros_like(out[key])
            out[base + "running_var"] = torch.full_like(out[key], 1.0 - eps)
        out[base + "num_batches_tracked"] = torch.tensor(0)
    return out


def _is_bn(key: str) -> bool:
    return bool(re.search(r"(^bn1|\.bn[123]|downsample\.1|\.norm)\.weight$", key))


def _bn_eps(model: nn.Module, key: str) -> float:
    mod = model.get_submodule(key.rsplit(".", 1)[0])
    return float(getattr(mod, "eps", 1e-5))


def _import_tensor(key, blob, target, report: LoadReport) -> torch.Tensor | None:
    arr = torch.from_numpy(np.ascontiguousarray(blob)).to(target.dtype)
    if tuple(arr.shape) == tuple(target.shape):
        return arr
    if key.startswith("fc.") and arr.numel() == target.numel():
        report.convert("reshaped", key)
        return arr.reshape(target.shape)
    return None


def import_caffe2(
    model: nn.Module,
    source: str | os.PathLike | Mapping[str, np.ndarray],
    *,
    strict: bool = True,
) -> LoadReport:
    """Load released Caffe2 blobs into an nlnet C2D/I3D (+ non-local) model, in place.

    Args:
        model: e.g. ``create_model("i3d311_r50_nl5", num_classes=400)``; its architecture must
            be the released model's (same depth, inflation and block placement).
        source: a ``.pkl`` path (read by :func:`read_caffe2_pickle`) or a blob dict.
        strict: raise when a model weight has no blob, a blob has the wrong shape (the
            classifier excepted: a head of another size keeps its initialisation) or a blob
            other than training state (momentum, ``lr``, ``model_iter``) goes unused: the file
            is then not this model (e.g. blocks in the file that the model lacks).

    Returns:
        The :class:`LoadReport`; ``unused`` lists blobs no model key uses, ``kept`` model keys without a blob.
    """
    blobs = dict(source) if isinstance(source, Mapping) else read_caffe2_pickle(source)
    report = LoadReport("caffe2")
    state = model.state_dict()
    new_state: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    bad: list[str] = []
    for key, target in state.items():
        name = caffe2_blob_name(key)
        if name is None:
            if not key.endswith("num_batches_tracked"):
                report.kept.append(key)
            continue
        if name in blobs:
            value = _import_tensor(key, blobs[name], target, report)
            used.add(name)
            if value is None:
                if key.startswith("fc."):
                    report.kept.append(key)  # classifier of another size: keep init
                    continue
                bad.append(f"{name} {tuple(blobs[name].shape)} -> {key} {tuple(target.shape)}")
                continue
            new_state[key] = value
            report.loaded.append(key)
        elif name.endswith(("_bn_rm", "_bn_riv")) and name.rsplit("_", 1)[0] + "_s" in blobs:
            fill = 0.0 if name.endswith("_rm") else 1.0 - _bn_eps(model, key)
            new_state[key] = torch.full_like(target, fill)
            report.convert("affine_bn", key)
        elif re.search(r"_(theta|phi|g)_b$", name):
            new_state[key] = torch.zeros_like(target)
            report.convert("zero_bias", key)
        else:
            report.kept.append(key)
    _fold_out_bias(blobs, new_state, used, report)
    report.training_state = sorted(b for b in blobs if _TRAINING_STATE.search(b))
    report.unused = sorted(set(blobs) - used - set(report.training_state))
    if strict and (bad or report.unused or [k for k in report.kept if not k.startswith("fc.")]):
        raise ValueError(
            "caffe2: the file does not match this model"
            + (f"; shape mismatch: {', '.join(bad[:6])}" if bad else "")
            + (f"; no blob for: {', '.join(report.kept[:6])}" if report.kept else "")
            + (f"; unused blobs: {', '.join(report.unused[:6])}" if report.unused else "")
        )
    load_partial(model, new_state, [k for k in model.state_dict() if k not in new_state],
                 what="caffe2")  # fmt: skip
    return report


def _fold_out_bias(blobs, new_state, used, report: LoadReport) -> None:
    """W_z's bias ``_out_b`` -> subtract it from the following BN's running mean (eval-exact)."""
    for key in list(new_state):
        if not key.endswith("non_local.norm.running_mean"):
            continue
        name = caffe2_blob_name(key)
        out_b = name.replace("_bn_rm", "_out_b")
        if out_b in blobs:
            bias = torch.from_numpy(np.asarray(blobs[out_b])).to(new_state[key].dtype)
            new_state[key] = new_state[key] - bias
            used.add(out_b)
            report.convert("folded", key)


def export_caffe2(model: nn.Module, path: str | os.PathLike | None = None) -> dict[str, Any]:
    """Write ``model`` in the released ``.pkl`` layout (``{"blobs": {...}}``, pickle protocol 2).

    The inverse of :func:`import_caffe2` (used by the tests to write files in the released
    format). Returns the dict that was (or would be) pickled.
    """
    blobs: dict[str, np.ndarray] = {}
    for key, value in model.state_dict().items():
        name = caffe2_blob_name(key)
        if name is None:
            if not key.endswith("num_batches_tracked"):
                raise ValueError(f"caffe2: no released blob name for {key!r}")
            continue
        blobs[name] = value.detach().cpu().float().numpy().copy()
    payload = {"blobs": blobs}
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            pickle.dump(payload, f, protocol=2)
    return payload
