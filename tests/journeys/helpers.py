"""Tiny data, fake weight caches and checkpoints of every kind for the journey tests
(importable by the tests; not a test module)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nlnet.data.video_io.backends import write_video

#: torchvision architectures whose fake ImageNet files the shipped configs need
CONFIG_ARCHS = ("resnet50", "resnet101")


def write_mp4(path: Path, frames: np.ndarray, fps: int = 10) -> None:
    """Frames (T, H, W, 3) uint8 as an mp4 (the library's own writer, MPEG-4 Part 2)."""
    write_video(path, frames, fps=fps, codec="mpeg4")


def video_tree(root: Path, per_class: int = 2, classes: tuple[str, ...] = ("left", "right"),
               frames: int = 6, size: tuple[int, int] = (32, 40)) -> Path:  # fmt: skip
    """``root/{train,val}/<class>/*.mp4``: a bright bar on the class's side."""
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c, name in enumerate(classes):
            for i in range(per_class):
                x = rng.integers(0, 60, size=(frames, *size, 3), dtype=np.uint8)
                w = size[1] // len(classes)
                x[:, :, c * w : (c + 1) * w] = 220
                write_mp4(root / split / name / f"{name}_{i}.mp4", x)
    return root


def image_tree(root: Path, per_class: int = 3, classes: tuple[str, ...] = ("dark", "light"),
               size: int = 36) -> Path:  # fmt: skip
    """``root/{train,val}/<class>/*.png`` (an ImageFolder layout)."""
    from PIL import Image

    rng = np.random.default_rng(1)
    for split in ("train", "val"):
        for c, name in enumerate(classes):
            (root / split / name).mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                x = rng.integers(0, 80, size=(size, size, 3), dtype=np.uint8) + 150 * c
                Image.fromarray(x.astype(np.uint8)).save(root / split / name / f"{i}.png")
    return root


def volume_tree(root: Path, cases: int = 2, shape: tuple[int, ...] = (4, 12, 16, 20),
                splits: tuple[str, ...] = ("train", "val", "test"), nifti: bool = False,
                seed: int = 0) -> Path:  # fmt: skip
    """``root/<split>/{images,masks}``: ``cases`` BraTS-like volumes per split, a zero border
    (the "outside of the brain") around noise of mean 100, a bright cube labelled 4 (BraTS's
    enhancing tumour) inside a region labelled 2, labels {0, 2, 4}. ``.npy`` files
    ``(C, D, H, W)`` / ``(D, H, W)``, or with ``nifti`` one ``<case>_m<c>.nii.gz`` per channel
    and ``<case>_seg.nii.gz`` (nibabel)."""
    rng = np.random.default_rng(seed)
    c, d, h, w = shape
    for split in splits:
        (root / split / "images").mkdir(parents=True, exist_ok=True)
        (root / split / "masks").mkdir(parents=True, exist_ok=True)
        for i in range(cases):
            vol = np.zeros(shape, np.float32)
            vol[:, 1:-1, 1:-1, 1:-1] = rng.normal(100, 10, (c, d - 2, h - 2, w - 2))
            mask = np.zeros((d, h, w), np.uint8)
            z, y, x = (int(rng.integers(1, n - 4)) for n in (d, h, w))
            mask[z : z + 4, y : y + 4, x : x + 4] = 2
            mask[z + 1 : z + 3, y + 1 : y + 3, x + 1 : x + 3] = 4
            vol[:, mask == 4] += 50
            name = f"case{i}"
            if not nifti:
                np.save(root / split / "images" / f"{name}.npy", vol)
                np.save(root / split / "masks" / f"{name}.npy", mask)
                continue
            import nibabel

            for k in range(c):
                nibabel.save(nibabel.Nifti1Image(vol[k], np.eye(4)),
                             root / split / "images" / f"{name}_m{k}.nii.gz")  # fmt: skip
            nibabel.save(nibabel.Nifti1Image(mask, np.eye(4)),
                         root / split / "masks" / f"{name}_seg.nii.gz")  # fmt: skip
    return root


def fake_weight_file(torch_home: Path, arch: str, name: str = "IMAGENET1K_V1") -> Path:
    """A file at the real torch hub cache path of ``<arch> <name>`` holding the real keys and
    shapes, each tensor one broadcast constant (a few kB on disk whatever the model size).

    The model is built on the meta device (no memory). A weight of fan-in ``n`` holds
    ``c_i / n`` with ``c_i`` in [0.5, 1) depending on the key's position ``i``, BN scales 1 and
    statistics (0, 1): the activations stay of order one through a deep network, as with real
    weights, and a test can tell a loaded tensor from a random initialisation.
    """
    from torchvision.models import get_model, get_model_weights

    from nlnet.models.weights import hub_cache_path

    weights = get_model_weights(arch)[name]
    old = os.environ.get("TORCH_HOME")
    os.environ["TORCH_HOME"] = str(torch_home)
    try:
        path = hub_cache_path(weights)
    finally:
        if old is None:
            del os.environ["TORCH_HOME"]
        else:
            os.environ["TORCH_HOME"] = old
    if path.is_file():
        return path
    with torch.device("meta"):
        model = get_model(arch, num_classes=len(weights.meta["categories"]))
    sd = {}
    for i, (k, v) in enumerate(model.state_dict().items()):
        fan_in = int(np.prod(v.shape[1:])) if v.dim() > 1 else 1
        value = torch.full((), (0.5 + 0.5 * (i % 97) / 97) / fan_in, dtype=v.dtype)
        if k.endswith("num_batches_tracked") or k.endswith("running_mean"):
            value = torch.zeros((), dtype=v.dtype)
        elif k.endswith("running_var") or (v.dim() == 1 and k.endswith("weight")):
            value = torch.ones((), dtype=v.dtype)
        elif v.dim() == 1:  # biases
            value = torch.full((), 1e-3 * (i % 97), dtype=v.dtype)
        sd[k] = value.expand(v.shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(sd, path)
    return path


def engine_cfg(task: str, model: str, data: dict[str, Any], out: Path, **over: Any):
    """A one-step CPU config of ``task`` (the journey tests' common training settings)."""
    from nlnet.engine.config import load_config

    base = {
        "task": task, "model.name": model, "data": data, "optim.max_iters": 1,
        "optim.steps": [], "optim.lr": 1e-3, "train.batch_size": 2, "train.workers": 0,
        "train.log_every": 1, "train.ckpt_every": 0, "train.device": "cpu",
        "train.progress": False, "eval.batch_size": 2, "eval.workers": 0,
        "output_dir": str(out),
    }  # fmt: skip
    if task == "video_classification":
        base["eval.clips"] = 1  # the video task's test views
    base.update(over)
    return load_config(None, base)


def video_data(root: Path) -> dict[str, Any]:
    return {"type": "folder", "root": str(root), "num_frames": 4, "stride": 1,
            "train_scale": [32, 36], "crop": 32, "test_scale": 32, "cache": False}  # fmt: skip


def make_checkpoint(kind: str, tmp: Path) -> Path:
    """Train one step of a tiny model of ``kind`` (video, image, segmentation, detection) or
    import a narrow Caffe2 file (caffe2); returns the checkpoint path."""
    from nlnet.engine.loop import train

    tmp.mkdir(parents=True, exist_ok=True)
    if kind == "video":
        cfg = engine_cfg("video_classification", "c2d_tiny_nl1",
                         video_data(video_tree(tmp / "videos")), tmp / "run")  # fmt: skip
    elif kind == "image":
        cfg = engine_cfg("image_classification", "vit_tiny", {"root": str(image_tree(tmp / "images")),
                         "size": 32}, tmp / "run", **{"eval.split": "val"})  # fmt: skip
    elif kind in ("segmentation", "detection"):
        from nlnet.data.digits.dense import DenseDigitsConfig, prepare_dense_digits

        root = prepare_dense_digits(
            DenseDigitsConfig(size=64, num_train=4, num_val=2, num_test=2, seed=5), tmp / "dense"
        )
        seg = kind == "segmentation"
        cfg = engine_cfg(kind, "seg_tiny_nl" if seg else "maskrcnn_tiny_nl", {"root": str(root)},
                         tmp / "run", **({"model.num_classes": 4} if seg else {}),
                         **{"eval.split": "test"})  # fmt: skip
    elif kind == "caffe2":
        return caffe2_checkpoint(tmp)
    else:
        raise ValueError(kind)
    return Path(train(cfg)["checkpoint"])


def caffe2_checkpoint(tmp: Path) -> Path:
    """``nlnet import-caffe2`` of a narrow random i3d311_r50_nl5 written in the released layout."""
    from nlnet.cli import main
    from nlnet.models.caffe2 import export_caffe2
    from nlnet.models.registry import create_model

    torch.manual_seed(0)
    src = create_model("i3d311_r50_nl5", num_classes=3, width=4).eval()
    pkl = tmp / "released.pkl"
    export_caffe2(src, pkl)
    out = tmp / "imported.pt"
    argv = ["import-caffe2", str(pkl), "--model", "i3d311_r50_nl5", "--output", str(out),
            "--config", "kinetics/i3d311_r50_nl5", "--override", "width=4"]  # fmt: skip
    assert main(argv) == 0
    return out
