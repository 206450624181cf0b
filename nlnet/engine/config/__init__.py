"""Experiment configuration (detectron2's ``config/`` layout): typed sections, YAML files,
checks.

=====================  ==========================================================
``schema``             the section dataclasses (:class:`Config` and its parts)
``tool_sections``      the sections of every task's training tools (EMA, ...)
``sections``           dict <-> dataclass, strict keys; the task's data and own sections
``files``              named configs, ``_base_`` inheritance, dotted overrides
``checks``             numbers in range, choices, model overrides
``loading``            ``load_config``, ``config_from_dict``, ``save_config``, ``replace``
=====================  ==========================================================

Names are imported lazily from their module on first use.
"""

from __future__ import annotations

from nlnet.engine.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "Config": "schema",
        "CORE_SECTIONS": "schema",
        "EvalConfig": "schema",
        "ModelConfig": "schema",
        "OptimConfig": "schema",
        "TrainConfig": "schema",
        "EMAConfig": "tool_sections",
        "LoggingConfig": "tool_sections",
        "HealthConfig": "tool_sections",
        "PreciseBNConfig": "tool_sections",
        "MOVED_KEYS": "files",
        "apply_overrides": "files",
        "list_configs": "files",
        "parse_overrides": "files",
        "resolve_config_path": "files",
        "absolute_paths": "loading",
        "config_from_dict": "loading",
        "config_to_dict": "loading",
        "load_config": "loading",
        "replace": "loading",
        "save_config": "loading",
        "ConfigError": "loading",
    },
)
