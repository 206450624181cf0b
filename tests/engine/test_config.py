"""Config: defaults from Section 4.1, YAML with _base_, dotted overrides, strict keys, saving."""

from __future__ import annotations

import re

import pytest
import yaml

from nlnet.engine.config import (
    Config,
    ConfigError,
    config_from_dict,
    config_to_dict,
    list_configs,
    load_config,
    parse_overrides,
    replace,
    resolve_config_path,
    save_config,
)


def test_defaults_follow_the_paper():
    cfg = Config()
    assert (cfg.optim.lr, cfg.optim.momentum, cfg.optim.weight_decay) == (0.01, 0.9, 1e-4)
    assert cfg.optim.max_iters == 400_000 and cfg.optim.steps == (150_000, 300_000)
    assert cfg.optim.gamma == 0.1 and cfg.model.dropout == 0.5 and not cfg.train.freeze_bn
    assert cfg.eval.clips == 10 and cfg.train.loss == "ce"


def test_base_inheritance_and_overrides(tmp_path):
    (tmp_path / "base.yaml").write_text(
        yaml.safe_dump({"optim": {"lr": 0.1, "steps": [10, 20]}, "data": {"type": "folder"}})
    )
    (tmp_path / "child.yaml").write_text(
        "_base_: base.yaml\noptim:\n  max_iters: 30\ndata:\n  root: /videos\n"
    )
    cfg = load_config(
        tmp_path / "child.yaml", ["optim.lr=0.005", "train.amp=bf16", "optim.steps=[5, 7]"]
    )
    assert cfg.optim.lr == 0.005 and cfg.optim.max_iters == 30 and cfg.optim.steps == (5, 7)
    assert (cfg.data.type, cfg.data.root) == ("folder", "/videos")  # dicts merged recursively
    assert cfg.train.amp == "bf16" and cfg.name == "child" and cfg.output_dir == "runs/child"
    # model.overrides is free-form; data is the task's typed section
    cfg2 = load_config(tmp_path / "child.yaml", ["data.num_frames=8", "model.overrides.width=4"])
    assert cfg2.data.num_frames == 8 and cfg2.model.overrides == {"width": 4}


def test_unknown_keys_name_the_key_and_the_valid_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"optim\.lrr.*valid keys in optim:.*\blr\b"):
        load_config(None, ["optim.lrr=0.1"])
    (tmp_path / "bad.yaml").write_text("train:\n  batchsize: 4\n")
    with pytest.raises(ConfigError, match=r"train\.batchsize.*batch_size"):
        load_config(tmp_path / "bad.yaml")
    with pytest.raises(ConfigError, match="unknown config key 'foo'"):
        config_from_dict({"foo": 1})


def test_type_and_value_errors():
    with pytest.raises(ConfigError, match="optim.lr: expected a number"):
        load_config(None, ["optim.lr=fast"])
    with pytest.raises(ConfigError, match="train.amp: expected one of none, bf16, fp16"):
        load_config(None, ["train.amp=fp8"])
    with pytest.raises(ConfigError, match="optim.steps: expected increasing"):
        load_config(None, ["optim.steps=[5, 2]"])
    with pytest.raises(ConfigError, match="train.batch_size"):
        load_config(None, ["train.batch_size=0"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_overrides(["optim.lr"])
    with pytest.raises(ConfigError, match="eval.clips"):
        load_config(None, ["data.test_clips=3"])
    # one key starts the model: the keys of earlier releases are read into it, two are refused
    with pytest.warns(DeprecationWarning, match="model.init"):
        old = load_config(None, ["model.pretrained=runs/a/final.pt", "model.reset_head=true"])
    assert old.model.init == {"from": "runs/a/final.pt", "reset_head": True}
    with pytest.warns(DeprecationWarning):  # several: the one that used to be loaded last
        both = config_from_dict({"model": {"pretrained_2d": "IMAGENET1K_V1", "weights": "w.pth"}})
        assert both.model.init == "w.pth"
        # a file of an earlier release on a base of this one: the file's key wins, as a key does
        cli = load_config("kinetics/c2d_r50_nl5", ["model.pretrained=runs/a/final.pt"])
        assert cli.model.init == {"from": "runs/a/final.pt"}
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigError, match="one source"):
        config_from_dict({"model": {"init": "IMAGENET1K_V1", "pretrained": "a.pt"}})
    with pytest.raises(ConfigError, match="reset_head applies to a checkpoint or a file"):
        load_config(None, ["model.init={from: IMAGENET1K_V1, reset_head: true}"])
    with pytest.raises(ConfigError, match="model.init: expected"):
        load_config(None, ["model.init={from: a.pt, reset: true}"])
    # the block's options and placement are read by their typed readers, for any model name
    for override, message in (
        ("model.overrides.block={instantation: gaussian}", "did you mean 'instantiation'"),
        ("model.overrides.placement={res9: [1]}", "placement: unknown stage 'res9'"),
    ):  # fmt: skip
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config(None, ["model.name=my_own_net", override])
    cfg = load_config(None, ["model.name=c2d_r50_nl5", "model.overrides.block={mode: space}",
                             "model.overrides.placement=nl1"])  # fmt: skip
    assert cfg.model.overrides == {"block": {"mode": "space"}, "placement": "nl1"}
    assert parse_overrides(["a.b=null", "c=[1, 2]", "d=1e-3"]) == [
        ("a.b", None),
        ("c", [1, 2]),
        ("d", 1e-3),
    ]


def test_named_configs_resolve_and_validate():
    names = list_configs()
    for expected in (
        "kinetics/c2d_r50",
        "kinetics/c2d_r50_nl5",
        "kinetics/c2d_r101_nl10",
        "kinetics/i3d311_r50_nl5",
        "kinetics/i3d311_r50_nl5_128f",
        "charades/i3d311_r101_nl5",
        "smoke/folder_c2d_r50_nl5",
    ):
        assert expected in names
    assert resolve_config_path("kinetics/c2d_r50_nl5").name == "c2d_r50_nl5.yaml"
    k = load_config("kinetics/c2d_r50_nl5")
    assert k.model.name == "c2d_r50_nl5" and k.data.num_frames == 32 and k.data.stride == 2
    long = load_config("kinetics/i3d311_r50_nl5_128f")  # Section 5.1
    assert long.train.freeze_bn and long.optim.lr == 0.0025 and long.data.num_frames == 128
    assert long.train.batch_size == 2 and long.data.stride == 1
    ch = load_config("charades/i3d311_r101_nl5")  # Section 5.2
    assert ch.train.loss == "bce" and ch.model.num_classes == 157 and ch.optim.lr == 0.00125
    assert ch.optim.steps == (75_000, 150_000) and ch.optim.max_iters == 200_000
    with pytest.raises(FileNotFoundError, match="kinetics/c2d_r50_nl5"):
        resolve_config_path("kinetics/nope")


def test_save_roundtrip_and_replace(tmp_path):
    cfg = load_config("kinetics/c2d_r50_nl5", ["optim.lr=0.02"])
    path = save_config(cfg, tmp_path / "run" / "config.yaml")
    again = load_config(path)
    assert config_to_dict(again) == config_to_dict(cfg)
    other = replace(cfg, **{"train.batch_size": 3})
    assert other.train.batch_size == 3 and cfg.train.batch_size == 8  # frozen copy
    with pytest.raises(AttributeError):
        cfg.optim.lr = 1.0  # type: ignore[misc]


# -- the typed data section of each task: a typo is an error when the config loads -------------
@pytest.mark.parametrize(
    ("task", "typo", "valid"),
    [
        ("video_classification", "data.flp=false", "flip"),
        ("segmentation", "data.ignore_idx=0", "ignore_index"),
        ("detection", "data.hflp=0.5", "hflip"),
        ("image_classification", "data.hflp=false", "hflip"),
        ("super_resolution", "data.pach=32", "patch"),
    ],
)
def test_a_data_key_typo_is_a_config_error_listing_the_valid_keys(task, typo, valid, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(
        ConfigError, match=rf"unknown config key '{typo.split('=')[0]}'.*\b{valid}\b"
    ):
        load_config(None, [f"task={task}", typo, f"output_dir={out}"])
    (tmp_path / "c.yaml").write_text(f"task: {task}\ndata:\n  {typo[5:].replace('=', ': ')}\n")
    with pytest.raises(ConfigError, match=valid):
        load_config(tmp_path / "c.yaml")
    assert not out.exists()  # checked before anything is written


@pytest.mark.parametrize(
    ("task", "bad", "match"),
    [
        ("video_classification", "data.num_frames=0", "data.num_frames: expected a positive"),
        ("video_classification", "data.type=folders", "data.type: expected one of folder"),
        ("segmentation", "data.mean=[0.5]", "data.mean/data.std"),
        ("detection", "data.iou_types=[box]", "data.iou_types: expected some of bbox"),
        ("detection", "data.hflip=2", r"data.hflip: expected a probability"),
    ],
)
def test_bad_data_values_are_config_errors(task, bad, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, [f"task={task}", bad])


def test_each_task_gets_its_typed_data_section():
    from nlnet.data.detection.config import DetectionDataConfig
    from nlnet.data.images.config import ImageDataConfig
    from nlnet.data.segmentation.config import SegmentationDataConfig
    from nlnet.data.super_resolution.config import SuperResolutionData
    from nlnet.data.video.config import VideoDataConfig

    for task, cls in (
        ("video_classification", VideoDataConfig),
        ("image_classification", ImageDataConfig),
        ("segmentation", SegmentationDataConfig),
        ("detection", DetectionDataConfig),
        ("super_resolution", SuperResolutionData),
    ):
        cfg = load_config(None, [f"task={task}", "data.root=/x"])
        assert type(cfg.data) is cls and cfg.data.root == "/x"
        assert config_from_dict(config_to_dict(cfg)).data == cfg.data  # saved and read back
    with pytest.raises(ConfigError, match="task: expected one of"):
        load_config(None, ["task=videoclassification"])


def test_train_dropout_is_read_as_model_dropout_with_a_deprecation(tmp_path):
    with pytest.warns(
        DeprecationWarning, match="'train.dropout' is deprecated; use 'model.dropout'"
    ):
        cfg = load_config(None, ["train.dropout=0.2"])
    assert cfg.model.dropout == 0.2
    (tmp_path / "old.yaml").write_text("train:\n  dropout: 0.3\n")
    with pytest.warns(DeprecationWarning):
        assert load_config(tmp_path / "old.yaml").model.dropout == 0.3
    with pytest.raises(ConfigError, match="disagree"):
        config_from_dict({"train": {"dropout": 0.1}, "model": {"dropout": 0.4}})


def test_a_removed_key_says_what_replaced_it(tmp_path, capsys):
    """``data.seed`` (the video dataset's own augmentation seed until December 2026) is an
    error naming train.seed, in an override, a file and on the command line (one line, 2)."""
    from nlnet.cli import main

    with pytest.raises(ConfigError, match=r"data.seed was removed: .* derives from train.seed"):
        load_config("smoke/folder_c2d_r50_nl5", ["data.seed=3"])
    (tmp_path / "old.yaml").write_text("data:\n  type: folder\n  seed: 1\n")
    with pytest.raises(ConfigError, match="data.seed was removed"):
        load_config(tmp_path / "old.yaml")
    assert main(["train", "-c", str(tmp_path / "old.yaml"), "--print-config"]) == 2
    err = capsys.readouterr().err
    assert "data.seed was removed" in err and err.count("\n") == 1


def test_a_task_built_from_a_mapping_checks_its_data_section_the_same_way():
    from nlnet.data.segmentation.config import SegmentationDataConfig
    from nlnet.engine.config.sections import data_section
    from nlnet.engine.tasks.detection import DetectionTask
    from nlnet.engine.tasks.image import ImageClassificationTask
    from nlnet.engine.tasks.segmentation import SegmentationTask
    from nlnet.engine.tasks.super_resolution import SuperResolutionTask

    for build, match in (
        (lambda: DetectionTask(data={"hflip": 2}), "data.hflip: expected a probability"),
        (lambda: SegmentationTask(2, data={"crop": [0]}), r"data.crop: expected \[h, w\]"),
        (lambda: ImageClassificationTask(data={"builtin": "mnist"}), "data.builtin: expected"),
        (lambda: SuperResolutionTask(data={"pacth": 4}), "unknown config key 'data.pacth'"),
    ):
        with pytest.raises(ConfigError, match=match) as info:
            build()
        assert "\n" not in str(info.value)
    section = SegmentationDataConfig(root="x")
    assert data_section(SegmentationDataConfig, section) is section
    assert data_section(SegmentationDataConfig, None) == SegmentationDataConfig()


def test_config_files_of_an_earlier_release_migrate_before_their_bases_merge(tmp_path):
    """A base with ``reset_head: true`` and a child with ``pretrained: X`` (the Charades configs
    of earlier releases) give ``init: {from: X, reset_head: true}``."""
    (tmp_path / "base.yaml").write_text("model:\n  pretrained_2d: null\n  pretrained: null\n"
                                        "  reset_head: true\n")  # fmt: skip
    (tmp_path / "child.yaml").write_text("_base_: base.yaml\nmodel:\n  pretrained: k400.pt\n")
    with pytest.warns(DeprecationWarning, match="model.init"):
        cfg = load_config(tmp_path / "child.yaml")
    assert cfg.model.init == {"from": "k400.pt", "reset_head": True}


def test_max_iters_given_where_the_config_counts_epochs_is_warned_about():
    """``optim.max_iters=2`` on a config of ``optim.epochs: 30`` would silently run 30 epochs:
    a warning says so and how to get the steps; with ``optim.epochs=0`` too, no warning."""
    import warnings

    with pytest.warns(UserWarning, match=r"optim.max_iters=2 has no effect: optim.epochs=30"):
        cfg = load_config("smoke/folder_tiny", ["optim.max_iters=2"])
    assert cfg.optim.epochs == 30
    with pytest.warns(UserWarning, match=r"optim.max_iters=5 has no effect: optim.epochs=30 "):
        load_config("smoke/folder_tiny", {"optim.max_iters": 5})  # overrides as a mapping
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (
            load_config(
                "smoke/folder_tiny", ["optim.epochs=0", "optim.max_iters=2"]
            ).optim.max_iters
            == 2
        )
        load_config("smoke/folder_tiny", iter(["optim.lr=0.1"]))  # a generator of overrides
