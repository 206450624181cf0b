"""The block-health hook of the loop: on by default for a model with non-local blocks, its
figures in the val records and summary.json, a one-line warning for a block kept closed, and
nothing for a model without blocks or with health.enabled=false."""

from __future__ import annotations

import json

import torch
from engine_standins import TinyClipDataset, TinyVideoNet, collate_standin, tiny_run_config
from torch import nn

import nlnet
from nlnet.engine.loop import train


class _BlockNet(TinyVideoNet):
    """The stand-in network with one non-local block after its convolution."""

    def __init__(self, **block) -> None:
        super().__init__(width=4)
        self.non_local = nlnet.NonLocal3d(4, sub_sample=False, **block)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.non_local(self.relu(self.bn1(self.conv1(x))))
        return self.fc(self.dropout(self.pool(x).flatten(1)))


def _train(tmp_path, model: nn.Module, name: str, **over):
    cfg = tiny_run_config(tmp_path, name, **{"optim.max_iters": 4, "train.eval_every": 2, **over})
    summary = train(cfg, model=model, train_dataset=TinyClipDataset(n=8),
                    val_dataset=TinyClipDataset(n=6), collate_fn=collate_standin)  # fmt: skip
    vals = [
        json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()
    ]
    return summary, [r for r in vals if r["kind"] == "val"]


def test_a_block_kept_closed_is_warned_about_once(tmp_path, capsys):
    torch.manual_seed(0)
    model = _BlockNet()
    model.non_local.norm.requires_grad_(False)  # the scale (and shift) frozen at zero
    summary, vals = _train(tmp_path, model, "closed")
    out = capsys.readouterr().out
    warnings = [line for line in out.splitlines() if "non_local is (nearly) the identity" in line]
    assert len(warnings) == 1  # at 50% (after warn_after=40%), not again at the end
    assert warnings[0].startswith("warning: non_local is (nearly) the identity")
    assert "after 50% of training: output 0.0% of its input" in warnings[0]
    assert len(vals) == 2 and all(v["health.non_local.output_ratio"] == 0.0 for v in vals)
    assert "is (nearly) the identity" in summary["block_health"]["non_local"]["problems"]
    on_disk = json.loads((tmp_path / "closed" / "summary.json").read_text())
    assert on_disk["block_health"]["non_local"]["scale"] == 0.0


def test_an_open_block_is_not_warned_about(tmp_path, capsys):
    torch.manual_seed(0)
    model = _BlockNet(gamma_init=1.0)
    with torch.no_grad():
        model.non_local.theta.weight.mul_(30)  # a peaked attention from the start
    summary, vals = _train(tmp_path, model, "open", **{"health.warn_after": 0.0})
    assert "warning:" not in capsys.readouterr().out
    assert vals[-1]["health.non_local.output_ratio"] > 0.05
    assert 0 < vals[-1]["health.non_local.entropy"] < 1
    assert summary["block_health"]["non_local"]["problems"] == []


def test_no_blocks_or_disabled_adds_nothing(tmp_path, capsys):
    torch.manual_seed(0)
    summary, vals = _train(tmp_path, TinyVideoNet(), "plain")
    assert "block_health" not in summary
    assert not any(k.startswith("health.") for v in vals for k in v)
    summary, vals = _train(tmp_path, _BlockNet(), "off", **{"health.enabled": False})
    assert "block_health" not in summary and "warning:" not in capsys.readouterr().out
    assert not any(k.startswith("health.") for v in vals for k in v)


def test_health_does_not_change_training(tmp_path):
    runs = []
    for enabled in (True, False):
        torch.manual_seed(0)
        model = _BlockNet(gamma_init=0.5)
        _train(tmp_path, model, f"same_{enabled}", **{"health.enabled": enabled})
        runs.append(model.state_dict())
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0])


def test_a_checkpoint_of_a_users_own_network_says_so(tmp_path, capsys):
    """``train(cfg, model=...)``: the registered name only for that registered network; a
    network of the user's own class is marked as such, refused by the loaders in one line,
    and loads with ``load_model(path, model=...)``."""
    import nlnet.models  # noqa: F401  (registers the tiny models)
    from nlnet.cli import main
    from nlnet.engine.checkpoint import CheckpointError, load_checkpoint
    from nlnet.models.registry import create_model

    torch.manual_seed(0)
    mine = _BlockNet()
    summary, _ = _train(tmp_path, mine, "mine")
    ckpt = load_checkpoint(summary["checkpoint"])
    assert ckpt["model_name"] == f"user:{__name__}._BlockNet"
    try:
        nlnet.load_model(summary["checkpoint"])
        raise AssertionError("loaded a network of the user's own class without it")
    except CheckpointError as exc:
        assert "your own class" in str(exc) and "model=YourNet" in str(exc)
    back = nlnet.load_model(summary["checkpoint"], model=_BlockNet())
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(),
                                                 mine.state_dict().values()))  # fmt: skip
    assert main(["eval", "--checkpoint", summary["checkpoint"]]) == 2
    assert "your own class" in capsys.readouterr().err
    over = {"model.name": "c2d_tiny", "model.overrides": {"width": 2}, "model.num_classes": 3}
    torch.manual_seed(0)
    registered = create_model("c2d_tiny", num_classes=3, width=2, dropout=0.0)
    summary, _ = _train(tmp_path, registered, "registered", **over)
    assert load_checkpoint(summary["checkpoint"])["model_name"] == "c2d_tiny"
    assert type(nlnet.load_model(summary["checkpoint"])).__name__ == "ResNet3d"
