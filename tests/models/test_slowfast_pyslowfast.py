"""SlowFast as PySlowFast trains and tests it: the fully-convolutional test head against
PySlowFast's ``ResNetBasicHead`` (``slowfast/models/head_helper.py``) in eval mode, and the
Kinetics configs of its SLOWFAST(_NLN)_{4x16,8x8}_R50 recipes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nlnet.engine.config import load_config, resolve_config_path
from nlnet.engine.modeling import build_model
from nlnet.models import create_model, get_model_entry
from nlnet.models.surgery import non_local_blocks


def _pyslowfast_test_head(slow, fast, weight, bias, pool=7):
    """PySlowFast's ResNetBasicHead in eval mode, written from its definition: per pathway an
    ``AvgPool3d(pool_size, stride=1)`` with ``pool_size = [T_pathway, crop / 32, crop / 32]``
    (train crop 224: 7), the pooled maps concatenated on channels, permuted to channels-last,
    the linear projection at every position, ``Softmax(dim=4)``, then the mean over T, H, W."""
    pooled = [F.avg_pool3d(x, (x.shape[2], pool, pool), stride=1) for x in (slow, fast)]
    x = torch.cat(pooled, 1).permute(0, 2, 3, 4, 1)  # (N, T, H, W, C)
    x = F.linear(x, weight, bias)
    return torch.softmax(x, dim=4).mean([1, 2, 3])


def test_fully_conv_head_is_pyslowfasts_test_head_on_the_same_features():
    torch.manual_seed(0)
    over = get_model_entry("slowfast_r50_nl5").default_cfg["test_overrides"]
    model = create_model("slowfast_r50_nl5", head="fully_conv", dropout=0.0, **over).eval()
    nn.init.normal_(model.head.projection.weight, std=0.5)  # spread the class scores
    nn.init.normal_(model.head.projection.bias)
    x = torch.rand(1, 3, 8, 256, 256)  # a 256 x 256 test crop: res5 is 8 x 8, 2 x 2 positions
    with torch.no_grad():
        stages = model.forward_pathways(x)
        slow, fast = stages["slow_res5"], stages["fast_res5"]
        assert slow.shape[2:] == (2, 8, 8) and fast.shape[2:] == (8, 8, 8)
        expected = _pyslowfast_test_head(
            slow, fast, model.head.projection.weight, model.head.projection.bias
        )
        out = model(x)
        torch.testing.assert_close(out.softmax(-1), expected, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(out.exp(), expected, rtol=1e-5, atol=1e-7)
        # the global head (default) averages the features first: other scores on 2 x 2 positions
        plain = model.head.projection(model.forward_features(x).mean((2, 3, 4)))
        assert not torch.allclose(plain.softmax(-1), expected, atol=1e-4)
        model.head.kind = "global"
        torch.testing.assert_close(model(x), plain)
    # training mode: the global average with either head (one position on 224 x 224 crops)
    model.head.kind = "fully_conv"
    model.train()
    y = torch.rand(2, 3, 8, 64, 64)
    torch.testing.assert_close(
        model(y), model.head.projection(model.forward_features(y).mean((2, 3, 4)))
    )
    with pytest.raises(ValueError, match="head: expected one of"):
        create_model("slowfast_r50", head="pyslowfast", **over)


#: (config, model, alpha, lateral kernel, blocks, published top-1 / top-5 or None)
CONFIGS = [
    ("kinetics/slowfast_r50_4x16", "slowfast_r50", 8, 5, 0, "75.6 top-1, 92.0 top-5"),
    ("kinetics/slowfast_r50_4x16_nl5", "slowfast_r50_nl5", 8, 5, 5, None),
    ("kinetics/slowfast_r50_8x8", "slowfast_r50", 4, 7, 0, "77.0 top-1, 92.6 top-5"),
    ("kinetics/slowfast_r50_8x8_nl5", "slowfast_r50_nl5", 4, 5, 5, None),
]


@pytest.mark.parametrize(("name", "model_name", "alpha", "kernel", "blocks", "published"), CONFIGS)
def test_slowfast_kinetics_configs_follow_pyslowfast(name, model_name, alpha, kernel, blocks,
                                                     published):  # fmt: skip
    cfg = load_config(name)  # validated as every shipped config
    assert cfg.task == "video_classification" and cfg.model.name == model_name
    o, d, e = cfg.optim, cfg.data, cfg.eval
    # SOLVER: BASE_LR 0.1, cosine, MAX_EPOCH 196, WARMUP_EPOCHS 34 from WARMUP_START_LR 0.01
    assert (o.lr, o.schedule, o.epochs, o.momentum, o.weight_decay) == (
        0.1,
        "cosine",
        196,
        0.9,
        1e-4,
    )
    assert o.nesterov and o.weight_decay_bn == 0.0 and o.min_lr == 0.0
    assert o.lr * o.warmup_factor == pytest.approx(0.01)
    assert o.warmup_iters == pytest.approx(34 * 246_000 / 64, rel=1e-3)  # 34 epochs of 64 clips
    # DATA: 32 x 2 clips, scale jitter 256-320, 224 crops; TEST: 10 clips x 3 crops of 256
    assert (d.num_frames, d.stride, tuple(d.train_scale), d.crop) == (32, 2, (256, 320), 224)
    assert (d.test_scale, d.test_crop, e.clips, e.crops) == (256, 256, 10, 3)
    assert tuple(d.mean) == (0.45,) * 3 and tuple(d.std) == (0.225,) * 3
    assert cfg.train.batch_size * 8 == 64 and cfg.precise_bn.batches == 200
    assert cfg.model.init is None and cfg.model.dropout == 0.5
    with torch.device("meta"):
        model = build_model(cfg)
    assert model.alpha == alpha and model.s1_fuse.conv_f2s.kernel_size == (kernel, 1, 1)
    assert model.head.kind == "fully_conv" and model.head.projection.out_features == 400
    assert len(non_local_blocks(model)) == blocks
    with torch.device("meta"), torch.no_grad():
        assert model.eval()(torch.empty(1, 3, 32, 256, 256)).shape == (1, 400)
    text = resolve_config_path(name).read_text()
    assert "MODEL_ZOO.md" in text
    if published:
        assert published in text
    else:
        assert "no published" in text


def test_timm_intermediates_are_both_pathways_of_each_stage_fused_as_the_features():
    """One map per stage (pool1, res2..res5): the Slow map with the Fast map averaged over each
    ``alpha`` frames concatenated, described by ``feature_info``; the last is the features."""
    with torch.device("meta"), torch.no_grad():
        full = create_model("slowfast_r50_nl5")
        final, maps = full.forward_intermediates(torch.empty(1, 3, 32, 224, 224))
        pooled = full.forward_head(final, pre_logits=True)
    assert [f["num_chs"] for f in full.feature_info] == [64 + 8, 256 + 32, 512 + 64, 1024 + 128,
                                                         2048 + 256]  # fmt: skip
    assert [f["module"] for f in full.feature_info] == ["s1", "s2", "s3", "s4", "s5"]
    sizes = [(4, 224 // f["reduction"], 224 // f["reduction"]) for f in full.feature_info]
    assert [tuple(m.shape[2:]) for m in maps] == sizes == [(4, 56, 56), (4, 56, 56), (4, 28, 28),
                                                          (4, 14, 14), (4, 7, 7)]  # fmt: skip
    assert final.shape == (1, 2304, 4, 7, 7) and pooled.shape == (1, 2304)
    over = get_model_entry("slowfast_r50").default_cfg["test_overrides"]
    model = create_model("slowfast_r50", head="fully_conv", **over).eval()
    x = torch.rand(2, 3, 8, 64, 64)
    with torch.no_grad():
        pathways = model.forward_pathways(x)
        final, maps = model.forward_intermediates(x)
        feats = model.forward_features(x)
        pooled = model.forward_head(feats, pre_logits=True)
        model.reset_classifier(0)  # no projection: the head (fully_conv too) returns the pooling
        unclassified = model(x)
    for name, m in zip(("pool1", "res2", "res3", "res4", "res5"), maps, strict=True):
        slow, fast = pathways[f"slow_{name}"], pathways[f"fast_{name}"]
        fast_on_slow = fast.unflatten(2, (slow.shape[2], model.alpha)).mean(3)
        torch.testing.assert_close(m, torch.cat([slow, fast_on_slow], 1))
    torch.testing.assert_close(final, feats)
    torch.testing.assert_close(pooled, feats.mean((2, 3, 4)))
    torch.testing.assert_close(unclassified, pooled)
