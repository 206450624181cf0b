"""Checkpoints: atomic, weights_only-loadable, exact RNG round trip, mismatch errors, backbone."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from torch import nn

from nlnet.engine.checkpoint import (
    CheckpointError,
    CheckpointMismatchError,
    check_compatible,
    get_rng_state,
    load_backbone,
    load_checkpoint,
    load_model_weights,
    save_checkpoint,
    set_rng_state,
)
from nlnet.engine.config import load_config
from nlnet.engine.optim import build_scheduler


class Net(nn.Module):
    def __init__(self, k: int = 3):
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 3)
        self.bn = nn.BatchNorm1d(4)
        self.fc = nn.Linear(4, k)


def _state(k: int = 3):
    torch.manual_seed(0)
    net = Net(k)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    optim = load_config(None, {"optim.steps": [2], "optim.warmup_iters": 1}).optim
    sched = build_scheduler(opt, optim, 10)
    net.fc.weight.grad = torch.ones_like(net.fc.weight)
    opt.step()
    sched.step()
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    return net, opt, sched, scaler


def test_roundtrip_with_weights_only(tmp_path):
    net, opt, sched, scaler = _state()
    path = save_checkpoint(
        tmp_path / "c.pt", model=net, model_name="net", num_classes=3, optimizer=opt,
        scheduler=sched, scaler=scaler, epoch=2, iteration=7, batch_in_epoch=3,
        config={"optim": {"lr": 0.1, "steps": [2]}}, class_names=["a", "b", "c"],
    )  # fmt: skip
    raw = torch.load(path, weights_only=True)  # no pickled code needed
    assert raw["iteration"] == 7 and raw["class_names"] == ["a", "b", "c"]
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    net2, opt2, sched2, _ = _state()
    with torch.no_grad():
        for p in net2.parameters():
            p.zero_()
    ck = load_checkpoint(path)
    check_compatible(ck, "net", 3)
    load_model_weights(net2, ck)
    opt2.load_state_dict(ck["optimizer"])
    sched2.load_state_dict(ck["scheduler"])
    assert (ck["epoch"], ck["iteration"], ck["batch_in_epoch"]) == (2, 7, 3)
    for a, b in zip(net.state_dict().values(), net2.state_dict().values()):
        assert torch.equal(a, b)
    buf = opt.state_dict()["state"]
    assert buf and buf.keys() == opt2.state_dict()["state"].keys()
    for k in buf:
        assert torch.equal(
            buf[k]["momentum_buffer"], opt2.state_dict()["state"][k]["momentum_buffer"]
        )
    assert sched2.last_epoch == sched.last_epoch


def test_rng_state_roundtrip():
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    state = get_rng_state()
    a = (random.random(), np.random.rand(), torch.rand(3))
    # the state survives a trip through torch.save / weights_only load
    import io

    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    set_rng_state(torch.load(buf, weights_only=True))
    b = (random.random(), np.random.rand(), torch.rand(3))
    assert a[0] == b[0] and a[1] == b[1] and torch.equal(a[2], b[2])


def test_mismatch_is_a_clear_error(tmp_path):
    net, *_ = _state()
    path = save_checkpoint(tmp_path / "c.pt", model=net, model_name="net", num_classes=3)
    ck = load_checkpoint(path)
    with pytest.raises(CheckpointMismatchError, match="model 'net', not 'other'.*load_backbone"):
        check_compatible(ck, "other", 3)
    with pytest.raises(CheckpointMismatchError, match="3 classes, the model has 5"):
        check_compatible(ck, "net", 5)


def test_load_backbone_resets_the_head(tmp_path):
    net, *_ = _state()
    path = save_checkpoint(tmp_path / "c.pt", model=net, model_name="net", num_classes=3)
    torch.manual_seed(5)
    new = Net(5)
    fc_before = new.fc.weight.clone()
    info = load_backbone(new, path, exclude=("fc",))
    assert torch.equal(new.conv.weight, net.conv.weight)
    assert torch.equal(new.bn.running_var, net.bn.running_var)
    assert torch.equal(new.fc.weight, fc_before)
    assert set(info.kept) == {"fc.weight", "fc.bias"}
    with pytest.raises(CheckpointMismatchError, match="fc.weight"):
        load_backbone(Net(5), path, exclude=())


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    net, *_ = _state()
    path = save_checkpoint(
        tmp_path / "c.pt", model=net, model_name="net", num_classes=3, iteration=1
    )

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, model=net, model_name="net", num_classes=3, iteration=2)
    monkeypatch.undo()
    assert load_checkpoint(path)["iteration"] == 1
    assert os.listdir(tmp_path) == ["c.pt"]
    with pytest.raises(CheckpointError, match="no such file"):
        load_checkpoint(tmp_path / "missing.pt")
