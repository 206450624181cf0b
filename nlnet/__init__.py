"""nlnet: non-local neural networks and self-attention for vision.

The names most users need are importable from the package itself::

    import nlnet

    model = nlnet.create_model("c2d_r50_nl5", num_classes=400)    # a registered network
    block = nlnet.NonLocal3d(1024)                                 # the block (Fig. 2)
    model = nlnet.load_model("final.pt")                           # a trained checkpoint
    results = nlnet.predict(model, ["video.mp4"])                  # top classes per video
    masks = nlnet.segment(seg_model, ["case.nii.gz"])              # masks of a segmentation model

They are imported on first use (module ``__getattr__``, PEP 562), so ``import nlnet`` and
``nlnet --help`` do not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> module defining it (imported on first attribute access).
_LAZY: dict[str, str] = {
    "create_model": "nlnet.models",
    "list_models": "nlnet.models",
    "load_model": "nlnet.inference",
    "preprocessing": "nlnet.inference",
    "predict": "nlnet.inference",
    "save_pretrained": "nlnet.inference",
    "VideoTransform": "nlnet.inference",
    "ImageTransform": "nlnet.inference",
    "Prediction": "nlnet.inference",
    "segment": "nlnet.segmentation",
    "export_model": "nlnet.export",
    "Segmentation": "nlnet.segmentation",
    "NonLocal1d": "nlnet.layers",
    "NonLocal2d": "nlnet.layers",
    "NonLocal3d": "nlnet.layers",
}

__all__ = [  # the same names as _LAZY, spelled out for linters and type checkers
    "__version__",
    "create_model",
    "list_models",
    "load_model",
    "preprocessing",
    "predict",
    "save_pretrained",
    "VideoTransform",
    "ImageTransform",
    "Prediction",
    "segment",
    "Segmentation",
    "export_model",
    "NonLocal1d",
    "NonLocal2d",
    "NonLocal3d",
]

if TYPE_CHECKING:  # what type checkers see; at run time the names come from __getattr__
    from nlnet.export import export_model
    from nlnet.inference import (
        ImageTransform,
        Prediction,
        VideoTransform,
        load_model,
        predict,
        preprocessing,
        save_pretrained,
    )
    from nlnet.layers import NonLocal1d, NonLocal2d, NonLocal3d
    from nlnet.models import create_model, list_models
    from nlnet.segmentation import Segmentation, segment


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nlnet' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
