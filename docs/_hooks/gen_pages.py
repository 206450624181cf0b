"""MkDocs hook: the reference pages generated from the code at build time.

* ``reference/models.md``: the model registry (name, parameters, multiply-adds at the model's
  input size, input, weights available), every model built on the ``meta`` device (no memory,
  no compute; the multiply-adds are counted by :mod:`nlnet.analysis.cost`);
* ``reference/config.md``: every key of the config dataclasses (type, default, the line of the
  docstring that describes it) and the video data keys;
* ``reference/cli.md``: the ``--help`` of every ``nlnet`` command, from its argparse parser;
* ``api/<package>.md``: one mkdocstrings directive per public module of each package.

``mkdocs.yml`` lists this file under ``hooks:``; the functions below also run in
``tests/test_docs_site.py``, so a broken generator fails the test suite, not only ``make docs``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import os
import pkgutil
import re
import sys
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # the checkout's nlnet, also when it is not installed
    sys.path.insert(0, str(REPO))

#: Packages of the API reference, in reading order, with a one-line summary.
API_PACKAGES: dict[str, str] = {
    "functional": "pure tensor operations: the non-local operation and the attention toolkit",
    "layers": "modules: the non-local block, multi-head and window attention, position embeddings",
    "models": "C2D/I3D ResNets, transformers, dense models, the registry, inflation, surgery",
    "data": "video decoding, datasets, clip sampling, transforms, the built-in digits tasks",
    "analysis": "cost counting, attention recording, pictures and rollout",
    "engine": "configs, the training loop and its parts, checkpoints, evaluation",
    "inference": "load a checkpoint, its preprocessing, predictions",
    "segmentation": "masks of new images and volumes from a segmentation checkpoint",
    "export": "export a checkpoint to ONNX, TorchScript, torch.export or safetensors, checked",
}


# ------------------------------------------------------------------------------ docstrings
def docstring_fields(obj: Any, sections: Iterable[str] = ("Attributes", "Args")) -> dict[str, str]:
    """``name -> first sentence`` of the Google-style ``Attributes:``/``Args:`` entries of ``obj``."""
    doc = inspect.getdoc(obj) or ""
    out: dict[str, str] = {}
    current, indent, name = False, 0, None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped.rstrip(":") in sections and stripped.endswith(":"):
            current, indent, name = True, len(line) - len(line.lstrip()), None
            continue
        if not current:
            continue
        if stripped and len(line) - len(line.lstrip()) <= indent:
            current = False  # the next section
            continue
        m = re.match(r"^\s*([A-Za-z_][\w, ]*?)(?: \([^)]*\))?:\s*(.*)$", line)
        if m and len(line) - len(line.lstrip()) <= indent + 4:
            names, text = m.group(1), m.group(2)
            for n in (n.strip() for n in names.split(",")):
                out[n] = text
            name = names
        elif name and stripped:
            for n in (n.strip() for n in name.split(",")):
                out[n] = f"{out[n]} {stripped}".strip()
    return {k: _first_sentence(v) for k, v in out.items()}


def _first_sentence(text: str) -> str:
    """The entry's text up to its first full stop (not the one of "e.g." / "i.e.")."""
    m = re.match(r"^(.+?(?<!e\.g)(?<!i\.e)(?<!etc)(?<!vs)\.)(\s|$)", text)
    return (m.group(1) if m else text).rstrip(".")


def data_keys_from_docstring(doc: str) -> dict[str, str]:
    """``key -> meaning`` of the key table in :mod:`nlnet.data.video.builder`' docstring."""
    out: dict[str, str] = {}
    lines = doc.split("keys (a plain dict", 1)[-1].split("::", 1)[-1].splitlines()
    key = None
    for line in lines:
        if not line.strip():
            continue
        if not line.startswith("    "):
            break
        m = re.match(r"^    (\w+)\s+(.*)$", line)
        if m:
            key, rest = m.group(1), m.group(2)
            rest = re.sub(r"^(\[[^]]*\]\s+|\S+\s{2,})", "", rest)  # the default column
            out[key] = rest.strip()
        elif key:
            out[key] += " " + line.strip()
    return {k: re.sub(r"\s+", " ", v) for k, v in out.items()}


def _cell(text: str) -> str:
    text = str(text).replace("\n", " ")
    parts = re.split(r"(``.+?``|`[^`]+`)", text)  # code spans keep their |, < and > as they are
    return "".join(
        p if p.startswith("`") else p.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
        for p in parts
    )


# ------------------------------------------------------------------------------ models
def _default_cfg(entry: Any) -> dict[str, Any]:
    """A registry entry's default config as a dict (a mapping or a dataclass such as ModelCfg)."""
    cfg = entry.default_cfg
    if dataclasses.is_dataclass(cfg):
        return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    return dict(cfg or {})


def _weights(entry: Any) -> str:
    import torchvision

    cfg = _default_cfg(entry)
    out = []
    if cfg.get("weights"):
        out.append(str(cfg["weights"]))
    if cfg.get("supports_pretrained"):
        out.append("whole-model weights (`pretrained=`)")
    params = inspect.signature(entry.builder).parameters
    if "weights" in params and entry.name in torchvision.models.list_models():
        out.append(f"torchvision ImageNet-1k (`weights=`, as `{entry.name}`)")
    arch = (
        entry.facts.weights_arch if entry.facts.weights_format in ("inflate", "backbone") else None
    )
    if arch or cfg.get("pretrained_2d_arg"):
        what = "backbone" if cfg.get("pretrained_2d_arg") else "2D, inflated" if len(
            cfg.get("input_size", ())) == 4 else "2D"  # fmt: skip
        out.append(f"ImageNet {arch or 'ResNet'} ({what}: `model.init`, `weights=`)")
    return "; ".join(out) or "none (random initialisation)"


def _input(cfg: dict[str, Any]) -> str:
    size = tuple(cfg.get("input_size") or ())
    kind = {4: "video C×T×H×W", 3: "image C×H×W"}.get(len(size), "")
    return f"{'×'.join(map(str, size))} ({kind})" if size else "n/a"


def _macs(name: str, entry: Any) -> int | None:
    from nlnet.analysis.cost import model_cost

    cfg = _default_cfg(entry)
    size = tuple(cfg.get("input_size") or ())[1:]
    try:
        if cfg.get("family") == "detection":
            from nlnet.analysis.detection_cost import detector_cost

            return int(detector_cost(name, size)["total"])
        return int(model_cost(name, size).macs)
    except Exception:  # a model the meta device cannot run: shown as n/a
        return None


def model_rows(pattern: str | None = None) -> list[dict[str, Any]]:
    """One row per registered model: name, description, params, MACs, input, weights, task."""
    import torch

    from nlnet.analysis.cost import count_params
    from nlnet.models.registry import get_model_entry, list_models

    rows = []
    for name in list_models(pattern):
        entry = get_model_entry(name)
        cfg = _default_cfg(entry)
        with torch.device("meta"):
            params = count_params(entry.builder())
        rows.append(
            {
                "name": name,
                "description": entry.description,
                "task": cfg.get("task") or "",
                "params": params,
                "macs": _macs(name, entry),
                "input": _input(cfg),
                "weights": _weights(entry),
            }
        )
    return rows


def models_page(rows: list[dict[str, Any]] | None = None) -> str:
    """The registry as a Markdown page, grouped by task."""
    rows = model_rows() if rows is None else rows
    lines = [
        "# Model list",
        "",
        "Generated from the registry when the site is built (`nlnet models` prints the same "
        "names). Parameters and multiply-adds (MACs = FLOPs / 2, batch 1, inference) are counted "
        "with every model built on PyTorch's `meta` device at the input size in the *input* "
        "column, the way `nlnet cost NAME` counts them; the detectors' count covers backbone + "
        "FPN, RPN and heads at 1000 proposals / 100 detections (see [Dense tasks](../dense.md)); "
        "*n/a*: the count fails on the `meta` device for that model. "
        "Build one with `nlnet.create_model(name, num_classes=...)`; the placement of the "
        "non-local blocks in each name is explained in [Models](../models.md).",
        "",
    ]
    tasks: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        tasks.setdefault(r["task"] or "other", []).append(r)
    for task, group in tasks.items():
        lines += [f"## {task.replace('_', ' ')}", ""]
        lines += ["| name | parameters | GMACs | input | weights available | description |",
                  "| --- | ---: | ---: | --- | --- | --- |"]  # fmt: skip
        for r in group:
            macs = "n/a" if r["macs"] is None else f"{r['macs'] / 1e9:.3f}"
            lines.append(
                f"| `{r['name']}` | {r['params'] / 1e6:.2f}M | {macs} | {r['input']} | "
                f"{_cell(r['weights'])} | {_cell(r['description'])} |"
            )
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ config
def _type_name(tp: Any) -> str:
    if isinstance(tp, str):
        return tp
    origin = typing.get_origin(tp)
    if origin is None:
        return getattr(tp, "__name__", str(tp).replace("typing.", ""))
    args = ", ".join("..." if a is Ellipsis else _type_name(a) for a in typing.get_args(tp))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " | ".join(_type_name(a) for a in typing.get_args(tp)).replace("NoneType", "None")
    return f"{getattr(origin, '__name__', str(origin))}[{args}]"


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        if dataclasses.is_dataclass(value):
            return "(section)"
    else:
        return "required"
    return "`null`" if value is None else f"`{value!r}`"


def config_sections() -> list[tuple[str, type]]:
    """``(prefix, dataclass)`` of the experiment config: ``Config`` and its nested sections, each
    task's own sections (``(video_classification) augment.``), then any other ``*Config``
    dataclass of :mod:`nlnet.engine` and the tasks' typed data sections."""

    from nlnet.engine.config import Config

    out: list[tuple[str, type]] = []
    seen: set[type] = set()

    def walk(prefix: str, cls: type) -> None:
        seen.add(cls)
        out.append((prefix, cls))
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            tp = hints.get(f.name)
            if isinstance(tp, type) and dataclasses.is_dataclass(tp) and tp not in seen:
                walk(f"{prefix}{f.name}.", tp)

    walk("", Config)
    from nlnet.engine.config.sections import task_sections
    from nlnet.engine.tasks import task_names

    for task in task_names():  # the tasks' own sections (the video task's augment, ...)
        for name, cls in task_sections(task).items():
            if cls not in seen:
                walk(f"({task}) {name}.", cls)
    engine = importlib.import_module("nlnet.engine")
    modules = [i.name for i in pkgutil.walk_packages(engine.__path__, "nlnet.engine.")]
    data = importlib.import_module("nlnet.data")  # typed data sections: each task's config.py
    modules += [i.name for i in pkgutil.walk_packages(data.__path__, "nlnet.data.")
                if i.name.endswith(".config")]  # fmt: skip
    for name in modules:
        if name.rsplit(".", 1)[-1].startswith("_"):
            continue
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if (isinstance(obj, type) and dataclasses.is_dataclass(obj)
                    and obj.__module__ == name and obj.__name__.endswith("Config")
                    and obj not in seen):  # fmt: skip
                seen.add(obj)
                prefix = "data." if obj.__name__.endswith("DataConfig") else ""
                out.append((f"({obj.__name__}) {prefix}", obj))
    return out


def config_page() -> str:
    """Every config key: type, default and meaning (from the dataclass docstrings)."""
    from nlnet.data.video import builder as datasets

    lines = [
        "# Configuration reference",
        "",
        "Generated from the config dataclasses of `nlnet.engine.config` when the site is built. "
        "A YAML config (`nlnet train --config NAME`, `nlnet train --list-configs`) sets any of "
        "these keys; `_base_` files are merged first, then the file, then dotted command-line "
        "overrides such as `optim.lr=0.005`. An unknown key is an error that names the valid "
        "ones. The paper's recipes are the shipped configs ([Training](../training.md), "
        "[Models](../models.md)).",
        "",
    ]
    for prefix, cls in config_sections():
        title = prefix.split(") ")[-1].rstrip(".") or "top level"
        lines += [f"## `{title}` ({cls.__name__})", ""]
        summary = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")
        lines += [summary, "", "| key | type | default | meaning |", "| --- | --- | --- | --- |"]
        hints = typing.get_type_hints(cls)
        meaning = docstring_fields(cls)
        key_prefix = prefix.split(") ")[-1]
        for f in dataclasses.fields(cls):
            type_code = "`" + _type_name(hints.get(f.name, f.type)) + "`"
            lines.append(
                f"| `{key_prefix}{f.name}` | {_cell(type_code)} | {_default(f)} | "
                f"{_cell(meaning.get(f.name, ''))} |"
            )
        lines.append("")
    defaults = getattr(datasets, "DATASET_DEFAULTS", None)
    if defaults is None:  # the data sections are dataclasses (listed above)
        return "\n".join(lines)
    args = data_keys_from_docstring(datasets.__doc__ or "")
    lines += [
        "## `data` (video classification)",
        "",
        "`data` is handed to the task's dataset builder (`nlnet.data.build_dataset` for "
        "`task: video_classification`), which checks its keys; missing keys take these defaults "
        "(`nlnet.data.video.builder.DATASET_DEFAULTS`). Layouts and the meaning of each key: "
        "[Video data](../data.md).",
        "",
        "| key | default | meaning |",
        "| --- | --- | --- |",
    ]
    for key, value in defaults.items():
        text = args.get(key, "")
        shown = "`null`" if value is None else f"`{value!r}`"
        lines.append(f"| `data.{key}` | {shown} | {_cell(text)} |")
    lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ CLI
def cli_page() -> str:
    """``nlnet --help`` and every command's ``--help``, from the argparse parsers."""
    from nlnet.cli import COMMANDS, build_parser, usage_text

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps to this width: stable pages
    try:
        lines = [
            "# Command-line reference",
            "",
            "Generated from the argparse parsers of `nlnet.commands` when the site is built; "
            "`nlnet COMMAND --help` prints the same text. A user error (bad config, data, "
            "checkpoint) is one line on stderr and exit status 2; `nlnet --debug COMMAND` shows "
            "its traceback.",
            "",
            "```text",
            usage_text(),
            "```",
            "",
        ]
        for name, (_, summary) in COMMANDS.items():
            help_text = build_parser(name).format_help().rstrip()
            lines += [f"## `nlnet {name}`", "", summary[:1].upper() + summary[1:] + ".", "",
                      "```text", help_text, "```", ""]  # fmt: skip
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    return "\n".join(lines)


# ------------------------------------------------------------------------------ API
def public_modules(package: str) -> list[str]:
    """Dotted names of the public modules of ``nlnet.<package>`` (itself first), from the files."""
    root = REPO / "nlnet" / package
    if not root.is_dir():
        return [f"nlnet.{package}"]
    names = [f"nlnet.{package}"]
    for info in pkgutil.walk_packages([str(root)], f"nlnet.{package}."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return names


def api_page(package: str) -> str:
    """The API page of one package: its docstring, then each public module."""
    modules = public_modules(package)
    lines = [f"# `nlnet.{package}`", "", API_PACKAGES.get(package, "").capitalize() + ".", ""]
    if len(modules) == 1:
        return "\n".join([*lines, f"::: nlnet.{package}", "    options:",
                          "      show_root_heading: false", ""])  # fmt: skip
    lines += [f"::: nlnet.{package}", "    options:", "      show_root_heading: false",
              "      members: false", ""]  # fmt: skip
    for name in modules[1:]:
        lines += [f"::: {name}", ""]
    return "\n".join(lines)


def generated_pages() -> dict[str, str]:
    """``path inside docs/ -> Markdown`` of every generated page."""
    pages = {
        "reference/models.md": models_page(),
        "reference/config.md": config_page(),
        "reference/cli.md": cli_page(),
    }
    pages.update({f"api/{p}.md": api_page(p) for p in API_PACKAGES})
    return pages


# ------------------------------------------------------------------------------ MkDocs hook
def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages to the site (MkDocs runs this before it builds the nav)."""
    from mkdocs.structure.files import File

    for path, text in generated_pages().items():
        files.append(File.generated(config, path, content=text))
    return files
