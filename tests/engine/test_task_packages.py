"""A task owns its config sections, hooks and data paths; one task vocabulary; the core never
mentions clips.

The video task declares ``eval`` (extended with the test views), ``augment`` and
``multigrid``; a config of another task that sets one is a one-line error naming both tasks,
and a config written when every config had every section (at their defaults) still loads.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from pathlib import Path

import pytest
import yaml

from nlnet.engine.config import (
    CORE_SECTIONS,
    Config,
    ConfigError,
    config_from_dict,
    config_to_dict,
    load_config,
)
from nlnet.engine.hooks import build_hooks
from nlnet.engine.tasks import task_class, task_names
from nlnet.engine.tasks.video import AugmentConfig, MultigridConfig, VideoEvalConfig
from nlnet.models.model_cfg import TASKS
from nlnet.models.registry import list_models, model_facts

PACKAGE = Path(__file__).resolve().parents[2] / "nlnet"


def test_one_task_vocabulary_for_models_and_the_engine():
    assert set(task_names()) == set(TASKS)
    assert {model_facts(n).task for n in list_models()} <= set(task_names())


@pytest.mark.parametrize("name", sorted(TASKS))
def test_each_task_declares_its_sections_as_frozen_dataclasses(name):
    cls = task_class(name)
    for section, section_cls in dict(getattr(cls, "sections", {})).items():
        assert dataclasses.is_dataclass(section_cls), (name, section)
        assert section_cls.__dataclass_params__.frozen, (name, section)
        if section in CORE_SECTIONS:  # extends a core section, never replaces it
            assert issubclass(section_cls, CORE_SECTIONS[section]), (name, section)
    assert "root" in getattr(cls, "data_paths", ("root",))
    cfg = Config(task=name)
    assert set(cfg.sections) == {s for s in getattr(cls, "sections", {}) if s not in CORE_SECTIONS}


def test_the_video_task_owns_augment_multigrid_and_the_test_views():
    cfg = load_config(None, ["augment.mixup_alpha=0.2", "eval.clips=3", "multigrid.epoch_factor=2"])
    assert isinstance(cfg.augment, AugmentConfig) and cfg.augment.mixup_alpha == 0.2
    assert isinstance(cfg.multigrid, MultigridConfig) and cfg.multigrid.epoch_factor == 2
    assert isinstance(cfg.eval, VideoEvalConfig) and cfg.eval.clips == 3
    plain = config_to_dict(cfg)  # the task's sections are top-level keys, as in YAML
    assert plain["augment"]["mixup_alpha"] == 0.2 and "sections" not in plain
    assert config_from_dict(plain) == cfg


def test_a_segmentation_config_has_no_video_section():
    cfg = load_config("smoke/seg_tiny_digits")
    assert type(cfg.eval) is CORE_SECTIONS["eval"] and cfg.sections == {}
    assert "augment" not in config_to_dict(cfg)
    with pytest.raises(AttributeError, match="not a section of the task 'segmentation'"):
        cfg.augment  # noqa: B018
    assert not [h for h in build_hooks(cfg) if h.name == "multigrid"]


@pytest.mark.parametrize(
    "key, where",
    [
        ({"augment": {"mixup_alpha": 0.4}}, "augment: a section of the video_classification task"),
        ({"multigrid": {"short_cycle": True}}, "multigrid: a section of the video_classification"),
        ({"eval": {"clips": 3}}, "eval.clips: a key of the video_classification task's eval"),
    ],
)
def test_a_video_section_in_a_segmentation_config_is_one_line_naming_the_task(
    tmp_path, capsys, key, where
):
    base = {"task": "segmentation", "model": {"name": "seg_tiny"}}
    with pytest.raises(ConfigError) as err:
        config_from_dict({**base, **key})
    msg = str(err.value)
    assert msg.startswith(where) and "task 'segmentation'" in msg and "\n" not in msg
    section, values = next(iter(key.items()))
    dotted = [f"{section}.{k}={v}" for k, v in values.items()]
    with pytest.raises(ConfigError, match=re.escape(where)):  # a command-line override
        load_config("smoke/seg_tiny_digits", dotted)
    from nlnet.cli import main

    path = tmp_path / "seg.yaml"
    path.write_text(yaml.safe_dump({"_base_": str(PACKAGE / "configs/smoke/seg_tiny_digits.yaml"),
                                    **key}))  # fmt: skip
    assert main(["train", "--config", str(path), "--output-dir", str(tmp_path / "run")]) == 2
    err_lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err_lines) == 1 and where in err_lines[0], err_lines


def test_a_config_written_when_every_config_had_every_section_still_loads():
    """An older run's saved segmentation config holds the video sections at their defaults:
    they are dropped, not refused; a typo in the core keys is still an unknown key."""
    old = config_to_dict(load_config("smoke/seg_tiny_digits"))
    video = config_to_dict(Config())
    old.update(augment=video["augment"], multigrid=video["multigrid"])
    old["eval"] = {**old["eval"], "clips": 10, "crops": 1}
    cfg = config_from_dict(old)
    assert cfg == load_config("smoke/seg_tiny_digits")
    old["eval"]["clipz"] = 1
    with pytest.raises(ConfigError, match="unknown config key 'eval.clipz'"):
        config_from_dict(old)


def test_the_task_name_image_is_read_as_image_classification_with_a_warning():
    with pytest.warns(
        DeprecationWarning, match="'image' is deprecated; use 'image_classification'"
    ):
        cfg = config_from_dict({"task": "image", "data": {"builtin": "digits"}})
    assert cfg.task == "image_classification"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_config("smoke/image_digits_vit_tiny")  # the shipped configs use the new name


def test_the_loop_the_config_core_and_the_hook_base_never_mention_clips():
    core = ["engine/loop.py", "engine/state.py", "engine/hooks/base.py", "engine/hooks/build.py",
            "engine/config/schema.py", "engine/config/sections.py", "engine/config/checks.py",
            "engine/config/loading.py", "engine/config/tool_sections.py"]  # fmt: skip
    for rel in core:
        text = re.sub(r"clip_grad_norm|clip the global gradient", "", (PACKAGE / rel).read_text())
        assert not re.search(r"clip", text, re.I), rel


def test_a_plugin_task_that_cannot_load_does_not_break_other_configs(monkeypatch):
    from nlnet.engine import tasks

    monkeypatch.setitem(tasks._TASKS, "broken_plugin_task", "no_such_module_here:Task")
    cfg = load_config(None, ["optim.lr=0.1", "eval.clips=2"])  # another task's config loads
    assert cfg.eval.clips == 2


def test_sections_is_not_a_key_and_a_task_change_drops_the_other_tasks_sections():
    with pytest.raises(
        ConfigError, match="unknown config key 'sections'; valid keys in config: .*augment"
    ):
        config_from_dict({"sections": {"augment": {"mixup_alpha": 0.5}}})
    seg = dataclasses.replace(Config(), task="segmentation")
    assert seg.sections == {} and type(seg.eval) is CORE_SECTIONS["eval"]
    old = config_to_dict(load_config("smoke/seg_tiny_digits"))
    assert config_from_dict({**old, "augment": None}).sections == {}  # empty: its defaults


def test_detector_task_words_of_earlier_releases_read_as_detection():
    from nlnet.models.model_cfg import ModelCfg

    with pytest.warns(DeprecationWarning, match="'keypoints' is deprecated"):
        cfg = ModelCfg(task="keypoints", num_classes=2, input_size=(3, 64, 64))
    assert (cfg.task, cfg.outputs, cfg.takes_dropout) == ("detection", ("bbox", "keypoints"), False)


def test_one_word_list_for_what_a_detector_predicts():
    """A model's ``outputs`` and the detection data's ``iou_types`` are COCO's words, one list
    (models cannot import data: the two constants must agree), and a task, a ``default_cfg``
    dict and a model's facts hold them as tuples."""
    from nlnet.data.detection.config import IOU_TYPES
    from nlnet.engine.tasks.detection import DetectionTask
    from nlnet.models.model_cfg import DETECTION_OUTPUTS, ModelCfg

    assert DETECTION_OUTPUTS == IOU_TYPES
    cfg = ModelCfg(num_classes=2, input_size=(3, 64, 64), task="detection", outputs=["bbox"])
    assert cfg.outputs == ("bbox",)
    with pytest.raises(ValueError, match="iou_types: expected some of bbox, segm, keypoints"):
        DetectionTask(data={"root": "x"}, iou_types=("boxes",))
