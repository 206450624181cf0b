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
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from nlnet.data.loader import make_loader
from nlnet.engine import distributed as du
from nlnet.engine.checkpoint import (
    check_compatible,
    load_checkpoint,
    load_model_weights,
    save_checkpoint,
)
from nlnet.engine.config import Config, absolute_paths, config_to_dict, save_config
from nlnet.engine.config import replace as replace_config
from nlnet.engine.errors import CheckpointError, DataError
from nlnet.engine.evaluation import autocast_context, evaluate
from nlnet.engine.hooks import HookBase, epoch_summary
from nlnet.engine.metrics import ThroughputMeter
from nlnet.engine.modeling import (
    build_model,
    freeze_batchnorm,
    init_from_pretrained,
    model_options,
    pretrained_keys,
    set_train_mode,
    trained_non_local,
)
from nlnet.engine.optim import build_optimizer, build_scheduler
from nlnet.engine.rundir import RunLock, check_run_dir, clear_previous_run
from nlnet.engine.runlog import MetricsLogger, jsonable, say, use_progress_bar
from nlnet.engine.seeding import (
    CHECKPOINT_DIR,
    FINAL,
    LAST,
    SeededDataset,
    resolve_resume,
    seed_all,
    seed_worker,
)
from nlnet.engine.state import Counters, TrainState
from nlnet.engine.stop import StopRequest, resume_command
from nlnet.engine.tasks import Task, get_task
from nlnet.engine.tools import build_hooks

__all__ = ["SeededDataset", "train", "evaluate", "CHECKPOINT_DIR", "LAST", "FINAL"]


class Run:
    """One training run of one process (see the module docstring for the order of the parts)."""

    def __init__(
        self, cfg: Config, info: du.DistInfo, task: Task, hooks: tuple[HookBase, ...] = ()
    ) -> None:
        self.cfg, self.info, self.task = cfg, info, task
        self.user_hooks = tuple(hooks)
        self.device, self.main = info.device, info.is_main
        self.run_dir = Path(cfg.output_dir)
        self.logger = MetricsLogger(self.run_dir, enabled=self.main)
        self.amp = cfg.train.amp
        if self.amp != "none" and self.device.type != "cuda":
            warnings.warn(
                f"train.amp={self.amp} is for CUDA; training in float32 on {self.device}",
                RuntimeWarning,
                stacklevel=4,
            )
            self.amp = "none"
        self.progress = self.main and use_progress_bar(cfg.train.progress)
        self.t_start = time.perf_counter()
        self.stop_request: StopRequest | None = None
        self.interrupted = False

    # -- set-up ---------------------------------------------------------------------------------
    def check_dir(self, resume: Any, force: bool) -> None:
        """Refuse a used directory (unless resume/force) without creating anything."""
        check_run_dir(self.run_dir, resume=bool(resume), force=force)
        if resume not in (None, False, True) and not Path(resume).exists():
            raise CheckpointError(f"--resume: no checkpoint or run directory at {str(resume)!r}")

    def prepare_dir(self, resume: Any, force: bool) -> RunLock | None:
        """Check the directory again and lock it (rank 0); called once the config, the data
        and the model are known to work, so a failed start leaves no directory or lock."""
        error = None
        try:
            check_run_dir(self.run_dir, resume=bool(resume), force=force)
        except Exception as exc:  # raised on every rank alike (shared file system)
            error = exc
        du.barrier()
        lock = None
        if error is None and self.main:
            try:
                lock = RunLock(self.run_dir).acquire()
                if force and not resume:
                    clear_previous_run(self.run_dir)
            except Exception as exc:
                error = exc
        errors = [e for e in du.all_gather_object(error) if e is not None]
        if errors:
            if lock is not None:
                lock.release()
            raise errors[0]
        return lock

    def build_data(self, train_dataset: Dataset | None, val_dataset: Dataset | None) -> None:
        """Datasets of the task; ``model.num_classes`` inferred from the data or checked."""
        cfg, tc = self.cfg, self.cfg.train
        if train_dataset is None:
            train_dataset = self.task.build_dataset(cfg, tc.split, "train")
        if val_dataset is None and tc.val_split:
            val_dataset = self.task.build_dataset(cfg, tc.val_split, "test")
        n = self.task.num_classes(train_dataset)
        if cfg.model.num_classes is None:
            if n is None:
                raise DataError("model.num_classes: the training data does not say; set it")
            cfg = self.cfg = replace_config(cfg, **{"model.num_classes": n})
        for what, ds in (("training", train_dataset), ("validation", val_dataset)):
            k = self.task.num_classes(ds) if ds is not None else None
            if k is not None and k != cfg.model.num_classes:
                raise DataError(
                    f"model.num_classes={cfg.model.num_classes} but the {what} data has {k} "
                    f"classes; remove model.num_classes (inferred) or set it to {k}"
                )
        self.train_dataset, self.val_dataset = train_dataset, val_dataset
        setup = getattr(self.task, "setup", None)  # optional: the final config (classes known)
        if setup is not None:
            setup(cfg)
        self.meta = self.task.metadata(cfg, train_dataset)
        self.hooks = build_hooks(cfg, self.user_hooks)
        # a hook may set the size of each step (multigrid): batch_factor(epoch, iteration)
        self.plan = next((h for h in self.hooks if hasattr(h, "batch_factor")), None)
        self._build_sampler()
        self.probe = self._probe_batch() if self.info.world_size > 1 else None

    def _probe_batch(self) -> Any:
        """The first usable item as a batch (DDP only): a rank whose micro-batch is empty must
        still join the gradient all-reduce, even before it has seen a usable batch."""
        seeded = SeededDataset(self.train_dataset)  # restores the generators after the fetch
        for i in range(len(self.train_dataset)):
            item = seeded[(i, 0)]
            if item is not None:
                return self.task.collate([item])
        raise DataError(f"no usable item in split {self.cfg.train.split!r}")

    def _build_sampler(self) -> None:
        tc, info = self.cfg.train, self.info
        self.sampler = du.ResumableDistributedSampler(
            len(self.train_dataset), info.world_size, info.rank, True, tc.seed, with_seeds=True
        )
        steps_per_epoch = len(self.sampler) // tc.batch_size // tc.accum_steps
        if steps_per_epoch == 0:
            raise DataError(
                f"train: the training set ({len(self.train_dataset)} items over "
                f"{info.world_size} process(es)) is smaller than one step of "
                f"train.batch_size={tc.batch_size} x train.accum_steps={tc.accum_steps}"
            )
        self.usable_batches = steps_per_epoch * tc.accum_steps
        o = self.cfg.optim
        self.max_iters = o.epochs * steps_per_epoch if o.epochs > 0 else o.max_iters
        if self.plan is not None:
            self.max_iters = self.plan.total_iterations(self.usable_batches, tc.accum_steps)

    def micro_batches(self, epoch: int, iteration: int) -> int:
        """Loader batches of the optimizer step at ``iteration``: ``train.accum_steps`` times
        the plan's batch factor (1 without a plan)."""
        factor = self.plan.batch_factor(epoch, iteration) if self.plan is not None else 1
        return self.cfg.train.accum_steps * factor

    def build_state(self, model: nn.Module | None) -> None:
        """Model (same initial weights on every rank), optimizer, schedule, scaler, DDP."""
        cfg, tc = self.cfg, self.cfg.train
        if tc.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
        elif self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True  # fixed clip sizes: let cuDNN pick kernels
        seed_all(tc.seed)
        if model is None:
            model = build_model(cfg)
        else:
            init_from_pretrained(model, cfg)
        model.to(self.device)
        if tc.freeze_bn:  # blocks initialised from model.pretrained freeze too (Sec. 5.1)
            freeze_batchnorm(model, trained_non_local(model, pretrained_keys(cfg)))
        elif tc.sync_bn:
            model = du.convert_sync_batchnorm(model, self.device)
        optimizer = build_optimizer(model, cfg.optim)
        self.state = TrainState(
            model=model,
            optimizer=optimizer,
            scheduler=(
                self.plan.build_scheduler(optimizer, cfg.optim, self.max_iters)
                if self.plan is not None
                else build_scheduler(optimizer, cfg.optim, self.max_iters)
            ),
            scaler=torch.amp.GradScaler("cuda", enabled=(self.amp == "fp16")),
            counters=Counters(self.device),
        )
        self.ddp_model = du.wrap_ddp(model, self.device)

    def restore(self, resume: Any) -> None:
        """Continue from a checkpoint (``--resume``), or seed this rank for a fresh run."""
        st, info = self.state, self.info
        path = resolve_resume(resume, self.run_dir)
        if path is None:
            self.logger.truncate_after(0)  # rows of a run killed before its first checkpoint
            seed_all(self.cfg.train.seed + info.rank)
            return
        ckpt = load_checkpoint(path, map_location="cpu")
        check_compatible(ckpt, self.cfg.model.name, self.cfg.model.num_classes)
        load_model_weights(st.model, ckpt)
        st.restore(ckpt)
        ranks = ckpt.get("extra", {}).get("ranks") or []
        if ranks and len(ranks) != info.world_size:
            warnings.warn(
                f"resume: the checkpoint was written by {len(ranks)} process(es), this run has "
                f"{info.world_size}; training continues but not exactly as the original run",
                RuntimeWarning,
                stacklevel=4,
            )
        if len(ranks) == info.world_size:
            st.restore_rank(ranks[info.rank])
        hook_states = ckpt.get("extra", {}).get("hooks") or {}
        for hook in self.hooks:
            if hook.name in hook_states:
                hook.load_state_dict(hook_states[hook.name])
        self.logger.truncate_after(st.iteration)
        say(f"resumed from {path} at iteration {st.iteration} (epoch {st.epoch})", self.main)

    # -- records --------------------------------------------------------------------------------
    def saved_config(self) -> dict[str, Any]:
        """The config as stored: ``train.stop_after`` is for one invocation, not the run."""
        return config_to_dict(replace_config(self.cfg, **{"train.stop_after": 0}))

    def checkpoint(self, path: Path) -> Path | None:
        st = self.state
        ranks = du.all_gather_object(st.rank_state())
        if not self.main:
            return None
        hooks = {h.name: h.state_dict() for h in self.hooks}
        hooks = {name: state for name, state in hooks.items() if state}
        return save_checkpoint(
            path,
            model=st.model,
            model_name=self.cfg.model.name,
            num_classes=self.cfg.model.num_classes,
            optimizer=st.optimizer,
            scheduler=st.scheduler,
            scaler=st.scaler,
            epoch=st.epoch,
            iteration=st.iteration,
            batch_in_epoch=st.batch_in_epoch,
            config=self.saved_config(),
            class_names=self.meta.get("class_names"),
            model_options=model_options(self.cfg),
            preprocessing=self.meta.get("preprocessing"),
            rng_state=ranks[0]["rng"],
            extra={"ranks": ranks, "world_size": self.info.world_size, "hooks": hooks},
        )

    def validate(self) -> dict[str, Any] | None:
        """The task's evaluation of the validation split (after the hooks' ``before_eval``),
        plus the hooks' ``eval_extra`` metrics, as one ``val`` record."""
        if self.val_dataset is None:
            return None
        st = self.state
        for hook in self.hooks:
            hook.before_eval(self)
        metrics = self.task.evaluate(
            st.model, self.val_dataset, self.cfg, self.device, amp=self.amp,
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
