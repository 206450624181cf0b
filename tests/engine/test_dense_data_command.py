"""The dense-data preparation command of docs/dense.md: the one the smoke configs name, writing
the folder their ``data.root`` reads (run here on a smaller task: the full one is 2,400 images)."""

from __future__ import annotations

import functools
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIGS = ("smoke/seg_tiny_digits", "smoke/maskrcnn_tiny_digits")


def _documented_command() -> str:
    lines = (REPO / "docs" / "dense.md").read_text(encoding="utf-8").splitlines()
    found = [
        line.strip()
        for line in lines
        if line.strip().startswith("python -c") and "prepare_dense_digits" in line
    ]
    assert len(found) == 1, found
    return found[0]


def test_docs_and_config_comments_give_the_same_command():
    command = _documented_command()
    for name in CONFIGS:
        text = (REPO / "nlnet" / "configs" / f"{name}.yaml").read_text(encoding="utf-8")
        assert f"#   {command}" in text, name


def test_the_command_writes_what_the_smoke_configs_read(tmp_path, monkeypatch):
    import nlnet.data.digits.dense as dd
    from nlnet.engine.config import load_config
    from nlnet.engine.tasks import get_task

    code = shlex.split(_documented_command())[2]  # python -c CODE
    small = functools.partial(dd.DenseDigitsConfig, size=48, num_train=4, num_val=2, num_test=2)
    monkeypatch.setattr(dd, "DenseDigitsConfig", small)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/dense.md", "exec"), {})  # noqa: S102 - the documented command
    for name in CONFIGS:
        cfg = load_config(name)
        root = Path(cfg.data["root"] if isinstance(cfg.data, dict) else cfg.data.root)
        assert (tmp_path / root / "manifest.json").is_file(), name
        task = get_task(cfg)
        train, val = task.build_datasets()
        assert (len(train), len(val)) == (4, 2), name  # the small task, from the command
