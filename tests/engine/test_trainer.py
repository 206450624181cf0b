"""Training loop: exact resume, gradient accumulation, frozen BN, schedule, losses, bad items."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from engine_standins import TinyClipDataset, TinyVideoNet, collate_standin, tiny_run_config

from nlnet.engine.checkpoint import CheckpointMismatchError, load_checkpoint  # noqa: E402
from nlnet.engine.config import load_config, replace  # noqa: E402
from nlnet.engine.evaluation import evaluate  # noqa: E402
from nlnet.engine.loop import train  # noqa: E402
from nlnet.engine.modeling import freeze_batchnorm  # noqa: E402
from nlnet.engine.optim import build_scheduler  # noqa: E402
from nlnet.engine.tasks.video import compute_loss  # noqa: E402


def _records(run_dir) -> list[dict]:
    text = (Path(run_dir) / "metrics.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _model(seed: int = 0, **kw) -> TinyVideoNet:
    torch.manual_seed(seed)
    return TinyVideoNet(**kw)


def _run(cfg, model=None, dataset=None, **kw):
    model = model if model is not None else _model(dropout=0.5)
    dataset = dataset if dataset is not None else TinyClipDataset(n=16)
    summary = train(cfg, model=model, train_dataset=dataset, collate_fn=collate_standin, **kw)
    return model, summary


@pytest.mark.parametrize("stop", [3, 4])  # mid-epoch, and exactly at the epoch boundary
def test_resume_is_bit_exact(tmp_path, stop):
    # dropout, trained BN and random augmentation all draw random numbers
    ref, ref_sum = _run(tiny_run_config(tmp_path, "ref"))
    cfg = tiny_run_config(tmp_path, "cut", **{"train.stop_after": stop})
    first, s1 = _run(cfg)
    assert s1["stopped"] and s1["iterations"] == stop
    ckpt = load_checkpoint(Path(cfg.output_dir) / "checkpoints" / "last.pt")
    assert ckpt["iteration"] == stop
    # a fresh process would start from newly initialised weights: use another seed on purpose
    resumed, s2 = _run(
        replace(cfg, **{"train.stop_after": 0}), model=_model(seed=99, dropout=0.5), resume=True
    )
    assert s2["iterations"] == ref_sum["iterations"] == 10
    for (name, a), b in zip(ref.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name
    # the metrics file of the resumed run has each iteration once
    recs = _records(cfg.output_dir)
    its = [r["iter"] for r in recs if r["kind"] == "train"]
    assert its == list(range(1, 11))
    ref_loss = [r["loss"] for r in _records(ref_sum["run_dir"]) if r["kind"] == "train"]
    assert [r["loss"] for r in recs if r["kind"] == "train"] == ref_loss


def test_runs_are_deterministic_and_workers_do_not_change_the_result(tmp_path):
    a, _ = _run(tiny_run_config(tmp_path, "a", **{"optim.max_iters": 4}))
    b, _ = _run(tiny_run_config(tmp_path, "b", **{"optim.max_iters": 4, "train.workers": 1}))
    for x, y in zip(a.state_dict().values(), b.state_dict().values()):
        assert torch.equal(x, y)


class _SlowClips(TinyClipDataset):
    """Items that take 5 ms each: the loader, not the tiny step, bounds the run."""

    def __getitem__(self, i):
        import time

        time.sleep(0.005)
        return super().__getitem__(i)


def test_workers_auto_adds_workers_to_a_slow_loader_without_changing_the_result(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr("nlnet.data.loader.usable_cores", lambda: 2)  # as on the CI machine
    common = {"optim.max_iters": 12, "optim.steps": [9]}  # 3 epochs of 4 steps
    plain, _ = _run(tiny_run_config(tmp_path, "plain", **common), dataset=_SlowClips())
    auto, _ = _run(tiny_run_config(tmp_path, "auto", **common, **{"train.workers": "auto"}),
                   dataset=_SlowClips())  # fmt: skip
    # epoch 0 warms up, epoch 1 (0 workers) waits for data: epoch 2 decodes in workers
    assert "train.workers=auto: 2 loader worker(s) from epoch 2" in capsys.readouterr().out
    for x, y in zip(plain.state_dict().values(), auto.state_dict().values()):
        assert torch.equal(x, y)


def test_gradient_accumulation_matches_the_large_batch(tmp_path):
    common = {"optim.max_iters": 6, "model.dropout": 0.0}
    big, _ = _run(tiny_run_config(tmp_path, "big", **common), model=_model(bn=False))
    acc, s = _run(
        tiny_run_config(
            tmp_path, "acc", **common, **{"train.batch_size": 2, "train.accum_steps": 2}
        ),
        model=_model(bn=False),
    )
    assert s["iterations"] == 6
    for x, y in zip(big.state_dict().values(), acc.state_dict().values()):
        torch.testing.assert_close(x, y, rtol=1e-6, atol=1e-6)
    changed = _model(bn=False)
    assert not torch.allclose(changed.fc.weight, acc.fc.weight)


def test_frozen_bn_keeps_statistics_and_affine_parameters(tmp_path):
    model = _model()
    with torch.no_grad():
        model.bn1.running_mean.fill_(0.3)
        model.bn1.weight.fill_(1.5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    _run(
        tiny_run_config(tmp_path, "frozen", **{"train.freeze_bn": True, "optim.max_iters": 3}),
        model=model,
    )
    for k in ("bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"):
        assert torch.equal(model.state_dict()[k], before[k]), k
    assert not torch.equal(model.conv1.weight, before["conv1.weight"])
    # and the default trains BN (Section 4.1)
    model2 = _model()
    _run(tiny_run_config(tmp_path, "bn", **{"optim.max_iters": 3}), model=model2)
    assert not torch.equal(model2.bn1.running_mean, torch.zeros(4))
    assert freeze_batchnorm(_model()) == 1


def test_schedule_warmup_and_steps(tmp_path):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.01)
    optim = load_config(
        None,
        {"optim.steps": [4, 8], "optim.gamma": 0.1, "optim.warmup_iters": 2,
         "optim.warmup_factor": 0.5},
    ).optim  # fmt: skip
    sched = build_scheduler(opt, optim, 10)  # SequentialLR(LinearLR, MultiStepLR)
    lrs = []
    for _ in range(10):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    expected = [0.005, 0.0075, 0.01, 0.01, 0.001, 0.001, 0.001, 0.001, 0.0001, 0.0001]
    assert lrs == pytest.approx(expected)
    # the trainer logs the lr used at each iteration
    _, s = _run(tiny_run_config(tmp_path, "lr", **{"optim.warmup_iters": 0}))
    recs = _records(s["run_dir"])
    logged = [r["lr"] for r in recs if r["kind"] == "train"]
    assert logged == pytest.approx([0.1] * 6 + [0.01] * 4)  # steps=[6]: x0.1 from iteration 6


def test_bad_items_are_skipped_and_counted(tmp_path):
    ds = TinyClipDataset(n=16, bad=(1, 5))
    _, s = _run(
        tiny_run_config(tmp_path, "bad", **{"optim.max_iters": 8}), dataset=ds
    )  # two epochs
    assert s["skipped"] == 4 and s["iterations"] == 8
    recs = _records(s["run_dir"])
    assert [r["skipped"] for r in recs if r["kind"] == "epoch"] == [2, 2]
    for f in ("metrics.csv", "curves.png", "config.yaml", "summary.json"):
        assert (Path(s["run_dir"]) / f).is_file(), f


def test_multilabel_bce_training_and_video_map(tmp_path):
    cfg = tiny_run_config(
        tmp_path, "ml", **{"train.loss": "bce", "optim.max_iters": 8, "train.val_split": "val"}
    )
    model, s = _run(
        cfg,
        dataset=TinyClipDataset(n=12, multi_label=True),
        val_dataset=TinyClipDataset(n=12, multi_label=True, clips=2),
    )
    assert set(s["val"]) >= {"clip_mAP", "video_mAP"}
    assert s["val"]["video_count"] == 12 and s["val"]["clip_count"] == 24
    assert 0.0 <= s["val"]["video_mAP"] <= 100.0


def test_compute_loss_checks_targets():
    logits = torch.randn(2, 3)
    with pytest.raises(ValueError, match="train.loss=bce"):
        compute_loss(logits, torch.zeros(2, 3), "ce")
    with pytest.raises(ValueError, match="multi-hot"):
        compute_loss(logits, torch.tensor([0, 1]), "bce")
    ce = compute_loss(logits, torch.tensor([0, 2]), "ce")
    torch.testing.assert_close(ce, torch.nn.functional.cross_entropy(logits, torch.tensor([0, 2])))


def test_evaluate_api_and_mismatch(tmp_path):
    cfg = tiny_run_config(tmp_path, "ev", **{"optim.max_iters": 4, "eval.clips": 2})
    model, s = _run(cfg)
    val = TinyClipDataset(n=9, clips=2)
    m = evaluate(
        cfg, s["checkpoint"], model=_model(dropout=0.5), dataset=val, collate_fn=collate_standin
    )
    assert m["video_count"] == 9 and m["clip_count"] == 18
    assert {"video_top1", "clip_top1", "video_mean_class_acc"} <= set(m)
    assert "video_top5" not in m  # 3 classes: top-5 would be 100 whatever the model
    with pytest.raises(CheckpointMismatchError, match="classes"):
        evaluate(
            replace(cfg, **{"model.num_classes": 5}),
            s["checkpoint"],
            model=TinyVideoNet(num_classes=5),
            dataset=val,
            collate_fn=collate_standin,
        )

    class Other(TinyVideoNet):  # another network of the user's own: not the checkpoint's
        pass

    with pytest.raises(CheckpointMismatchError, match="model 'user:engine_standins.TinyVideoNet'"):
        _run(cfg, model=Other(), resume=s["checkpoint"])


def test_too_small_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="train.batch_size"):
        _run(tiny_run_config(tmp_path, "small", **{"train.batch_size": 32}))


def test_init_from_a_checkpoint_keeps_a_classifier_of_another_size_fresh(tmp_path):
    """``model.init: CKPT``: every tensor but a classifier of another size (fresh); with
    ``reset_head`` the classifier stays fresh whatever its size; another network is one line."""
    from nlnet.engine.modeling import init_from_pretrained

    cfg = tiny_run_config(tmp_path, "pre", **{"optim.max_iters": 2})
    trained, s = _run(cfg)
    new = TinyVideoNet(num_classes=5)
    fc = new.fc.weight.clone()
    init_from_pretrained(new, replace(cfg, **{"model.init": str(s["checkpoint"]),
                                              "model.num_classes": 5}))  # fmt: skip
    assert torch.equal(new.conv1.weight, trained.conv1.weight)
    assert torch.equal(new.fc.weight, fc)
    same = TinyVideoNet(num_classes=trained.fc.out_features)
    fresh = same.fc.weight.clone()
    reset = {"from": str(s["checkpoint"]), "reset_head": True}
    init_from_pretrained(same, replace(cfg, **{"model.init": reset}))
    assert torch.equal(same.fc.weight, fresh) and torch.equal(
        same.conv1.weight, trained.conv1.weight
    )
    with pytest.raises(CheckpointMismatchError, match="model.init=.*the weights must fit"):
        init_from_pretrained(
            TinyVideoNet(width=6), replace(cfg, **{"model.init": str(s["checkpoint"])})
        )


class _Crash(Exception):
    pass


class _CrashingDataset(TinyClipDataset):
    """Dies (like a killed job) at the ``crash_at``-th item fetch."""

    def __init__(self, crash_at: int, **kw):
        super().__init__(**kw)
        self.crash_at, self.fetches = crash_at, 0

    def __getitem__(self, i):
        self.fetches += 1
        if self.fetches == self.crash_at:
            raise _Crash("killed")
        return super().__getitem__(i)


def test_resume_after_a_crash_between_checkpoints(tmp_path):
    over = {"train.ckpt_every": 2}
    ref, _ = _run(tiny_run_config(tmp_path, "ref", **over))
    cfg = tiny_run_config(tmp_path, "crash", **over)
    with pytest.raises(_Crash):  # dies in iteration 6: checkpoint at 4, records up to 5
        _run(cfg, dataset=_CrashingDataset(crash_at=5 * 4 + 2, n=16))
    assert load_checkpoint(Path(cfg.output_dir) / "checkpoints" / "last.pt")["iteration"] == 4
    assert max(r["iter"] for r in _records(cfg.output_dir)) == 5
    resumed, s = _run(cfg, model=_model(seed=7, dropout=0.5), resume=True)
    assert s["iterations"] == 10
    for a, b in zip(ref.state_dict().values(), resumed.state_dict().values()):
        assert torch.equal(a, b)
    its = [r["iter"] for r in _records(cfg.output_dir) if r["kind"] == "train"]
    assert its == list(range(1, 11))


def test_amp_is_cuda_only(tmp_path):
    cfg = tiny_run_config(tmp_path, "amp", **{"train.amp": "fp16", "optim.max_iters": 2})
    with pytest.warns(RuntimeWarning, match="train.amp=fp16 is for CUDA"):
        _, s = _run(cfg)
    assert s["iterations"] == 2


def test_frozen_bn_keeps_non_local_norms_trainable(tmp_path):
    """Section 5.1 freezes BN; a new non-local block (BN gamma = 0, the identity) must still
    learn, so its norm stays trainable and in train mode (with a warning)."""
    import nlnet.models  # noqa: F401  (registers the tiny models)
    from nlnet.engine.modeling import set_train_mode
    from nlnet.layers.nonlocal_block import NonLocalNd
    from nlnet.models.registry import create_model

    model = create_model("c2d_tiny_nl1", num_classes=3, width=2)
    (block,) = [m for m in model.modules() if isinstance(m, NonLocalNd)]
    others = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm3d)
              and m is not block.norm]  # fmt: skip
    with pytest.warns(RuntimeWarning, match="inside non-local blocks stay trainable"):
        assert freeze_batchnorm(model) == len(others)
    assert all(p.requires_grad for p in block.norm.parameters())
    assert not any(p.requires_grad for m in others for p in m.parameters())
    set_train_mode(model, freeze_bn=True)
    assert block.norm.training and not any(m.training for m in others)
    # trained with frozen BN, the block leaves the identity
    ds = TinyClipDataset(n=8, size=(4, 32, 32))
    cfg = tiny_run_config(tmp_path, "nl", **{"train.freeze_bn": True, "optim.max_iters": 2,
                                  "optim.warmup_iters": 0, "optim.steps": []})  # fmt: skip
    with pytest.warns(RuntimeWarning, match="non-local"):
        _run(cfg, model=model, dataset=ds)
    assert block.norm.weight.abs().sum() > 0


def test_frozen_bn_freezes_blocks_that_start_from_model_init(tmp_path):
    """Sections 5.1/5.2 fine-tune with all BN frozen: a block whose weights come from
    model.init (the 32-frame model for the 128-frame one) freezes like every BN."""
    import warnings

    import nlnet.models  # noqa: F401  (registers the tiny models)
    from nlnet.engine.checkpoint import save_checkpoint
    from nlnet.layers.nonlocal_block import NonLocalNd
    from nlnet.models.registry import create_model

    model = create_model("c2d_tiny_nl1", num_classes=3, width=2)
    (block,) = [m for m in model.modules() if isinstance(m, NonLocalNd)]
    with torch.no_grad():
        block.norm.weight.fill_(0.5)  # a trained block: gamma no longer 0
    pre = save_checkpoint(tmp_path / "pre.pt", model=model, model_name="tiny", num_classes=3)
    cfg = tiny_run_config(tmp_path, "ft", **{"train.freeze_bn": True, "optim.max_iters": 2,
                                  "optim.warmup_iters": 0, "optim.steps": [],
                                  "model.init": str(pre)})  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no "stay trainable" warning
        _run(cfg, model=model, dataset=TinyClipDataset(n=8, size=(4, 32, 32)))
    assert not any(p.requires_grad for p in block.norm.parameters())
    assert torch.equal(block.norm.weight, torch.full_like(block.norm.weight, 0.5))


def test_freeze_parameters_keeps_fresh_blocks_trainable_and_names_bad_prefixes():
    """``train.freeze``: the prefixes' parameters stop training, except a non-local block that
    did not come from ``model.init`` (it starts as the identity); a pretrained block
    freezes too; a prefix naming no parameter is a one-line user error."""
    from nlnet.engine.errors import UserError
    from nlnet.engine.modeling import freeze_parameters
    from nlnet.models import create_model

    def trainable(model):
        return {n for n, p in model.named_parameters() if p.requires_grad}

    model = create_model("unet2d_nl", num_classes=4, base_channels=4, depth=2)
    n = freeze_parameters(model, ["encoder.", "bottleneck."])
    left = trainable(model)
    assert n > 0 and not any(k.startswith("encoder.") for k in left)
    assert {k for k in left if k.startswith("bottleneck.")} == {
        k for k, _ in model.named_parameters() if k.startswith("bottleneck.non_local.")
    }
    assert any(k.startswith("decoder.") for k in left)
    model = create_model("unet2d_nl", num_classes=4, base_channels=4, depth=2)
    freeze_parameters(model, ["bottleneck."], trained=["bottleneck.non_local"])
    assert not any(k.startswith("bottleneck.") for k in trainable(model))
    with pytest.raises(UserError, match=r"train.freeze: \['encoders.'\] name no parameter"):
        freeze_parameters(model, ["encoders."])


class _DictNet(TinyVideoNet):
    def forward(self, x):
        return {"logits": super().forward(x)}


@pytest.mark.parametrize(
    "model, message",
    [
        (_DictNet(num_classes=3), "model: its forward returned a dict; a classifier returns one"),
        (TinyVideoNet(num_classes=10), "it returns 10 scores per item but the data has 3 classes"),
    ],
)
def test_a_network_of_ones_own_with_other_outputs_is_one_line(tmp_path, model, message):
    """A network of one's own whose output is not the task's ``(B, num_classes)`` scores (a dict
    of heads, a classifier of another width: top-5 would have scored 10 outputs on 3 classes)
    stops at its first step with a ``ConfigError`` naming what it returned."""
    from nlnet.engine.errors import ConfigError

    cfg = tiny_run_config(tmp_path)
    with pytest.raises(ConfigError, match=message):
        train(cfg, model=model, train_dataset=TinyClipDataset(n=8), collate_fn=collate_standin)


class _LabelledClips(TinyClipDataset):
    """The stand-in videos with their classes listed, as a class-folder dataset lists them."""

    @property
    def targets(self) -> list[int]:
        return [v % self.num_classes for v in range(self.n)]


def test_a_class_whose_every_video_fails_to_decode_is_named(tmp_path, capsys):
    """Videos that index but do not decode are skipped when drawn; when a whole class is so,
    the first epoch's end names it (the run would otherwise train on the others alone)."""
    cfg = tiny_run_config(tmp_path, "bad_class", **{"optim.epochs": 2,
                                                    "optim.steps": [], "optim.warmup_iters": 0})  # fmt: skip
    data = _LabelledClips(n=12, bad=(2, 5, 8, 11))  # every video of class 2
    train(cfg, model=TinyVideoNet(), train_dataset=data, collate_fn=collate_standin)
    out = capsys.readouterr().out
    assert out.count("warning: class(es) 'class_2' had no usable training clip") == 1
    train(tiny_run_config(tmp_path, "good", **{"optim.epochs": 2,
                                               "optim.steps": [], "optim.warmup_iters": 0}),
          model=TinyVideoNet(), train_dataset=_LabelledClips(n=12),
          collate_fn=collate_standin)  # fmt: skip
    assert "no usable training clip" not in capsys.readouterr().out
