"""Training tools as units: precise BN statistics, schedules, layer-wise lr decay, mixup /
cutmix / RandAugment / label smoothing, plotted metrics, multigrid schedules."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nlnet.engine.config import ConfigError, load_config
from nlnet.engine.hooks.precise_bn import precise_bn_stats
from nlnet.engine.optim import build_optimizer, build_scheduler, layer_ids
from nlnet.engine.runlog import plotted_metrics
from nlnet.engine.tasks.video import compute_loss
from nlnet.engine.tasks.video.augment import ClipAugment
from nlnet.engine.tasks.video.multigrid import (
    MultigridSchedule,
    long_cycle_schedule,
    short_cycle_shapes,
)


def test_precise_bn_equals_the_full_pass_statistics():
    torch.manual_seed(0)
    conv = nn.Conv3d(3, 4, 3, padding=1)
    bn = nn.BatchNorm3d(4)
    frozen = nn.BatchNorm3d(4).eval()  # frozen BN: left alone
    model = nn.Sequential(conv, bn, nn.ReLU(), frozen).train()
    frozen.eval()
    batches = [torch.randn(n, 3, 2, 5, 5) * 2 + 1 for n in (4, 4, 3)]  # unequal sizes
    before = frozen.running_mean.clone()
    assert precise_bn_stats(model, batches, lambda m, b: m(b)) == 1
    with torch.no_grad():
        x = conv(torch.cat(batches)).transpose(0, 1).reshape(4, -1).double()
    torch.testing.assert_close(bn.running_mean.double(), x.mean(1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(bn.running_var.double(), x.var(1), rtol=1e-6, atol=1e-6)
    assert torch.equal(frozen.running_mean, before)


def _lrs(schedule: str, steps: int = 10, **over) -> list[float]:
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    optim = load_config(None, {"optim.lr": 1.0, "optim.schedule": schedule, **over}).optim
    sched = build_scheduler(opt, optim, steps)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_cosine_and_poly_schedules_with_warmup():
    warm = {"optim.warmup_iters": 2, "optim.warmup_factor": 0.5}
    cos = _lrs("cosine", **warm, **{"optim.min_lr": 0.1})
    assert cos[:2] == pytest.approx([0.5, 0.75])
    assert cos[2:] == pytest.approx(
        [0.1 + 0.9 * (1 + math.cos(math.pi * t / 8)) / 2 for t in range(8)]
    )
    poly = _lrs("poly", **warm, **{"optim.power": 2.0})
    assert poly[2:] == pytest.approx([(1 - t / 8) ** 2 for t in range(8)])
    with pytest.raises(ConfigError, match="optim.schedule"):
        load_config(None, {"optim.schedule": "cosin"})


def test_layer_wise_lr_decay_for_vit_and_swin():
    from nlnet.models.registry import create_model

    cfg = load_config(None, {"optim.lr": 1.0, "optim.layer_decay": 0.5,
                             "optim.optimizer": "adamw"})  # fmt: skip
    vit = create_model("vit_tiny", num_classes=3)
    ids, num = layer_ids(vit)
    opt = build_optimizer(vit, cfg.optim)
    lr_of = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    named = dict(vit.named_parameters())
    assert lr_of[id(named["head.weight"])] == 1.0
    assert lr_of[id(named["cls_token"])] == 0.5 ** (num + 1)
    assert lr_of[id(named[f"blocks.{num - 1}.norm1.weight"])] == 0.5
    assert lr_of[id(named["blocks.0.norm1.weight"])] == 0.5**num
    swin_ids, swin_num = layer_ids(create_model("swin_tiny", num_classes=3))
    assert swin_ids["patch_embed.weight"] == 0 and swin_ids["head.weight"] == swin_num + 1
    assert sorted({v for k, v in swin_ids.items() if k.startswith("stages.")}) == list(
        range(1, swin_num + 1)
    )
    with pytest.raises(ValueError, match="no transformer blocks"):
        layer_ids(nn.Linear(2, 2))


def test_non_local_lr_mult_scales_only_the_blocks_parameters():
    import nlnet.models  # noqa: F401  (registers the tiny models)
    from nlnet.models.registry import create_model

    cfg = load_config(None, {"optim.lr": 0.5, "optim.non_local_lr_mult": 10.0,
                             "optim.weight_decay_bn": 0.0})  # fmt: skip
    model = create_model("c2d_tiny_nl1", num_classes=2, width=2)
    opt = build_optimizer(model, cfg.optim)
    lr_of = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    for name, p in model.named_parameters():
        assert lr_of[id(p)] == (5.0 if ".non_local." in name else 0.5), name
    assert sum(len(g["params"]) for g in opt.param_groups) == len(list(model.parameters()))
    with pytest.raises(ValueError, match="no non-local block"):
        build_optimizer(nn.Linear(2, 2), cfg.optim)
    with pytest.raises(ConfigError, match="optim.non_local_lr_mult"):
        load_config(None, {"optim.non_local_lr_mult": 0.0})


def _updated(
    impl: str, optimizer: str = "sgd", steps: int = 4, **over
) -> tuple[list, torch.optim.Optimizer]:
    """A small model's weights after ``steps`` updates with random gradients (same draws)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.Linear(8, 5))
    cfg = load_config(None, {"optim.implementation": impl, "optim.optimizer": optimizer,
                             "optim.weight_decay_bn": 0.0, **over})  # fmt: skip
    opt = build_optimizer(model, cfg.optim)
    g = torch.Generator().manual_seed(1)
    for i in range(steps):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=g)
        if i == 2:  # a schedule's change of rate
            for group in opt.param_groups:
                group["lr"] *= 0.1
        opt.step()
    return [p.detach().clone() for p in model.parameters()], opt


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("impl", ["fused", "foreach", "for-loop"])
def test_optimizer_implementations_update_alike(optimizer, impl):
    default, opt = _updated("default", optimizer, **{"optim.nesterov": optimizer == "sgd"})
    assert not any(g["fused"] for g in opt.param_groups)  # PyTorch's own choice
    other, opt = _updated(impl, optimizer, **{"optim.nesterov": optimizer == "sgd"})
    assert all(bool(g["fused"]) == (impl == "fused") for g in opt.param_groups)
    assert all(g["foreach"] is {"foreach": True, "for-loop": False}.get(impl)
               for g in opt.param_groups)  # fmt: skip
    for a, b in zip(default, other):  # the same update, to float rounding
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_optimizer_implementation_error_is_one_line():
    from nlnet.engine.config.checks import _CHOICES
    from nlnet.engine.optim import IMPLEMENTATIONS

    assert _CHOICES["optim", "implementation"] == IMPLEMENTATIONS  # the config's words
    with pytest.raises(ConfigError, match="optim.implementation.*fused"):
        load_config(None, {"optim.implementation": "fast"})


def test_resume_keeps_this_runs_optimizer_kernel():
    from nlnet.engine.optim import load_optimizer_state

    _, fused = _updated("fused")
    _, loop = _updated("for-loop", steps=0)
    load_optimizer_state(loop, fused.state_dict())
    assert not any(g["fused"] for g in loop.param_groups)  # load_state_dict alone sets it
    assert all(g["foreach"] is False for g in loop.param_groups)
    assert loop.param_groups[0]["lr"] == fused.param_groups[0]["lr"] == pytest.approx(1e-3)
    assert len(loop.state) == len(fused.state)  # the momentum buffers came across
    _, adamw = _updated("default", "adamw")
    saved = adamw.state_dict()
    _, fused_adamw = _updated("fused", "adamw", steps=0)
    load_optimizer_state(fused_adamw, saved)  # the state placed as the fused kernel wants it
    assert all(g["fused"] for g in fused_adamw.param_groups)
    assert not any(g["fused"] for g in saved["param_groups"])  # the checkpoint is not changed
    params = [p for g in fused_adamw.param_groups for p in g["params"]]
    assert all(fused_adamw.state[p]["step"].device == p.device for p in params)
    for p in params:
        p.grad = torch.ones_like(p)
    fused_adamw.step()


def _augment(**over) -> ClipAugment:
    cfg = load_config(None, {f"augment.{k}": v for k, v in over.items()}).augment
    return ClipAugment(cfg, num_classes=5, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))


def _still_clips(b: int = 4) -> torch.Tensor:
    """Clips whose frames are all the same picture (C, T, H, W)."""
    pictures = torch.rand(b, 3, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    return ((pictures - 0.5) / 0.25).expand(b, 3, 4, 16, 16).contiguous()


@pytest.mark.parametrize("kind", ["mixup", "cutmix"])
def test_mixed_labels_sum_to_one_and_every_frame_is_mixed_alike(kind):
    torch.manual_seed(1)
    aug = _augment(**{f"{kind}_alpha": 1.0})
    clip, target = _still_clips(), torch.tensor([0, 1, 2, 3])
    out, soft = aug(clip, target)
    assert soft.shape == (4, 5)
    torch.testing.assert_close(soft.sum(1), torch.ones(4))
    assert not torch.equal(out, clip)
    for t in range(1, 4):
        assert torch.equal(out[:, :, t], out[:, :, 0])  # same weight / same box on every frame
    logits = torch.randn(4, 5)
    expected = -(soft * logits.log_softmax(1)).sum(1).mean()
    torch.testing.assert_close(compute_loss(logits, soft, "ce"), expected)


def test_randaugment_is_the_same_on_every_frame_and_label_smoothing():
    torch.manual_seed(3)
    aug = _augment(randaugment=True, randaugment_ops=3, randaugment_magnitude=15)
    clip = _still_clips(6)
    out, target = aug(clip, torch.arange(6) % 5)
    assert torch.equal(target, torch.arange(6) % 5)
    assert not torch.allclose(out, clip, atol=0.05)
    for t in range(1, 4):
        assert torch.equal(out[:, :, t], out[:, :, 0])
    logits, y = torch.randn(6, 5), torch.arange(6) % 5
    smooth = compute_loss(logits, y, "ce", label_smoothing=0.1)
    q = F.one_hot(y, 5) * 0.9 + 0.1 / 5
    torch.testing.assert_close(smooth, -(q * logits.log_softmax(1)).sum(1).mean())
    with pytest.raises(ConfigError, match="train.loss=ce"):
        load_config(None, {"augment.mixup_alpha": 0.2, "train.loss": "bce"})


def test_curves_plot_every_task_metric_and_drop_top5_for_few_classes():
    val = [{"kind": "val", "iter": 5, "video_top1": 50.0, "video_top5": 100.0, "mIoU": 40.0,
            "box_AP": 30.0, "mask_AP": 20.0, "kp_AP": 10.0, "video_mAP": 60.0,
            "ema_video_top1": 55.0}]  # fmt: skip
    keys = plotted_metrics(val, num_classes=3)
    assert {"mIoU", "box_AP", "mask_AP", "kp_AP", "video_mAP", "ema_video_top1"} <= set(keys)
    assert "video_top5" not in keys
    assert "video_top5" in plotted_metrics(val, num_classes=400)


def test_multigrid_schedule_follows_the_papers_cycle():
    # Kinetics SlowFast-style baseline: T=8, S=224, decays at 94 and 154, fine-tune from 196
    phases = long_cycle_schedule(8, 224, [0, 94, 154, 196], 239, short_cycle=True)
    cycle = [(8, 2, 158), (4, 4, 158), (2, 4, 224), (1, 8, 224)]  # B x, T, S (Section 3.2)
    shapes = [(p.batch_factor, p.frames, p.size) for p in phases]
    assert shapes == cycle * 3 + [(1, 8, 224)]
    assert [p.stage for p in phases] == [0] * 4 + [1] * 4 + [2] * 4 + [3]
    for b, t, s in shapes:  # constant cost per iteration: B T S^2 ~ 8 * 224^2
        assert b * t * s * s == pytest.approx(8 * 224**2, rel=0.03)
    ends = [p.end_epoch for p in phases]
    assert ends == sorted(ends) and ends[-1] == round(239 * 1.5)
    # the numbers PySlowFast's MULTIGRID options give for the same settings
    assert ends == [73, 110, 142, 158, 205, 228, 248, 259, 291, 308, 322, 329, 358]
    # short cycle (Section 3.3): S/2, S/sqrt 2, S with batches 4x, 2x, 1x
    assert short_cycle_shapes(8, 224, 224) == [(4, 8, 112), (2, 8, 158), (1, 8, 224)]
    mg = MultigridSchedule(8, 224, 16, phases, short_cycle=True)
    assert mg.long_cycle(0) == (128, 2, 158) and mg.long_cycle(358) == (16, 8, 224)
    assert [mg.shape(325, it) for it in range(3)] == [(64, 8, 112), (32, 8, 158), (16, 8, 224)]
    assert mg.shape(0, 0) == (256, 2, 112)  # (158 / 112)^2 = 2 more clips of a smaller size


def test_evaluators_have_the_dataset_evaluator_shape():
    from nlnet.engine.evaluation import DatasetEvaluator, inference_on_dataset
    from nlnet.engine.tasks.detection import CocoEvaluator
    from nlnet.engine.tasks.segmentation import ConfusionEvaluator
    from nlnet.engine.tasks.video.evaluation import ClipScoreEvaluator, forward_clips

    assert isinstance(ConfusionEvaluator(3), DatasetEvaluator)
    assert isinstance(CocoEvaluator(None, ("bbox",)), DatasetEvaluator)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 2 * 2 * 2, 4)).train()
    # two views (clips) per video; video 1's second view is a bad item
    batches = [
        {"clip": torch.randn(2, 3, 2, 2, 2), "target": torch.tensor([1, 1]),
         "index": torch.tensor([0, 0]), "skipped": 0},
        {"clip": torch.randn(1, 3, 2, 2, 2), "target": torch.tensor([2]),
         "index": torch.tensor([1]), "skipped": 1},
    ]  # fmt: skip
    evaluator = ClipScoreEvaluator()
    assert isinstance(evaluator, DatasetEvaluator)
    first = inference_on_dataset(model, batches, evaluator, forward_clips)
    again = inference_on_dataset(model, batches, evaluator, forward_clips)  # reset in between
    assert model.training  # mode restored
    assert first["clip_count"] == again["clip_count"] == 3 and first["video_count"] == 2
    assert first["skipped"] == again["skipped"] == 1
    with torch.no_grad():
        logits = model(torch.cat([b["clip"] for b in batches]))
    pred = torch.stack([logits[:2].softmax(1).mean(0), logits[2].softmax(0)]).argmax(1)
    assert first["video_top1"] == pytest.approx(
        100.0 * float((pred == torch.tensor([1, 2])).float().mean())
    )
