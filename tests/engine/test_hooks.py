"""The loop's hooks and the training tools on it: EMA over 3 steps, bit-exact resume with every
hook on, external loggers, user hooks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from engine_standins import TinyClipDataset, TinyVideoNet, collate_standin, tiny_run_config

from nlnet.engine.checkpoint import load_checkpoint
from nlnet.engine.config import replace
from nlnet.engine.hooks.base import HookBase
from nlnet.engine.loop import train


def _run(cfg, seed=0, val=False, hooks=(), **kw):
    torch.manual_seed(seed)
    model = TinyVideoNet(dropout=0.5)
    summary = train(
        cfg, model=model, train_dataset=TinyClipDataset(n=16),
        val_dataset=TinyClipDataset(n=6) if val else None, collate_fn=collate_standin,
        hooks=hooks, **kw,
    )  # fmt: skip
    return model, summary


class _Recorder(HookBase):
    """Copies of the weights before training and after every step."""

    name = "recorder"
    events = ("before_train", "after_step")

    def __init__(self) -> None:
        self.states: list[dict[str, torch.Tensor]] = []

    def _copy(self, run) -> None:
        self.states.append({k: v.detach().clone() for k, v in run.state.model.state_dict().items()})

    def before_train(self, run) -> None:
        self._copy(run)

    def after_step(self, run) -> None:
        self._copy(run)


def test_ema_equals_the_hand_computed_average_over_3_steps(tmp_path):
    decay = 0.6
    rec = _Recorder()
    cfg = tiny_run_config(tmp_path, "ema", **{"optim.max_iters": 3, "ema.decay": decay})
    _, summary = _run(cfg, val=True, hooks=(rec,))
    assert len(rec.states) == 4  # initial weights + 3 steps
    ckpt = load_checkpoint(summary["checkpoint"])
    ema = ckpt["extra"]["hooks"]["ema"]
    assert ema["n_averaged"] == 4
    for key, value in ema["model"].items():
        if not value.is_floating_point():
            continue
        expected = rec.states[0][key].double()
        for state in rec.states[1:]:
            expected = decay * expected + (1 - decay) * state[key].double()
        torch.testing.assert_close(value.double(), expected, rtol=1e-5, atol=1e-6, msg=key)
        if key.endswith("weight"):
            assert not torch.allclose(value, rec.states[-1][key]), key  # not the raw weights
    assert {"ema_clip_top1", "clip_top1"} <= set(summary["val"])


def test_ema_weights_load_as_a_model(tmp_path):
    import nlnet.models  # noqa: F401  (registers the tiny models)
    from nlnet.engine.errors import CheckpointError
    from nlnet.engine.hooks.ema import load_ema_model

    over = {"model.name": "c2d_tiny", "model.overrides": {"width": 2}, "optim.max_iters": 2,
            "train.dropout": 0.0, "ema.decay": 0.5}  # fmt: skip
    s = train(tiny_run_config(tmp_path, "ema_model", **over), train_dataset=TinyClipDataset(n=8, size=(2, 16, 16)),
              collate_fn=collate_standin)  # fmt: skip
    ckpt = load_checkpoint(s["checkpoint"])
    model = load_ema_model(s["checkpoint"])
    for name, value in model.state_dict().items():
        assert torch.equal(value, ckpt["extra"]["hooks"]["ema"]["model"][name]), name
    del ckpt["extra"]["hooks"]["ema"]
    with pytest.raises(CheckpointError, match="no EMA weights"):
        load_ema_model(ckpt)


def test_resume_is_bit_exact_with_every_hook_on(tmp_path, capsys):
    over = {
        "ema.decay": 0.9, "precise_bn.batches": 2, "train.eval_every": 3,
        "augment.mixup_alpha": 0.4, "augment.cutmix_alpha": 1.0, "augment.mix_prob": 0.8,
        "augment.randaugment": True, "augment.label_smoothing": 0.1,
        "logging.tensorboard": True, "logging.wandb": True, "optim.schedule": "cosine",
        "optim.clip_grad_norm": 1.0,
    }  # fmt: skip
    ref, ref_sum = _run(tiny_run_config(tmp_path, "ref", **over), val=True)
    cfg = tiny_run_config(tmp_path, "cut", **over, **{"train.stop_after": 4})
    _, s1 = _run(cfg, val=True)
    assert s1["stopped"] and s1["iterations"] == 4
    resumed, s2 = _run(replace(cfg, **{"train.stop_after": 0}), seed=99, val=True, resume=True)
    assert s2["iterations"] == 10
    for (name, a), b in zip(ref.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name
    ema_ref = load_checkpoint(ref_sum["checkpoint"])["extra"]["hooks"]["ema"]["model"]
    ema_res = load_checkpoint(s2["checkpoint"])["extra"]["hooks"]["ema"]["model"]
    for name, a in ema_ref.items():
        assert torch.equal(a, ema_res[name]), name
    assert ref_sum["val"] == pytest.approx({**s2["val"], "time_s": ref_sum["val"]["time_s"],
                                            "ema_skipped": ref_sum["val"]["ema_skipped"]})  # fmt: skip
    assert "ema_video_top1" in s2["val"]
    out = capsys.readouterr().out
    try:
        import wandb  # noqa: F401
    except ImportError:
        assert "logging.wandb: the wandb package is not installed" in out
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        assert "logging.tensorboard: the tensorboard package is not installed" in out
    else:
        events = list((Path(cfg.output_dir) / "tensorboard").glob("events.out.tfevents.*"))
        assert events, "no TensorBoard event file"


def test_precise_bn_runs_before_validation_and_leaves_training_unchanged(tmp_path):
    plain, _ = _run(tiny_run_config(tmp_path, "plain", **{"train.eval_every": 2, "optim.max_iters": 4}),
                    val=True)  # fmt: skip
    precise, _ = _run(tiny_run_config(tmp_path, "precise", **{"train.eval_every": 2, "optim.max_iters": 4,
                                                   "precise_bn.batches": 3}), val=True)  # fmt: skip
    for name, a in plain.state_dict().items():
        b = precise.state_dict()[name]
        if "running" in name:
            assert not torch.allclose(a, b), name  # recomputed statistics
        elif "num_batches" not in name:
            assert torch.equal(a, b), name  # same weights: the data order and RNG untouched


def test_user_hooks_see_every_step_and_names_are_unique(tmp_path):
    rec = _Recorder()
    _run(tiny_run_config(tmp_path, "user", **{"optim.max_iters": 2}), hooks=(rec,))
    assert len(rec.states) == 3
    clash = _Recorder()
    clash.name = "checkpoint"
    with pytest.raises(ValueError, match="names must be unique"):
        _run(tiny_run_config(tmp_path, "clash", **{"optim.max_iters": 2}), hooks=(clash,))


def test_tensorboard_records_mirror_metrics_jsonl(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = tiny_run_config(tmp_path, "tb", **{"optim.max_iters": 3, "logging.tensorboard": True})
    _run(cfg)
    acc = EventAccumulator(str(Path(cfg.output_dir) / "tensorboard"))
    acc.Reload()
    steps = [e.step for e in acc.Scalars("train/loss")]
    jsonl = [
        json.loads(x) for x in (Path(cfg.output_dir) / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == [r["iter"] for r in jsonl if r["kind"] == "train"] == [1, 2, 3]


class _StepShapes(HookBase):
    """(epoch, iteration, loader batches, (T, S), lr) of every step, and the clip shapes the
    model saw."""

    name = "step_shapes"
    events = ("before_train", "before_step")

    def __init__(self) -> None:
        self.steps: list[tuple] = []
        self.inputs: list[tuple[int, ...]] = []

    def before_train(self, run) -> None:
        run.state.model.register_forward_pre_hook(
            lambda m, args: self.inputs.append(tuple(args[0].shape)) if m.training else None
        )

    def before_step(self, run) -> None:
        st = run.state
        self.steps.append((st.epoch, st.iteration, st.step_batches, run.task.step_shape, st.lr))


def test_multigrid_steps_follow_the_schedule_and_resume_exactly(tmp_path):
    from nlnet.engine.tasks.video.multigrid import MultigridSchedule, long_cycle_schedule

    over = {"multigrid.long_cycle": True, "multigrid.short_cycle": True,
            "multigrid.stages": [0, 2], "optim.epochs": 3, "optim.warmup_iters": 0,
            "optim.lr": 0.01, "optim.gamma": 0.5, "train.batch_size": 2, "train.dropout": 0.0,
            "data.num_frames": 4, "data.crop": 8}  # fmt: skip

    def run(name, resume=False, stop=0, seed=0):
        rec = _StepShapes()
        cfg = tiny_run_config(tmp_path, name, **over, **{"train.stop_after": stop})
        torch.manual_seed(seed)
        model = TinyVideoNet()
        s = train(cfg, model=model, train_dataset=TinyClipDataset(n=32, size=(4, 8, 8)),
                  collate_fn=collate_standin, hooks=(rec,), resume=resume)  # fmt: skip
        return model, s, rec

    ref, summary, rec = run("ref")
    phases = long_cycle_schedule(4, 8, [0, 2], 3, short_cycle=True)
    mg = MultigridSchedule(4, 8, 1, phases, short_cycle=True)
    assert summary["epochs"] == phases[-1].end_epoch
    assert summary["iterations"] == len(rec.steps)
    seen = iter(rec.inputs)
    for epoch, it, k, (frames, size), lr in rec.steps:
        factor, t, s = mg.shape(epoch, it)
        assert (k, frames, size) == (factor, t, s)
        assert [next(seen) for _ in range(k)] == [(2, 3, t, s, s)] * k
        long_factor = mg.long_cycle(epoch)[0]
        phase = next(p for p in phases if epoch < p.end_epoch)
        stage = phase.stage
        if phase is phases[-1] and epoch < (phases[-2].end_epoch + phase.end_epoch) // 2:
            stage -= 1
        assert lr == pytest.approx(0.01 * 0.5**stage * long_factor)
    assert len({k for _, _, k, _, _ in rec.steps}) >= 3  # long and short cycles both vary
    # stopped in the middle and resumed: the same weights
    _, s1, _ = run("cut", stop=7)
    assert s1["stopped"]
    resumed, _, rec2 = run("cut", resume=True, seed=5)
    assert rec2.steps == rec.steps[7:]
    for (name, a), b in zip(ref.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name


def test_line_prefix_names_the_run_of_every_line(capsys):
    """Runs side by side (the demo's models) prefix their lines with their name."""
    from nlnet.engine.runlog import line_prefix, say

    with line_prefix("c2d_tiny_nl1: "):
        say("iter 1/2: loss 0.69")
        with line_prefix("[ema] "):
            say("val @ 2")
    say("done")
    assert capsys.readouterr().out.splitlines() == [
        "c2d_tiny_nl1: iter 1/2: loss 0.69",
        "c2d_tiny_nl1: [ema] val @ 2",
        "done",
    ]


def test_eval_times_spreads_the_validations_over_the_run(tmp_path):
    """``train.eval_times: 5`` on a 10-step run: validations at steps 2, 4, 6, 8 and the end."""
    cfg = tiny_run_config(tmp_path, "times", **{"optim.max_iters": 10, "train.eval_times": 5})
    _run(cfg, val=True)
    lines = (tmp_path / "times" / "metrics.jsonl").read_text().splitlines()
    vals = [json.loads(line)["iter"] for line in lines if '"kind": "val"' in line]
    assert vals == [2, 4, 6, 8, 10]
