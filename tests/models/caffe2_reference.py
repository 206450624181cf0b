"""An independent transcription of the released Caffe2 video network, for the import tests.

Written from the released builders of facebookresearch/video-nonlocal-net (``create_model`` and
``obtain_arc`` of ``lib/models/resnet_video_org.py`` / ``resnet_video.py``, the bottleneck, the
shortcut and the stages of ``resnet_helper.py``, ``spacetime_nonlocal`` / ``add_nonlocal`` /
``add_nonlocal_group`` of ``nonlocal_helper.py``, and the train/val/test heads), in plain
``torch.nn.functional`` calls on a dict of blobs. It shares no code with nlnet's models: the
only link is the blob names. Every blob is requested by name with the shape the released
builder declares for it, so the same function also *generates* a random file of the released
layout (``make=True``), which is how the tests obtain files with every released name.

Configuration (the released cfg keys a released training script sets):

* ``builder``: ``"org"`` (``resnet_video_org.py``, 32x2 / 128x1 files) or ``"video"``
  (``resnet_video.py``, 8x8 / 32x4 files); ``arc``: ``VIDEO_ARC_CHOICE`` (1 C2D, 2 I3D, R50);
* ``nonlocal``: ``CONV3_NONLOCAL`` and ``CONV4_NONLOCAL`` (``LAYER_MOD`` 2);
* ``affine``: ``MODEL.USE_AFFINE`` (frozen BN as scale/shift; res3 blocks in groups of 4);
* ``nl_bn``: ``NONLOCAL.USE_BN``; ``width``: ``WIDTH_PER_GROUP`` (64; smaller for fast tests).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

EPS = 1.0000001e-5  # MODEL.BN_EPSILON of the released configs
BLOCKS_R50 = (3, 4, 6, 3)


def obtain_arc(arc: int) -> tuple[list[int], list[list[int]]]:
    """``use_temp_convs`` of conv1 and of each stage's blocks (ResNet-50)."""
    if arc == 1:  # C2D
        return [0], [[0] * 3, [0] * 4, [0] * 6, [0] * 3]
    if arc == 2:  # I3D: conv1 5x7x7, 3x1x1 branch2a in alternate blocks
        return [2], [[1, 1, 1], [1, 0, 1, 0], [1, 0, 1, 0, 1, 0], [0, 1, 0]]
    raise ValueError(arc)


class Blobs:
    """Blob access by released name; ``make=True`` creates missing blobs at the declared shape."""

    def __init__(self, blobs: dict, make: bool, seed: int, dtype: torch.dtype) -> None:
        self.blobs, self.make, self.dtype = blobs, make, dtype
        self.rng = np.random.default_rng(seed)
        self.used: set[str] = set()

    def __call__(self, name: str, shape: tuple, kind: str = "w") -> torch.Tensor:
        if self.make:  # declare only: shapes flow through the network on the meta device
            self.blobs.setdefault(name, self._random(shape, kind))
            return torch.empty(shape, device="meta", dtype=self.dtype)
        arr = self.blobs[name]
        assert tuple(arr.shape) == tuple(shape), (name, arr.shape, shape)
        self.used.add(name)
        return torch.from_numpy(np.asarray(arr)).to(self.dtype)

    def has(self, name: str) -> bool:
        return name in self.blobs

    def _random(self, shape: tuple, kind: str) -> np.ndarray:
        r = self.rng
        if kind == "w":  # variance 1/fan_in: residual sums stay O(1) over 16 blocks
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            a = r.standard_normal(shape) * math.sqrt(1.0 / fan_in)
        elif kind == "s":
            a = r.uniform(0.5, 1.5, shape)
        elif kind == "riv":
            a = r.uniform(0.5, 2.0, shape)
        elif kind == "pred":  # a classifier whose softmax is far from one-hot
            a = r.standard_normal(shape) * 0.1 / math.sqrt(shape[1])
        elif kind == "pred_b":
            a = r.standard_normal(shape) * 0.01
        else:  # biases, running means
            a = r.standard_normal(shape) * 0.2
        return a.astype(np.float32)


def _norm(x, W: Blobs, prefix: str, c: int, bn: bool) -> torch.Tensor:
    """SpatialBN (test mode) or AffineNd: ``prefix_s``, ``_b`` (+ ``_rm``, ``_riv``)."""
    s, b = W(prefix + "_s", (c,), "s"), W(prefix + "_b", (c,), "b")
    shape = (1, c, 1, 1, 1)
    if not bn:  # AffineNd: y = x * s + b
        return x * s.view(shape) + b.view(shape)
    rm, riv = W(prefix + "_rm", (c,), "b"), W(prefix + "_riv", (c,), "riv")
    return (x - rm.view(shape)) / torch.sqrt(riv.view(shape) + EPS) * s.view(shape) + b.view(shape)


def _conv_norm(x, W, prefix, c_in, c_out, kernel, stride, pad, bn) -> torch.Tensor:
    w = W(prefix + "_w", (c_out, c_in, *kernel))
    return _norm(F.conv3d(x, w, stride=stride, padding=pad), W, prefix + "_bn", c_out, bn)


def _residual_block(x, W, prefix, c_in, c_out, stride, inner, temp, bn) -> torch.Tensor:
    """``_generic_residual_block_3d`` with ``bottleneck_transformation_3d``, shortcut type B."""
    t = 1 + 2 * temp
    y = F.relu(_conv_norm(x, W, prefix + "_branch2a", c_in, inner, (t, 1, 1), 1, (temp, 0, 0), bn))
    y = F.relu(
        _conv_norm(y, W, prefix + "_branch2b", inner, inner, (1, 3, 3), (1, stride, stride),
                   (0, 1, 1), bn)
    )  # fmt: skip
    y = _conv_norm(y, W, prefix + "_branch2c", inner, c_out, (1, 1, 1), 1, 0, bn)
    if c_in == c_out and stride == 1:
        sc = x
    else:
        sc = _conv_norm(x, W, prefix + "_branch1", c_in, c_out, (1, 1, 1), (1, stride, stride),
                        0, bn)  # fmt: skip
    return F.relu(y + sc)


def spacetime_nonlocal(x, W, prefix: str, c: int, nl_bn: bool) -> torch.Tensor:
    """``spacetime_nonlocal``: embedded Gaussian, max-pool (1,2,2) before phi/g, scaled."""
    inner = c // 2

    def conv(inp, name, c_in, c_out):
        b = W(f"{prefix}_{name}_b", (c_out,), "b")  # NONLOCAL.NO_BIAS is 0 in every release
        return F.conv3d(inp, W(f"{prefix}_{name}_w", (c_out, c_in, 1, 1, 1)), b)

    theta = conv(x, "theta", c, inner)
    pooled = F.max_pool3d(x, (1, 2, 2), stride=(1, 2, 2))
    phi, g = conv(pooled, "phi", c, inner), conv(pooled, "g", c, inner)
    n = x.shape[0]
    theta, phi, g = (v.reshape(n, inner, -1) for v in (theta, phi, g))
    affinity = torch.bmm(theta.transpose(1, 2), phi) * inner**-0.5  # (N, HW, HW')
    p = torch.softmax(affinity, dim=2)
    y = torch.bmm(g, p.transpose(1, 2)).reshape(n, inner, *x.shape[2:])
    out = conv(y, "out", inner, c)
    if nl_bn:
        out = _norm(out, W, prefix + "_bn", c, True)
    return out


def add_nonlocal_group(x, W, prefix, c, group_size, nl_bn) -> torch.Tensor:
    """``add_nonlocal_group``: the block within groups of ``group_size`` frames."""
    n, _, t, h, w = x.shape
    groups = t // group_size
    assert t % group_size == 0
    if groups > 1:
        x = x.transpose(1, 2).reshape(n * groups, group_size, c, h, w).transpose(1, 2)
    out = x + spacetime_nonlocal(x, W, prefix, c, nl_bn)
    if groups > 1:
        out = out.transpose(1, 2).reshape(n, t, c, h, w).transpose(1, 2)
    return out


def released_forward(
    blobs: dict, cfg: dict, x: torch.Tensor, split: str = "test", make: bool = False
) -> torch.Tensor:
    """The released network on ``x`` ``(N, 3, T, H, W)`` (already normalised).

    ``split="test"``: the fully-convolutional test net, averaged softmax ``(N, classes)``;
    ``split="val"``: the FC head on a single pooled position, softmax.
    ``make=True`` fills ``blobs`` with random arrays of every name the network declares.
    """
    W = Blobs(blobs, make=make, seed=cfg.get("seed", 0), dtype=x.dtype)
    w, bn, classes = cfg["width"], not cfg["affine"], cfg["num_classes"]
    conv1_temp, stage_temps = obtain_arc(cfg["arc"])
    org = cfg["builder"] == "org"
    length = x.shape[2]
    pool_stride = length // 8 if org else length // 2
    u = conv1_temp[0]
    x = F.conv3d(x, W("conv1_w", (w, 3, 1 + 2 * u, 7, 7)), stride=(2 if org else 1, 2, 2),
                 padding=(u, 3, 3))  # fmt: skip
    x = F.relu(_norm(x, W, "res_conv1_bn", w, bn))
    x = F.max_pool3d(x, (2, 3, 3), (2, 2, 2)) if org else F.max_pool3d(x, (1, 3, 3), (1, 2, 2))
    dim_in = w
    for s, (n_blocks, temps) in enumerate(zip(BLOCKS_R50, stage_temps)):
        stage = s + 2
        dim_out, inner = 4 * w * 2**s, w * 2**s
        nonlocal_mod = 2 if cfg["nonlocal"] and stage in (3, 4) else 1000
        for idx in range(n_blocks):
            stride = 2 if (idx == 0 and stage > 2) else 1
            x = _residual_block(x, W, f"res{stage}_{idx}", dim_in, dim_out, stride, inner,
                                temps[idx], bn)  # fmt: skip
            dim_in = dim_out
            if idx % nonlocal_mod == nonlocal_mod - 1:
                name = f"nonlocal_conv{stage}_{idx}"
                if cfg["affine"] and stage == 3:
                    assert pool_stride == x.shape[2]  # res3's frames (pool_stride of the cfg)
                    x = add_nonlocal_group(x, W, name, dim_in, 4, cfg["nl_bn"])
                else:
                    x = x + spacetime_nonlocal(x, W, name, dim_in, cfg["nl_bn"])
        if stage == 2:
            x = F.max_pool3d(x, (2, 1, 1), (2, 1, 1))
    x = F.avg_pool3d(x, (pool_stride, 7, 7), stride=1)  # pool5
    if split == "val":
        assert x.shape[2:] == (1, 1, 1)
        logits = F.linear(
            x.flatten(1), W("pred_w", (classes, dim_in), "pred"), W("pred_b", (classes,), "pred_b")
        )
        return torch.softmax(logits, dim=1)
    # the file holds the FC's (classes, C); the test net loads it reshaped into its 1x1x1 conv
    pred_w = W("pred_w", (classes, dim_in), "pred").reshape(classes, dim_in, 1, 1, 1)
    pred = F.conv3d(x, pred_w, W("pred_b", (classes,), "pred_b"))
    prob = torch.softmax(pred.permute(0, 2, 3, 4, 1).reshape(-1, classes), dim=1)
    prob = prob.reshape(*pred.permute(0, 2, 3, 4, 1).shape).permute(0, 4, 1, 2, 3)
    return prob.mean(dim=(2, 3, 4))


def make_released_blobs(cfg: dict, x_shape: tuple, split: str = "val") -> dict:
    """A random blob dict with every name/shape the released builder declares for ``cfg``."""
    blobs: dict = {}
    released_forward(blobs, cfg, torch.empty(x_shape, device="meta"), split, make=True)
    return blobs
