"""Weights in safetensors: a folder ``config.json`` + ``model.safetensors`` (timm's and Hugging
Face's ``save_pretrained`` layout).

``config.json`` holds what rebuilds the network and feeds it (the registry name, the class
count, the ``create_model`` options, the class names and the test-time preprocessing);
``model.safetensors`` holds the weights and nothing that runs code. :func:`load_checkpoint`
reads such a folder as a checkpoint, so ``nlnet.load_model(folder)``, ``nlnet predict``,
``nlnet eval`` and ``nlnet export`` take it like a ``.pt`` file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nlnet.data.atomic import atomic_path
from nlnet.data.preprocessing import Preprocessing
from nlnet.engine.errors import CheckpointError

__all__ = ["CONFIG_FILE", "WEIGHTS_FILE", "is_pretrained_dir", "read_pretrained", "save_pretrained"]

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
#: What ``config.json`` holds, copied from (and back into) a checkpoint.
_KEYS = ("model_name", "num_classes", "model_options", "class_names", "preprocessing")


def is_pretrained_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder with ``model.safetensors``."""
    return Path(path).is_dir() and (Path(path) / WEIGHTS_FILE).is_file()


def save_pretrained(ckpt: Mapping[str, Any], directory: str | os.PathLike) -> Path:
    """Write a checkpoint's network as ``directory/config.json`` + ``model.safetensors``.

    Args:
        ckpt: a loaded nlnet checkpoint (:func:`load_checkpoint`).
        directory: the folder (created; files written atomically).

    Returns:
        The folder.
    """
    from safetensors.torch import save_file

    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise CheckpointError(
            f"--output: {str(out)!r} is a file; safetensors weights go in a folder"
        )
    out.mkdir(parents=True, exist_ok=True)
    config = {k: ckpt.get(k) for k in _KEYS}
    try:  # an older shape: this version's
        record = Preprocessing.from_dict(ckpt.get("preprocessing"))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"preprocessing: {exc}") from None
    config["preprocessing"] = record.to_dict() if record is not None else {}
    config["format"] = "nlnet-pretrained"
    config["eval"] = (ckpt.get("config") or {}).get("eval") or {}
    # safetensors stores plain tensors: contiguous, no shared storage
    weights = {k: v.detach().cpu().contiguous().clone() for k, v in ckpt["model"].items()}
    with atomic_path(out / WEIGHTS_FILE) as tmp:
        save_file(weights, tmp, metadata={"format": "pt"})
    text = json.dumps(config, indent=2) + "\n"
    with atomic_path(out / CONFIG_FILE) as tmp:
        tmp.write_text(text)
    return out


def read_pretrained(directory: str | os.PathLike) -> dict[str, Any]:
    """A ``save_pretrained`` folder as a checkpoint dict (``model``, ``model_name``, ...).

    Raises:
        CheckpointError: no ``config.json`` or an unreadable weights file (names the folder).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(directory)
    try:
        config = json.loads((folder / CONFIG_FILE).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(
            f"checkpoint {str(folder)!r}: no readable {CONFIG_FILE} ({exc})"
        ) from None
    try:
        weights = load_file(str(folder / WEIGHTS_FILE))
    except (OSError, SafetensorError) as exc:
        raise CheckpointError(
            f"checkpoint {str(folder)!r}: {WEIGHTS_FILE} unreadable ({exc})"
        ) from None
    ckpt: dict[str, Any] = {k: config.get(k) for k in _KEYS}
    ckpt["model"] = dict(weights)
    ckpt["config"] = {"eval": config.get("eval") or {}}
    return ckpt
