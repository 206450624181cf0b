"""Setting up a training run: :class:`RunSetup`, the first half of :class:`nlnet.engine.loop.Run`.

Before the first step (:mod:`nlnet.engine.loop` has the order): refuse a used run directory and
lock it, build the task's datasets (``model.num_classes`` inferred or checked) and the resumable
sampler, build the model, optimizer and schedule of Sec. 4.1 of Wang et al., CVPR 2018 (the same
initial weights on every rank), restore a checkpoint for ``--resume``, and write checkpoints.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from nlnet.engine import distributed as du
from nlnet.engine.checkpoint import (
    check_compatible,
    load_checkpoint,
    load_model_weights,
    save_checkpoint,
)
from nlnet.engine.config import Config, config_to_dict
from nlnet.engine.config import replace as replace_config
from nlnet.engine.errors import CheckpointError, DataError
from nlnet.engine.hooks import HookBase
from nlnet.engine.modeling import (
    build_model,
    freeze_batchnorm,
    init_from_pretrained,
    model_options,
    pretrained_keys,
    trained_non_local,
)
from nlnet.engine.optim import build_optimizer, build_scheduler
from nlnet.engine.rundir import RunLock, check_run_dir, clear_previous_run
from nlnet.engine.runlog import MetricsLogger, say, use_progress_bar
from nlnet.engine.seeding import (
    SeededDataset,
    resolve_resume,
    seed_all,
)
from nlnet.engine.state import Counters, TrainState
from nlnet.engine.stop import StopRequest
from nlnet.engine.tasks import Task
from nlnet.engine.tools import build_hooks


class RunSetup:
    """The set-up half of :class:`~nlnet.engine.loop.Run`: directory, data, state, resume,
    and the records a checkpoint holds."""

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
            train_dataset = self.task.build_dataset(tc.split, "train")
        if val_dataset is None and tc.val_split:
            val_dataset = self.task.build_dataset(tc.val_split, "test")
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
        setup = getattr(self.task, "setup", None)  # optional: the final class count
        if setup is not None:
            setup(cfg.model.num_classes)
        self.meta = self.task.metadata(train_dataset)
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
