"""The values the loop and its hooks hand to each other: a small store of named, iteration-
stamped values (detectron2's ``EventStorage`` shape: ``put_scalar`` / ``latest`` /
``history``).

A hook never writes onto the loop; it puts its result here (the validation hook its metrics
under ``"val"``, the checkpoint hook the path it wrote under ``"checkpoint"``, the logging hook
the window's loss under ``"loss"``), and the loop and the other hooks read it back.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EventStorage"]


class EventStorage:
    """Named values, each with the iteration at which it was put.

    Args:
        iteration: the iteration stamped on the values put from now on (the loop advances it
            with :meth:`step`).
    """

    def __init__(self, iteration: int = 0) -> None:
        self.iteration = iteration
        self._history: dict[str, list[tuple[int, Any]]] = {}

    def step(self, iteration: int) -> None:
        """Stamp the values put from now on with ``iteration``."""
        self.iteration = iteration

    def put(self, name: str, value: Any) -> None:
        """Record ``value`` (any object: a metrics dict, a path) under ``name``."""
        self._history.setdefault(name, []).append((self.iteration, value))

    def put_scalar(self, name: str, value: float | None) -> None:
        """Record a number (``None`` when there is none, e.g. a loss of no usable item)."""
        self.put(name, None if value is None else float(value))

    def latest(self, name: str, default: Any = None) -> Any:
        """The last value put under ``name`` (``default`` when there is none)."""
        values = self._history.get(name)
        return values[-1][1] if values else default

    def history(self, name: str) -> list[tuple[int, Any]]:
        """Every ``(iteration, value)`` put under ``name``, oldest first."""
        return list(self._history.get(name, ()))

    def names(self) -> list[str]:
        """The names that hold at least one value."""
        return sorted(self._history)
