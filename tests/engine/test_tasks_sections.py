"""Tasks take their own typed sections: ``from_config(cfg)`` is the only method that reads the
whole config, and a task built directly from sections (no ``Config``) trains and evaluates."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from engine_standins import TinyVideoNet

from nlnet.data.video.config import VideoDataConfig
from nlnet.engine import tasks
from nlnet.engine.config import config_from_dict
from nlnet.engine.tasks import Task, get_task, register_task, task_class, task_names
from nlnet.engine.tasks.video import AugmentConfig, VideoClassificationTask, VideoEvalConfig

#: the smallest valid config of each registered task (what its ``from_config`` must read)
#: (non-default values, so that a ``from_config`` that drops one is caught below)
CONFIGS = {
    "video_classification": {
        "model": {"num_classes": 3}, "class_names": ["a", "b", "c"],
        "train": {"loss": "ce"}, "augment": {"label_smoothing": 0.1},
    },
    "image_classification": {
        "data": {"builtin": "digits", "size": 16}, "train": {"seed": 7},
        "class_names": [str(i) for i in range(10)],
    },
    "segmentation": {
        "model": {"name": "seg_tiny", "num_classes": 4}, "eval": {"batch_size": 5, "workers": 1},
        "class_names": ["bg", "x", "y", "z"],
    },
    "detection": {"model": {"name": "keypointrcnn_r101_fpn"}, "eval": {"batch_size": 3}},
    "super_resolution": {"model": {"name": "edsr_baseline_nl", "overrides": {"upscale": 3}}},
}  # fmt: skip


def test_every_registered_task_has_a_config_here():
    assert set(task_names()) == set(CONFIGS)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_from_config_is_the_only_method_that_takes_the_config(name):
    cls = task_class(name)
    assert inspect.ismethod(cls.from_config) and cls.from_config.__self__ is cls  # classmethod
    cfg = config_from_dict({"task": name, **CONFIGS[name]})
    task = get_task(cfg)
    assert type(task) is cls and isinstance(task, Task)
    methods = {"__init__": cls.__init__}
    methods.update(
        (n, m)
        for n, m in inspect.getmembers(cls, callable)
        if not n.startswith("_") and n not in ("from_config", "hooks", "check_config")
    )  # fmt: skip  (hooks/check_config: the class's declarations, read with the config)
    for required in ("build_dataset", "evaluate", "metadata", "loss", "num_classes", "summary"):
        assert required in methods, (name, required)
    for method_name, method in methods.items():
        params = inspect.signature(method).parameters
        assert not {"cfg", "config"} & set(params), f"{cls.__name__}.{method_name}{params}"
    # the sections reached the task: one value of each kind it was given
    if name == "video_classification":
        assert task.data is cfg.data and task.evaluation is cfg.eval and task.classes == 3
        assert task.loss_name == "ce" and task.label_smoothing == 0.1
        assert task.augment_config is cfg.augment and task.class_names == ("a", "b", "c")
    elif name == "segmentation":
        assert task.data is cfg.data and task.classes == 4
        assert (task.eval_batch_size, task.eval_workers) == (5, 1)
        assert list(task.class_names) == ["bg", "x", "y", "z"]
    elif name == "detection":
        assert task.data is cfg.data and task.iou_types == ("bbox", "keypoints")  # the model's
        assert task.eval_batch_size == 3
    elif name == "super_resolution":
        assert task.data is cfg.data and task.upscale == 3
    else:
        assert task.data is cfg.data and task.mean == pytest.approx([0.485, 0.456, 0.406])
        assert task.seed == 7 and task.evaluation is cfg.eval and len(task.class_names) == 10


def test_a_registered_class_is_built_by_its_from_config(monkeypatch):
    calls = []

    class Recorded(VideoClassificationTask):
        @classmethod
        def from_config(cls, cfg):
            calls.append(cfg.task)
            return super().from_config(cfg)

    monkeypatch.setitem(tasks._TASKS, "recorded_video", Recorded)
    register_task("recorded_video", Recorded)
    cfg = config_from_dict({"task": "recorded_video", "data": {"num_frames": 4}})
    task = get_task(cfg)
    assert calls == ["recorded_video"] and type(task) is Recorded
    assert task.data.num_frames == 4  # the task's data_config read the section


def test_a_task_built_by_a_plain_function_declares_no_sections(monkeypatch):
    """A factory function (no class) is a task without sections: ``task_class`` says None,
    and its config loads with the core sections only."""

    def build(cfg):
        return VideoClassificationTask.from_config(
            config_from_dict({"task": "video_classification"})
        )

    monkeypatch.setitem(tasks._TASKS, "function_task", build)
    assert tasks.task_class("function_task") is None
    cfg = config_from_dict({"task": "function_task", "data": {"root": "x"}})
    assert cfg.sections == {} and isinstance(get_task(cfg), VideoClassificationTask)


def _write_videos(root) -> None:
    """Classes ``left``/``right`` (a bright bar on that side): 2 training and 1 test video
    each, 8 frames of 16x16."""
    from nlnet.data.video_io.backends import write_video

    rng = np.random.default_rng(0)
    for split, n in (("train", 2), ("val", 1)):
        for c, name in enumerate(("left", "right")):
            for i in range(n):
                frames = rng.integers(0, 60, size=(8, 16, 16, 3), dtype=np.uint8)
                frames[:, :, slice(0, 6) if c == 0 else slice(10, 16)] = 220
                write_video(root / split / name / f"{name}{i}.mp4", frames, fps=4)


def test_a_task_built_from_sections_alone_trains_and_evaluates(tmp_path):
    """No ``Config`` anywhere: typed sections in, dataset, loss, multi-clip testing (Section
    4.1) and checkpoint metadata out; the same metrics as the task ``from_config`` builds."""
    _write_videos(tmp_path / "videos")
    data = VideoDataConfig(type="folder", root=str(tmp_path / "videos"), num_frames=4, stride=1,
                           train_scale=(16, 16), crop=16, test_scale=16, cache=False)  # fmt: skip
    evaluation = VideoEvalConfig(clips=2, crops=1, batch_size=2, workers=0)
    task = VideoClassificationTask(data=data, evaluation=evaluation,
                                   augment=AugmentConfig(mixup_alpha=0.4), loss="ce")  # fmt: skip
    train = task.build_dataset("train", "train")
    assert task.augment is None and task.num_classes(train) == 2  # classes from the folders
    task.setup(task.num_classes(train))
    assert task.augment is not None  # MixUp needs the class count: built by setup
    torch.manual_seed(0)
    model = TinyVideoNet(num_classes=2)
    batch = task.collate([train[i] for i in range(len(train))])
    loss, n = task.loss(model, batch, torch.device("cpu"))
    assert n == 4 and torch.isfinite(loss)
    loss.backward()
    val = task.build_dataset("val", "test")
    assert len(val) == 2 * 2  # 2 videos x eval.clips
    metrics = task.evaluate(model, val, torch.device("cpu"))
    assert metrics["video_count"] == 2 and metrics["clip_count"] == 4
    assert 0.0 <= metrics["video_top1"] <= 100.0
    meta = task.metadata(train)
    assert meta["class_names"] == ["left", "right"] and meta["preprocessing"].num_frames == 4
    # the engine's path: the same sections through a config give the same task
    cfg = config_from_dict({"data": {**{k: getattr(data, k) for k in ("type", "root", "num_frames",
                            "stride", "train_scale", "crop", "test_scale", "cache")}},
                            "eval": {"clips": 2, "crops": 1, "batch_size": 2, "workers": 0},
                            "augment": {"mixup_alpha": 0.4}, "model": {"num_classes": 2}})  # fmt: skip
    via_config = VideoClassificationTask.from_config(cfg)
    again = via_config.evaluate(model, via_config.build_dataset("val", "test"), torch.device("cpu"))
    assert {k: v for k, v in again.items() if k != "time_s"} == {
        k: v for k, v in metrics.items() if k != "time_s"
    }
    assert via_config.metadata(train) == meta


def test_a_memory_clip_cache_with_loader_workers_is_warned_about():
    base = {"model": {"num_classes": 3}, "data": {"type": "folder", "clip_cache": "memory",
                                                  "clip_cache_unit": "video"},
            "eval": {"workers": 0}}  # fmt: skip
    with pytest.warns(RuntimeWarning, match="data.clip_cache=memory with train.workers=2: "):
        config_from_dict({**base, "train": {"workers": 2}})
    with pytest.warns(RuntimeWarning, match="data.clip_cache=memory with eval.workers=1: "):
        config_from_dict({**base, "train": {"workers": 0}, "eval": {"workers": 1}})
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config_from_dict({**base, "train": {"workers": 0}})  # in-process: kept across epochs
        config_from_dict({**base, "train": {"workers": "auto"}})  # workers only read it
        config_from_dict({**base, "data": {"type": "folder", "clip_cache": "disk"},
                          "train": {"workers": 2}, "eval": {"workers": 2}})  # fmt: skip
