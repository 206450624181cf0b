"""Checkpoints (detectron2's ``checkpoint/`` layout): files, generator states, paths, models.

=====================  ==========================================================
``file_io``            atomic saves, verified ``weights_only`` loads, the format tag
``rng``                the generator states of a process as checkpoint data
``paths``              ``checkpoints/last.pt`` / ``final.pt`` of a run; ``--resume``
``model_loading``      checkpoint -> network, class names, preprocessing
``pretrained``         ``config.json`` + ``model.safetensors`` folders (``save_pretrained``)
=====================  ==========================================================

Names are imported lazily from their module on first use.
"""

from __future__ import annotations

from nlnet.engine.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "FORMAT": "file_io",
        "VERSION": "file_io",
        "clean_orphan_temp_files": "file_io",
        "load_checkpoint": "file_io",
        "save_checkpoint": "file_io",
        "unwrap_model": "file_io",
        "get_rng_state": "rng",
        "set_rng_state": "rng",
        "CHECKPOINT_DIR": "paths",
        "FINAL": "paths",
        "LAST": "paths",
        "resolve_resume": "paths",
        "CheckpointError": "model_loading",
        "CheckpointInfo": "model_loading",
        "CheckpointMismatchError": "model_loading",
        "check_compatible": "model_loading",
        "save_pretrained": "pretrained",
        "read_pretrained": "pretrained",
        "check_rebuildable": "model_loading",
        "checkpoint_info": "model_loading",
        "load_backbone": "model_loading",
        "build_model_from_checkpoint": "model_loading",
        "load_model_weights": "model_loading",
        "takes_dropout": "model_loading",
    },
)
