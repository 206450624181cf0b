"""The training loop: ``train(cfg)`` and ``evaluate(cfg, checkpoint)``, readable top to bottom.

One loop for every run (``nlnet train``, ``nlnet demo``, the Python API).  The recipe is the
paper's (Section 4.1): SGD, momentum 0.9, weight decay 1e-4, an iteration-based multi-step
schedule, dropout 0.5 before the classifier, BatchNorm trained; Section 5.1 freezes BN
(``train.freeze_bn``), Section 5.2 uses per-category sigmoids (``train.loss: bce``).  Added for
practical use: warm-up, gradient accumulation, mixed precision on CUDA, DistributedDataParallel.

Exact resume.  The data order of an epoch is a permutation seeded by ``seed + epoch`` and the
augmentation of an item is seeded by ``(seed, epoch, index)`` (:class:`SeededDataset`), so the
batches depend neither on the number of workers nor on where the run was interrupted.  A
checkpoint holds the :class:`~nlnet.engine.state.TrainState` of every process; ``resume``
restores it and skips exactly the consumed part of the epoch, so the final weights equal those of
an uninterrupted run.

    config -> Run.prepare_dir (lock, refuse a used directory) -> Run.build_data (task datasets,
    classes inferred, hooks) -> Run.build_state (model, optimizer, schedule) -> Run.restore
    (--resume; each hook's state) -> Run.fit (epochs of steps; the hooks log, validate and
    checkpoint, see :mod:`nlnet.engine.hooks`) -> Run.finish (hooks' after_train, summary)

The set-up steps (directory, data, state, restore, checkpoint) are in
:mod:`nlnet.engine.loop_setup`; the steps of the loop itself are here.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from nlnet.data.loader import make_loader
from nlnet.engine import distributed as du
from nlnet.engine.config import Config, absolute_paths, save_config
from nlnet.engine.config import replace as replace_config
from nlnet.engine.evaluation import autocast_context, evaluate
from nlnet.engine.hooks import HookBase, epoch_summary
from nlnet.engine.loop_setup import RunSetup
from nlnet.engine.metrics import ThroughputMeter
from nlnet.engine.modeling import set_train_mode
from nlnet.engine.runlog import jsonable, say
from nlnet.engine.seeding import (
    CHECKPOINT_DIR,
    FINAL,
    LAST,
    SeededDataset,
    seed_worker,
)
from nlnet.engine.stop import StopRequest, resume_command
from nlnet.engine.tasks import get_task

__all__ = ["SeededDataset", "train", "evaluate", "CHECKPOINT_DIR", "LAST", "FINAL"]


class Run(RunSetup):
    """One training run of one process (see the module docstring for the order of the parts);
    the set-up methods are in :class:`~nlnet.engine.loop_setup.RunSetup`."""

    def validate(self) -> dict[str, Any] | None:
        """The task's evaluation of the validation split (after the hooks' ``before_eval``),
        plus the hooks' ``eval_extra`` metrics, as one ``val`` record."""
        if self.val_dataset is None:
            return None
        st = self.state
        for hook in self.hooks:
            hook.before_eval(self)
        metrics = self.task.evaluate(
            st.model, self.val_dataset, self.device, amp=self.amp,
            progress=self.progress, desc="val",
        )  # fmt: skip
        for hook in self.hooks:
            metrics.update(hook.eval_extra(self))
        set_train_mode(st.model, self.cfg.train.freeze_bn)
        self.logger.log({"kind": "val", "iter": st.iteration, "epoch": self.step_epoch, **metrics})
        say(f"val @ {st.iteration}: {self.task.summary(metrics)}", self.main)
        return metrics

    # -- the loop -------------------------------------------------------------------------------
    def loader(self) -> DataLoader:
        st, tc = self.state, self.cfg.train
        self.sampler.set_epoch(st.epoch)
        if hasattr(self.train_dataset, "set_epoch"):
            self.train_dataset.set_epoch(st.epoch)  # per-(seed, epoch, item) augmentation
        self.sampler.set_start(st.batch_in_epoch * tc.batch_size)
        gen = torch.Generator()
        gen.manual_seed(tc.seed * 1_000_003 + st.epoch)
        return make_loader(
            SeededDataset(self.train_dataset), batch_size=tc.batch_size, sampler=self.sampler,
            workers=tc.workers, prefetch=tc.prefetch, collate_fn=self.task.collate,
            device=self.device, drop_last=True, worker_init_fn=seed_worker, generator=gen,
        )  # fmt: skip

    def micro_step(self, batch: Any, sync: bool) -> int:
        """Forward/backward of one micro-batch; returns its number of usable items.

        A micro-batch whose items all failed is skipped and counted.  Under DDP every process
        must still join the gradient all-reduce: it runs the last usable batch (at first the
        probe batch) with weight 0.
        """
        st, c = self.state, self.state.counters
        n_bad = self.task.skipped(batch)
        ddp = self.ddp_model is not st.model
        ctx = self.ddp_model.no_sync() if (ddp and not sync) else contextlib.nullcontext()
        with ctx, autocast_context(self.device, self.amp):
            loss, n = self.task.loss(self.ddp_model, batch, self.device)
            weight = 1.0
            if n == 0 and ddp:  # the last usable batch (or the probe), with weight 0
                loss, _ = self.task.loss(self.ddp_model, self.last_batch, self.device)
                weight = 0.0
        c.add_skipped(n_bad, empty=n == 0)
        if loss is None:
            return 0
        st.scaler.scale(loss * weight / self.step_batches).backward()
        if n:
            self.last_batch = batch
            c.add_loss(loss, n)
        return n

    def step(self, batches: Iterator[Any]) -> int:
        """One optimizer step over ``micro_batches`` micro-batches; returns the clips used."""
        st, oc = self.state, self.cfg.optim
        st.optimizer.zero_grad(set_to_none=True)
        n_clips = sum(
            self.micro_step(next(batches), micro == self.step_batches - 1)
            for micro in range(self.step_batches)
        )
        st.batch_in_epoch += self.step_batches
        if oc.clip_grad_norm > 0:
            st.scaler.unscale_(st.optimizer)
            params = [p for p in st.model.parameters() if p.requires_grad]
            nn.utils.clip_grad_norm_(params, oc.clip_grad_norm)
        stepped = n_clips > 0 or self.ddp_model is not st.model  # else: only bad videos
        if stepped:
            st.scaler.step(st.optimizer)
            st.scaler.update()
        with warnings.catch_warnings():
            if not stepped:  # the schedule counts iterations, skipped ones included
                warnings.filterwarnings(
                    "ignore", "Detected call of `lr_scheduler.step", UserWarning
                )
            st.scheduler.step()
        st.iteration += 1
        return n_clips

    def after_step(self, t_epoch: float) -> str | None:
        """Close the epoch when it is done, then the hooks (EMA, log, validate, checkpoint...);
        ``"stop"``/``"epoch"`` end the epoch."""
        st, tc = self.state, self.cfg.train
        self.at_end = st.iteration == self.max_iters
        self.step_epoch = st.epoch
        epoch_done = (
            st.batch_in_epoch + self.micro_batches(st.epoch, st.iteration) > self.usable_batches
        )
        if epoch_done:  # a checkpoint must point at the next epoch's start
            epoch_summary(self, st.epoch, t_epoch)
            st.epoch, st.batch_in_epoch = st.epoch + 1, 0
            st.counters.new_epoch()
        stop = bool(tc.stop_after) and st.iteration - self.start_iteration >= tc.stop_after
        signalled = self.stop_request is not None and self.stop_request.requested()
        self.stopping = (stop or signalled) and not self.at_end
        for hook in self.hooks:  # the checkpoint hook writes last.pt when stopping
            hook.after_step(self)
        if signalled and not self.at_end:
            self.interrupted = True
            say(f"{self.stop_request.name}: saved {self.run_dir / CHECKPOINT_DIR / LAST} at "
                f"iteration {st.iteration}; continue with: {resume_command(self.run_dir)}",
                self.main)  # fmt: skip
            return "stop"
        if self.stopping:
            say(f"stopping after {tc.stop_after} iteration(s) (train.stop_after); continue "
                f"with: {resume_command(self.run_dir)}", self.main)  # fmt: skip
            return "stop"
        return "epoch" if epoch_done else None

    def run_epoch(self) -> bool:
        """Train until the epoch ends, the run ends or ``stop_after``; True when stopped."""
        st = self.state
        loader = self.loader()
        batches = iter(loader)
        t_epoch = time.perf_counter()
        while st.batch_in_epoch + self.micro_batches(st.epoch, st.iteration) <= self.usable_batches:
            if st.iteration >= self.max_iters:
                break
            t_step = time.perf_counter()
            self.lr = max(g["lr"] for g in st.optimizer.param_groups)  # this iteration's rate
            self.step_batches = self.micro_batches(st.epoch, st.iteration)
            for hook in self.hooks:
                hook.before_step(self)
            n_clips = self.step(batches)
            self.clips_seen += n_clips
            self.train_time += time.perf_counter() - t_step
            self.speed.update(n_clips * self.info.world_size)
            if self.bar is not None:
                self.bar.update(1)
            outcome = self.after_step(t_epoch)
            if outcome is not None:
                return outcome == "stop"
        return False

    def fit(self) -> dict[str, Any]:
        st = self.state
        if self.main:
            save_config(replace_config(self.cfg, **{"train.stop_after": 0}),
                        self.run_dir / "config.yaml")  # fmt: skip
        self.bar = None
        if self.progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.max_iters, initial=st.iteration, desc="train",
                            dynamic_ncols=True)  # fmt: skip
        set_train_mode(st.model, self.cfg.train.freeze_bn)
        self.speed = ThroughputMeter(window=max(self.cfg.train.log_every, 2))
        self.start_iteration, self.last_batch = st.iteration, self.probe
        self.val_metrics, self.last_ckpt = None, None
        self.train_time, self.clips_seen = 0.0, 0
        self.step_epoch, self.lr = st.epoch, max(g["lr"] for g in st.optimizer.param_groups)
        self.at_end = self.stopping = self.stopped = False
        for hook in self.hooks:
            hook.before_train(self)
        t_loop, stopped = time.perf_counter(), False
        try:
            while st.iteration < self.max_iters and not stopped:
                stopped = self.run_epoch()
        finally:
            if self.bar is not None:
                self.bar.close()
        if not stopped and st.batch_in_epoch > 0:
            epoch_summary(self, st.epoch, t_loop, complete=False)  # the last, partial epoch
        return self.finish(stopped, time.perf_counter() - t_loop)

    def finish(self, stopped: bool, loop_time: float) -> dict[str, Any]:
        """The hooks' ``after_train`` (final validation, ``final.pt``...), CSV, curves, summary."""
        st = self.state
        self.stopped, self.step_epoch = stopped, st.epoch
        for hook in self.hooks:
            hook.after_train(self)
        self.logger.write_csv()
        png = self.logger.plot(self.cfg.model.num_classes) if not stopped else None
        du.barrier()
        c = st.counters
        skipped = du.all_reduce_sum(
            torch.tensor([c.total_skipped, c.total_empty_batches], dtype=torch.float64)
        ).tolist()
        records = self.logger.records() if self.main else []
        losses = [r["loss"] for r in records if r.get("kind") == "train" and r.get("loss")]
        world = self.info.world_size
        summary = {
            "run_dir": str(self.run_dir), "iterations": st.iteration,
            "max_iters": self.max_iters, "epochs": st.epoch,
            "train_loss": losses[-1] if losses else None, "val": self.val_metrics,
            "checkpoint": str(self.last_ckpt) if self.last_ckpt is not None else None,
            "curves": str(png) if png is not None else None,
            "time_s": time.perf_counter() - self.t_start, "loop_time_s": loop_time,
            "clips_per_s": self.clips_seen * world / self.train_time if self.train_time else None,
            "skipped": int(skipped[0]), "empty_batches": int(skipped[1]),
            "stopped": stopped, "world_size": world, "interrupted": self.interrupted,
        }  # fmt: skip
        if self.main:
            with open(self.run_dir / "summary.json", "w") as f:
                json.dump(jsonable(summary), f, indent=2)
        return summary


def train(
    cfg: Config,
    *,
    resume: bool | str | os.PathLike | None = None,
    force: bool = False,
    model: nn.Module | None = None,
    train_dataset: Dataset | None = None,
    val_dataset: Dataset | None = None,
    collate_fn: Callable | None = None,
    hooks: tuple[HookBase, ...] = (),
) -> dict[str, Any]:
    """Train ``cfg.model`` on ``cfg.data`` with the task of ``cfg.task``; return a summary.

    Args:
        cfg: the resolved configuration (:func:`nlnet.engine.config.load_config`).
        resume: ``True`` continues from ``<output_dir>/checkpoints/last.pt`` (from the start if
            the run was killed before its first checkpoint), a path continues from that
            checkpoint, ``None``/``False`` starts a new run (refused in a used directory).
        force: start a new run in a used directory, deleting its previous records/checkpoints.
        model: use this network instead of ``create_model(cfg.model.name, ...)``.
        train_dataset: use this dataset instead of the task's ``train.split``.
        val_dataset: use this dataset instead of the task's ``train.val_split``.
        collate_fn: batch collation (default: the task's).
        hooks: more :class:`~nlnet.engine.hooks.HookBase` hooks, called after the config's
            tools and logging, before validation and checkpointing.

    Returns:
        ``{"run_dir", "iterations", "epochs", "train_loss", "val" (metrics or None),
        "checkpoint", "time_s", "clips_per_s", "skipped", "empty_batches", "stopped", ...}``.
    """
    cfg = absolute_paths(cfg)
    info = du.init_distributed(cfg.train.device)
    try:
        run = Run(cfg, info, get_task(cfg, collate_fn), hooks)
        run.check_dir(resume, force)  # nothing is written before the data and the model work
        run.build_data(train_dataset, val_dataset)
        run.build_state(model)
        lock = run.prepare_dir(resume, force)
        try:
            run.restore(resume)
            with StopRequest(info.world_size > 1) as stop:
                run.stop_request = stop
                return run.fit()
        finally:
            if lock is not None:
                lock.release()
    finally:
        du.cleanup(info)
