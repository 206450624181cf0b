"""Random generator states as tensors and plain containers, loadable with ``weights_only=True``.

A checkpoint stores the python, numpy, torch (CPU) and CUDA generators of every process so that a
resumed run continues exactly as an uninterrupted one (:mod:`nlnet.engine.loop`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch


def get_rng_state() -> dict[str, Any]:
    """Capture the python, numpy, torch (CPU) and CUDA generators as plain containers."""
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": [version, torch.tensor(internal, dtype=torch.int64), gauss],
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore generators captured by :func:`get_rng_state`."""
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((int(version), tuple(int(v) for v in internal.tolist()), gauss))
    if "numpy" in state:
        s = state["numpy"]
        np.random.set_state(
            {
                "bit_generator": s["bit_generator"],
                "state": {"key": s["key"].numpy().astype(np.uint32), "pos": int(s["pos"])},
                "has_gauss": int(s["has_gauss"]),
                "gauss": float(s["gauss"]),
            }
        )
    if "torch" in state:
        torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        cuda_states = state["cuda"]
        if len(cuda_states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all([s.cpu() for s in cuda_states])
