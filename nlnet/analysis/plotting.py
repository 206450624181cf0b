"""The one matplotlib set-up of the package: the non-interactive ``Agg`` backend (files only,
no display needed), imported lazily so that importing nlnet does not import matplotlib."""

from __future__ import annotations

from typing import Any

__all__ = ["pyplot"]


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the ``Agg`` backend (unless a backend was already chosen)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt
