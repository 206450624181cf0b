"""The training loop: ``train(cfg)``, one :class:`Run` per process, readable top to bottom.

One loop for every run (``nlnet train``, ``nlnet demo``, the Python API).  The recipe is the
paper's (Wang et al., CVPR 2018, Section 4.1): SGD, momentum 0.9, weight decay 1e-4, an
iteration-based multi-step schedule, dropout 0.5 before the classifier, BatchNorm trained;
Section 5.1 freezes BN (``train.freeze_bn``), Section 5.2 uses per-category sigmoids
(``train.loss: bce``).  Added for practical use: warm-up, gradient accumulation, mixed precision
on CUDA, DistributedDataParallel.

Exact resume.  The data order of an epoch is a permutation seeded by ``seed + epoch`` and the
augmentation of an item is seeded by ``(seed, epoch, index)`` (:class:`SeededDataset`), so the
batches depend neither on the number of workers nor on where the run was interrupted.  A
checkpoint holds the :class:`~nlnet.engine.state.TrainState` of every process; ``resume``
restores it and skips exactly the consumed part of the epoch, so the final weights equal those of
an uninterrupted run.

The steps of :func:`train` (docs/ARCHITECTURE.md draws them)::

    check_dir -> build_data -> build_state -> lock_dir -> restore -> fit -> finish

``fit`` runs epochs of :meth:`Run.step`; after each step the hooks
(:mod:`nlnet.engine.hooks`) log, validate and checkpoint, reading the run through a frozen
:class:`~nlnet.engine.hooks.base.RunView` and handing their results over through
``state.events`` (:class:`~nlnet.engine.events.EventStorage`).
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

from nlnet.data.atomic import atomic_path
from nlnet.data.loader import TimedBatches, make_loader, worker_tuner
from nlnet.data.seeding import ItemKey, SeededDataset, seed_all, seed_worker
from nlnet.engine import distributed as du
from nlnet.engine.checkpoint.file_io import load_checkpoint, save_checkpoint
from nlnet.engine.checkpoint.model_loading import check_compatible, load_model_weights
from nlnet.engine.checkpoint.paths import CHECKPOINT_DIR, LAST, resolve_resume
from nlnet.engine.config.loading import absolute_paths, config_to_dict, save_config
from nlnet.engine.config.loading import replace as replace_config
from nlnet.engine.config.schema import Config
from nlnet.engine.errors import DataError
from nlnet.engine.evaluation import autocast_context
from nlnet.engine.hooks.base import EVENTS, HookBase, RunView, StepPlan
from nlnet.engine.hooks.build import build_hooks
from nlnet.engine.hooks.train_log import epoch_summary
from nlnet.engine.metrics import ThroughputMeter
from nlnet.engine.modeling import (
    build_train_model,
    compiled_for_training,
    input_channels_from_data,
    model_options,
    set_train_mode,
    trained_model_name,
)
from nlnet.engine.optim import build_optimizer, build_scheduler
from nlnet.engine.rundir import RunLock, check_new_run, lock_run_dir
from nlnet.engine.runlog import MetricsLogger, jsonable, say, use_progress_bar
from nlnet.engine.state import Counters, TrainState
from nlnet.engine.stop import StopRequest, resume_command
from nlnet.engine.tasks import Task, get_task

__all__ = ["Run", "train"]


class Run:
    """One training run of one process: set-up, the loop, the records (the module docstring
    gives the order).  Every attribute is set here; what changes while training is in
    :attr:`state`."""

    def __init__(
        self, cfg: Config, info: du.DistInfo, task: Task, hooks: tuple[HookBase, ...] = ()
    ) -> None:
        self.cfg, self.info, self.task = cfg, info, task
        self.device, self.main = info.device, info.is_main
        self.run_dir = Path(cfg.output_dir)
        self.logger = MetricsLogger(self.run_dir, enabled=self.main)
        self.amp = cfg.train.amp
        if self.amp != "none" and self.device.type != "cuda":
            warnings.warn(f"train.amp={self.amp} is for CUDA; training in float32 on "
                          f"{self.device}", RuntimeWarning, stacklevel=4)  # fmt: skip
            self.amp = "none"
        self.progress = self.main and use_progress_bar(cfg.train.progress)
        self.t_start = time.perf_counter()
        self.user_hooks = tuple(hooks)
        self.hooks: list[HookBase] = []  # build_data: the config's and the caller's
        self.handlers: dict[str, list[HookBase]] = {}  # event -> the hooks that declare it
        self.plan: StepPlan | None = None  # a hook that sizes the steps (multigrid)
        self.train_dataset: Dataset | None = None
        self.val_dataset: Dataset | None = None
        self.meta: dict[str, Any] = {}  # the task's class names and preprocessing
        self.sampler: du.ResumableDistributedSampler | None = None
        self.usable_batches = 0  # loader batches of an epoch that make whole steps
        self.max_iters = 0
        self.probe: Any = None  # DDP: a usable batch for a rank whose micro-batch is empty
        self.last_batch: Any = None
        self.state: TrainState | None = None  # build_state
        self.model_name = cfg.model.name  # build_state: user:<class> for a user's own network
        self.ddp: nn.Module | None = None  # DDP(model) under a process group, else the model
        self.ddp_model: nn.Module | None = None
        self.stop_request: StopRequest | None = None
        self.bar: Any = None  # tqdm progress bar of fit
        # train.workers: auto: the loader's workers chosen epoch by epoch (nlnet.data.loader)
        self.tuner = worker_tuner(cfg.train.workers, info.world_size)
        self.view: RunView | None = None  # what the hooks read (fit)

    # -- set-up ---------------------------------------------------------------------------------
    def check_dir(self, resume: Any, force: bool) -> None:
        """Refuse a used directory (unless resume/force) without creating anything."""
        check_new_run(self.run_dir, resume, force)

    def lock_dir(self, resume: Any, force: bool) -> RunLock | None:
        """Check the directory again and lock it (:func:`~nlnet.engine.rundir.lock_run_dir`)."""
        return lock_run_dir(self.run_dir, resume, force, self.main)

    def build_data(self, train_dataset: Dataset | None, val_dataset: Dataset | None) -> None:
        """Datasets of the task (``model.num_classes`` inferred or checked), hooks, sampler."""
        cfg, tc = self.cfg, self.cfg.train
        if train_dataset is None:
            train_dataset = self.task.build_dataset(tc.split, "train")
        if val_dataset is None and tc.val_split:
            val_dataset = self.task.build_dataset(tc.val_split, "test")
        n = self.task.num_classes(train_dataset)
        if n == 1 and getattr(self.task, "classifies", False):  # a class per item
            names = list(getattr(train_dataset, "classes", None) or ["?"])
            raise DataError(
                f"data.root: the training data has one class ({names[0]!r}); classification "
                "needs at least two (a model of one class is right on every input)"
            )
        without = getattr(train_dataset, "classes_without_items", None)
        classifies = getattr(self.task, "classifies", False)
        empty = without() if callable(without) and classifies else []
        if empty:
            raise DataError(
                f"data.root: class folder(s) {', '.join(map(repr, empty[:5]))}"
                f"{f' and {len(empty) - 5} more' if len(empty) > 5 else ''} have no usable "
                f"training file (empty, unreadable or too short); remove them or add data"
            )
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
        cfg = self.cfg = input_channels_from_data(cfg, self.task, train_dataset, val_dataset)
        setup = getattr(self.task, "setup", None)  # optional: the final class count
        if setup is not None:
            setup(cfg.model.num_classes)
        self.meta = self.task.metadata(train_dataset)
        self.hooks = build_hooks(cfg, self.user_hooks)
        self.handlers = {e: [h for h in self.hooks if e in h.events] for e in EVENTS}
        plans = [h for h in self.hooks if isinstance(h, StepPlan)]
        if len(plans) > 1:
            raise ValueError(f"hooks: at most one StepPlan, got {[h.name for h in plans]}")
        self.plan = plans[0] if plans else None
        self.build_sampler()
        self.probe = self.probe_batch() if self.info.world_size > 1 else None

    def probe_batch(self) -> Any:
        """The first usable item as a batch (DDP only): a rank whose micro-batch is empty must
        still join the gradient all-reduce, even before it has seen a usable batch."""
        seeded = SeededDataset(self.train_dataset)  # restores the generators after the fetch
        for i in range(len(self.train_dataset)):
            item = seeded[ItemKey(i, 0)]
            if item is not None:
                return self.task.collate([item])
        raise DataError(f"no usable item in split {self.cfg.train.split!r}")

    def build_sampler(self) -> None:
        """The resumable sampler; the batches of an epoch that make whole steps; the run's
        number of steps (``optim.epochs`` or ``optim.max_iters``, or the plan's)."""
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
        # what the checkpoints record: the registered name only for that registered network
        self.model_name = cfg.model.name if model is None else trained_model_name(cfg, model)
        model = build_train_model(cfg, self.device, model)
        optimizer = build_optimizer(model, cfg.optim)
        plan = self.plan
        scheduler = (plan.build_scheduler(optimizer, cfg.optim, self.max_iters) if plan
                     else build_scheduler(optimizer, cfg.optim, self.max_iters))  # fmt: skip
        self.state = TrainState(
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            scaler=torch.amp.GradScaler("cuda", enabled=(self.amp == "fp16")),
            counters=Counters(self.device),
            speed=ThroughputMeter(window=max(tc.log_every, 2)),
            max_iters=self.max_iters,
        )
        self.ddp = du.wrap_ddp(model, self.device)  # the model itself without a group
        self.ddp_model = compiled_for_training(self.ddp, tc.compile)  # what the steps call

    def restore(self, resume: Any) -> None:
        """Continue from a checkpoint (``--resume``), or seed this rank for a fresh run."""
        st, info = self.state, self.info
        path = resolve_resume(resume, self.run_dir)
        if path is None:
            self.logger.truncate_after(0)  # rows of a run killed before its first checkpoint
            seed_all(self.cfg.train.seed + info.rank)
            return
        ckpt = load_checkpoint(path, map_location="cpu")
        check_compatible(ckpt, self.model_name, self.cfg.model.num_classes)
        load_model_weights(st.model, ckpt)
        st.restore(ckpt)
        st.restore_ranks(ckpt.get("extra", {}).get("ranks") or [], info.rank, info.world_size)
        hook_states = ckpt.get("extra", {}).get("hooks") or {}
        for hook in self.hooks:
            if hook.name in hook_states:
                hook.load_state_dict(hook_states[hook.name])
        self.logger.truncate_after(st.iteration)
        say(f"resumed from {path} at iteration {st.iteration} (epoch {st.epoch})", self.main)

    # -- the hooks' two services ----------------------------------------------------------------
    def call(self, event: str) -> None:
        """Call ``event`` on the hooks that declare it, in order."""
        for hook in self.handlers[event]:
            getattr(hook, event)(self.view)

    def validate(self) -> dict[str, Any] | None:
        """The task's evaluation of the validation split (after the hooks' ``before_eval``),
        plus the hooks' ``eval_extra`` metrics, as one ``val`` record."""
        if self.val_dataset is None:
            return None
        st = self.state
        self.call("before_eval")
        metrics = self.task.evaluate(
            st.model, self.val_dataset, self.device, amp=self.amp,
            progress=self.progress, desc="val",
        )  # fmt: skip
        for hook in self.handlers["eval_extra"]:
            metrics.update(hook.eval_extra(self.view))
        set_train_mode(st.model, self.cfg.train.freeze_bn)
        self.logger.log({"kind": "val", "iter": st.iteration, "epoch": st.step_epoch, **metrics})
        say(f"val @ {st.iteration}: {self.task.summary(metrics)}", self.main)
        return metrics

    def checkpoint(self, path: Path) -> Path | None:
        """Write the run's checkpoint at ``path`` (rank 0; every rank's generators and
        counters, the hooks' states); returns the path (``None`` on the other ranks)."""
        st = self.state
        ranks = du.all_gather_object(st.rank_state())
        if not self.main:
            return None
        hooks = {h.name: h.state_dict() for h in self.hooks}
        hooks = {name: state for name, state in hooks.items() if state}
        return save_checkpoint(
            path, model=st.model, model_name=self.model_name,
            num_classes=self.cfg.model.num_classes, optimizer=st.optimizer,
            scheduler=st.scheduler, scaler=st.scaler, epoch=st.epoch, iteration=st.iteration,
            batch_in_epoch=st.batch_in_epoch,
            config=config_to_dict(replace_config(self.cfg, **{"train.stop_after": 0})),
            class_names=self.meta.get("class_names"), model_options=model_options(self.cfg),
            preprocessing=self.meta.get("preprocessing"), rng_state=ranks[0]["rng"],
            extra={"ranks": ranks, "world_size": self.info.world_size, "hooks": hooks},
        )  # fmt: skip

    # -- the loop -------------------------------------------------------------------------------
    def loader(self) -> DataLoader:
        st, tc = self.state, self.cfg.train
        self.sampler.set_epoch(st.epoch)
        self.sampler.set_start(st.batch_in_epoch * tc.batch_size)
        gen = torch.Generator()
        gen.manual_seed(tc.seed * 1_000_003 + st.epoch)
        return make_loader(
            SeededDataset(self.train_dataset), batch_size=tc.batch_size, sampler=self.sampler,
            workers=self.tuner.workers if self.tuner is not None else int(tc.workers),
            prefetch=tc.prefetch, collate_fn=self.task.collate,
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
        ddp = self.ddp is not st.model
        ctx = self.ddp.no_sync() if (ddp and not sync) else contextlib.nullcontext()
        with ctx, autocast_context(self.device, self.amp):
            loss, n = self.task.loss(self.ddp_model, batch, self.device)
            weight = 1.0
            if n == 0 and ddp:  # the last usable batch (or the probe), with weight 0
                loss, _ = self.task.loss(self.ddp_model, self.last_batch, self.device)
                weight = 0.0
        c.add_skipped(n_bad, empty=n == 0)
        if loss is None:
            return 0
        st.scaler.scale(loss * weight / st.step_batches).backward()
        if n:
            self.last_batch = batch
            c.add_loss(loss, n)
        return n

    def step(self, batches: Iterator[Any]) -> int:
        """One optimizer step over ``state.step_batches`` micro-batches; returns the items
        used."""
        st, oc = self.state, self.cfg.optim
        st.optimizer.zero_grad(set_to_none=True)
        n_items = sum(
            self.micro_step(next(batches), micro == st.step_batches - 1)
            for micro in range(st.step_batches)
        )
        st.batch_in_epoch += st.step_batches
        if oc.clip_grad_norm > 0:
            st.scaler.unscale_(st.optimizer)
            params = [p for p in st.model.parameters() if p.requires_grad]
            nn.utils.clip_grad_norm_(params, oc.clip_grad_norm)
        stepped = n_items > 0 or self.ddp is not st.model  # else: only bad items
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
        st.events.step(st.iteration)
        return n_items

    def after_step(self, t_epoch: float) -> str | None:
        """Close the epoch when it is done, then the hooks (EMA, log, validate, checkpoint...);
        ``"stop"``/``"epoch"`` end the epoch."""
        st, tc = self.state, self.cfg.train
        st.at_end = st.iteration == st.max_iters
        st.step_epoch = st.epoch
        epoch_done = (
            st.batch_in_epoch + self.micro_batches(st.epoch, st.iteration) > self.usable_batches
        )
        if epoch_done:  # a checkpoint must point at the next epoch's start
            epoch_summary(self.view, st.epoch, t_epoch)
            st.epoch, st.batch_in_epoch = st.epoch + 1, 0
            st.counters.new_epoch()
        stop = bool(tc.stop_after) and st.iteration - st.start_iteration >= tc.stop_after
        signalled = self.stop_request is not None and self.stop_request.requested()
        st.stopping = (stop or signalled) and not st.at_end
        self.call("after_step")  # the checkpoint hook writes last.pt when stopping
        if signalled and not st.at_end:
            st.interrupted = True
            say(f"{self.stop_request.name}: saved {self.run_dir / CHECKPOINT_DIR / LAST} at "
                f"iteration {st.iteration}; continue with: {resume_command(self.run_dir)}",
                self.main)  # fmt: skip
            return "stop"
        if st.stopping:
            say(f"stopping after {tc.stop_after} iteration(s) (train.stop_after); continue "
                f"with: {resume_command(self.run_dir)}", self.main)  # fmt: skip
            return "stop"
        return "epoch" if epoch_done else None

    def run_epoch(self) -> bool:
        """Train until the epoch ends, the run ends or ``stop_after``; True when stopped."""
        st = self.state
        batches = TimedBatches(self.loader())
        t_epoch = time.perf_counter()
        started = (st.items_seen, st.train_time)
        while st.batch_in_epoch + self.micro_batches(st.epoch, st.iteration) <= self.usable_batches:
            if st.iteration >= st.max_iters:
                break
            t_step = time.perf_counter()
            st.lr = st.current_lr()  # this iteration's rate
            st.step_batches = self.micro_batches(st.epoch, st.iteration)
            self.call("before_step")
            n_items = self.step(batches)
            st.items_seen += n_items
            st.train_time += time.perf_counter() - t_step
            if self.cfg.train.compile != "none" and st.iteration == st.start_iteration + 1:
                say(f"train.compile={self.cfg.train.compile}: the first step took "
                    f"{time.perf_counter() - t_step:.1f} s (compiling); the later steps and "
                    "epochs reuse the graphs", self.main)  # fmt: skip
            st.speed.update(n_items * self.info.world_size)
            if self.bar is not None:
                self.bar.update(1)
            outcome = self.after_step(t_epoch)
            if outcome == "epoch":
                self.tune_workers(batches.wait_s, *started)
            if outcome is not None:
                return outcome == "stop"
        return False

    def tune_workers(self, wait_s: float, items0: int, train_time0: float) -> None:
        """``train.workers: auto``: the next epoch's workers from this epoch's steps (hooks not
        counted); a change is one line of the log."""
        st, tuner = self.state, self.tuner
        if tuner is None or st.iteration >= st.max_iters:  # no next epoch to choose for
            return
        change = tuner.after_epoch(st.items_seen - items0, st.train_time - train_time0, wait_s,
                                   st.epoch)  # fmt: skip
        if change:  # each rank chooses its own count; the main process says its choice
            say(change, self.main)

    def fit(self) -> float:
        """Epochs of steps until the run ends or stops; returns the loop's time in seconds."""
        st = self.state
        if self.main:
            save_config(replace_config(self.cfg, **{"train.stop_after": 0}),
                        self.run_dir / "config.yaml")  # fmt: skip
        if self.progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=st.max_iters, initial=st.iteration, desc="train",
                            dynamic_ncols=True)  # fmt: skip
        set_train_mode(st.model, self.cfg.train.freeze_bn)
        st.start_iteration, st.step_epoch, st.lr = st.iteration, st.epoch, st.current_lr()
        st.events.step(st.iteration)
        self.last_batch = self.probe
        self.view = RunView(
            cfg=self.cfg, task=self.task, info=self.info, device=self.device, amp=self.amp,
            progress=self.progress, bar=self.bar, run_dir=self.run_dir, logger=self.logger,
            state=st, train_dataset=self.train_dataset, val_dataset=self.val_dataset,
            t_start=self.t_start, validate=self.validate, checkpoint=self.checkpoint,
        )  # fmt: skip
        self.call("before_train")
        t_loop = time.perf_counter()
        try:
            while st.iteration < st.max_iters and not st.stopped:
                st.stopped = self.run_epoch()
        finally:
            if self.bar is not None:
                self.bar.close()
        if not st.stopped and st.batch_in_epoch > 0:
            epoch_summary(self.view, st.epoch, t_loop, complete=False)  # the last, partial one
        return time.perf_counter() - t_loop

    def finish(self, loop_time: float) -> dict[str, Any]:
        """The hooks' ``after_train`` (final validation, ``final.pt``...), CSV, curves, summary."""
        st = self.state
        st.step_epoch = st.epoch
        self.call("after_train")
        self.logger.write_csv()
        png = self.logger.plot(self.cfg.model.num_classes) if not st.stopped else None
        du.barrier()
        c = st.counters
        skipped = du.all_reduce_sum(
            torch.tensor([c.total_skipped, c.total_empty_batches], dtype=torch.float64)
        ).tolist()
        records = self.logger.records() if self.main else []
        losses = [r["loss"] for r in records if r.get("kind") == "train" and r.get("loss")]
        world, ckpt = self.info.world_size, st.events.latest("checkpoint")
        summary = {
            "run_dir": str(self.run_dir), "iterations": st.iteration,
            "max_iters": st.max_iters, "epochs": st.epoch,
            "train_loss": losses[-1] if losses else None, "val": st.events.latest("val"),
            "checkpoint": str(ckpt) if ckpt is not None else None,
            "curves": str(png) if png is not None else None,
            "time_s": time.perf_counter() - self.t_start, "loop_time_s": loop_time,
            "items_per_s": st.items_seen * world / st.train_time if st.train_time else None,
            "skipped": int(skipped[0]), "empty_batches": int(skipped[1]),
            "stopped": st.stopped, "world_size": world, "interrupted": st.interrupted,
        }  # fmt: skip
        for name in st.events.names():  # the hooks' parts ("summary.block_health", ...)
            if name.startswith("summary."):
                summary[name.removeprefix("summary.")] = st.events.latest(name)
        if self.main:
            with atomic_path(self.run_dir / "summary.json") as tmp:
                tmp.write_text(json.dumps(jsonable(summary), indent=2))
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
        hooks: more :class:`~nlnet.engine.hooks.base.HookBase` hooks, called after the config's
            tools and logging, before validation and checkpointing.

    Returns:
        ``{"run_dir", "iterations", "epochs", "train_loss", "val" (metrics or None),
        "checkpoint", "time_s", "items_per_s", "skipped", "empty_batches", "stopped", ...}``.
    """
    cfg = absolute_paths(cfg)
    info = du.init_distributed(cfg.train.device)
    try:
        run = Run(cfg, info, get_task(cfg, collate_fn), hooks)
        run.check_dir(resume, force)  # nothing is written before the data and the model work
        run.build_data(train_dataset, val_dataset)
        run.build_state(model)
        lock = run.lock_dir(resume, force)
        try:
            run.restore(resume)
            with StopRequest(info.world_size > 1) as stop:
                run.stop_request = stop
                loop_time = run.fit()
                return run.finish(loop_time)
        finally:
            if lock is not None:
                lock.release()
    finally:
        du.cleanup(info)
