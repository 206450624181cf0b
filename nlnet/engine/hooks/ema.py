"""Exponential moving average of the weights, evaluated and checkpointed beside the raw ones.

``torch.optim.swa_utils.AveragedModel`` with ``get_ema_multi_avg_fn(decay)`` (parameters and
buffers): the first update copies the weights, then after every optimizer step
``ema = decay * ema + (1 - decay) * weights``.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from nlnet.engine.checkpoint.file_io import load_checkpoint, unwrap_model
from nlnet.engine.checkpoint.model_loading import build_model_from_checkpoint
from nlnet.engine.errors import CheckpointError
from nlnet.engine.hooks.base import HookBase, RunView

__all__ = ["EMAHook", "build_ema", "load_ema_model"]


def build_ema(model: nn.Module, decay: float) -> AveragedModel:
    """An EMA copy of ``model`` (``AveragedModel``, buffers averaged too)."""
    return AveragedModel(
        unwrap_model(model), multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True
    )


class EMAHook(HookBase):
    """Keeps the EMA of the weights (``ema.decay``); its validation metrics are ``ema_<key>``;
    its weights are in checkpoints at ``extra["hooks"]["ema"]["model"]`` (a state dict of the
    bare network, loadable with ``model.load_state_dict``)."""

    name = "ema"
    events = ("before_train", "after_step", "eval_extra")

    def __init__(self, cfg: Any) -> None:
        self.decay, self.evaluate = float(cfg.decay), bool(cfg.evaluate)
        self.ema: AveragedModel | None = None
        self._pending: dict[str, Any] | None = None

    def before_train(self, run: RunView) -> None:
        self.ema = build_ema(run.state.model, self.decay)
        if self._pending is not None:  # resumed: the averaged weights of the checkpoint
            self.ema.module.load_state_dict(self._pending["model"])
            self.ema.n_averaged.fill_(int(self._pending["n_averaged"]))
            self._pending = None
        else:  # a fresh run: the average starts at the initial weights
            self.ema.update_parameters(unwrap_model(run.state.model))

    def after_step(self, run: RunView) -> None:
        self.ema.update_parameters(unwrap_model(run.state.model))

    def eval_extra(self, run: RunView) -> dict[str, Any]:
        if not self.evaluate or self.ema is None or run.val_dataset is None:
            return {}
        metrics = run.task.evaluate(
            self.ema.module, run.val_dataset, run.device, amp=run.amp,
            progress=run.progress, desc="val ema",
        )  # fmt: skip
        return {f"ema_{k}": v for k, v in metrics.items() if k != "time_s"}

    def state_dict(self) -> dict[str, Any]:
        if self.ema is None:
            return {}
        return {"model": self.ema.module.state_dict(), "n_averaged": int(self.ema.n_averaged)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._pending = state


def load_ema_model(checkpoint: Any, device: str = "cpu") -> nn.Module:
    """The network of a checkpoint with its EMA weights (eval mode), like
    :func:`~nlnet.engine.checkpoint.build_model_from_checkpoint` for the raw ones.

    Raises:
        CheckpointError: the run was trained without ``ema.decay``.
    """
    ckpt = load_checkpoint(checkpoint, map_location="cpu")
    state = (ckpt.get("extra") or {}).get("hooks", {}).get("ema")
    if not state:
        raise CheckpointError("checkpoint: no EMA weights (the run was trained without ema.decay)")
    model = build_model_from_checkpoint(ckpt)
    model.load_state_dict(state["model"], strict=True)
    return model.to(device).eval()
