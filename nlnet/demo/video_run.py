"""``nlnet demo`` (the video task): options -> settings, data, training of every model, report.

What it does and writes: :mod:`nlnet.demo.video`; the figures and the table:
:mod:`nlnet.demo.video_report`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

from nlnet.analysis.curves import plot_curves, plot_figure4
from nlnet.data.digits.cache import default_cache_dir, prepare_digits, read_manifest
from nlnet.data.digits.decoded import clear_decoded, decoded_splits
from nlnet.demo.pretrain import cached_pretrain_2d
from nlnet.demo.video import (
    TASK_TEXT,
    TIME_MODEL,
    VARIANT_MODELS,
    DemoSettings,
    model_options,
    train_job,
)
from nlnet.demo.video_report import attention_outputs, results_table
from nlnet.engine.jobs import Jobs, jobs_for, write_summary
from nlnet.models import create_model

__all__ = [
    "cpu_seconds",
    "overrides_of",
    "run_demo",
    "run_seeds",
    "settings_from_args",
    "train_all",
]


def overrides_of(args: argparse.Namespace) -> list[str]:
    """The ``--set KEY=VALUE`` recipe changes of the options, in their order (none: ``[]``)."""
    return list(getattr(args, "overrides", None) or ())


def settings_from_args(args: argparse.Namespace) -> DemoSettings:
    """The :class:`DemoSettings` of the command-line options (a bad option is a UserError)."""
    from nlnet.engine.errors import UserError

    settings = DemoSettings.quick(args.seed) if args.quick else DemoSettings.default(args.seed)
    task_name = getattr(args, "task", "same")
    if task_name != settings.task.task:
        settings.task = dataclasses.replace(settings.task, task=task_name)
    if task_name == "order":  # the order control: C2D + NL is blind to it, TIME_MODEL is not
        settings.models = (*settings.models, TIME_MODEL)
    if args.variants:
        settings.models = (*settings.models, *VARIANT_MODELS)
    if args.epochs is not None:
        if args.epochs < 1:
            raise UserError(f"--epochs: expected a positive integer, got {args.epochs}")
        settings.epochs = args.epochs
    for item in overrides_of(args):
        try:
            settings = settings.override(item)
        except ValueError as exc:
            raise UserError(f"--set {item}: {exc}") from None
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: CUDA is not available on this machine")
    return settings


def recorded_settings(settings: DemoSettings) -> dict[str, Any]:
    """The settings as ``summary.json`` records them (the task's as its ``to_dict``)."""
    fields = {k: v for k, v in dataclasses.asdict(settings).items() if k != "task"}
    return {**fields, "task": settings.task.to_dict()}


def _settings_of(args: argparse.Namespace, overrides: list[str]) -> Any:
    """Seed -> the settings a run of these options with ``--set overrides`` records."""

    def settings_of(seed: int) -> dict[str, Any]:
        seed_args = argparse.Namespace(**{**vars(args), "seed": seed, "overrides": overrides})
        return recorded_settings(settings_from_args(seed_args))

    return settings_of


def train_all(
    settings: DemoSettings,
    root: Path,
    device: torch.device,
    seed: int,
    init: dict[str, torch.Tensor] | None,
    run_dir: Path,
    class_names: list[str],
    jobs: Jobs,
    split: str = "test",
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], dict[str, torch.nn.Module]]:
    """Train every model of ``settings`` from the same initialisation, side by side as ``jobs``
    (:func:`nlnet.demo.video.train_job`); test top-1 and cost. The figure printed is that of
    ``split`` (``val`` on a screening seed, whose test figures are never shown)."""
    from nlnet.analysis.cost import model_cost

    task = settings.task
    futures = {
        name: jobs.submit(train_job, name, settings, root, device, seed, init, run_dir, class_names)
        for name in settings.models
    }
    results: dict[str, dict[str, Any]] = {}
    logs: dict[str, dict[str, Any]] = {}
    models: dict[str, torch.nn.Module] = {}
    for name, future in futures.items():
        out = future.result()
        model = create_model(name, weights=out["state"], **model_options(name, settings))
        log = out["log"]
        cost = model_cost(
            name,
            (task.num_frames, task.size, task.size),
            num_classes=task.num_classes,
            width=settings.width,
        )
        results[name] = {
            "params": cost.params,
            "macs": cost.macs,
            "test_top1": out["test_top1"],
            "val_top1": log["val_top1"][-1],
            "train_time_s": log["train_time_s"],
            "block_health": log.get("block_health"),
        }
        logs[name] = log
        models[name] = model.to(device).eval()
        shutil.copyfile(log["checkpoint"], run_dir / f"{name}.pt")  # for nlnet visualize
        print(
            f"{name}: {split} top-1 {100 * results[name][f'{split}_top1']:.1f}% "
            f"({log['train_time_s']:.0f}s)",
            flush=True,
        )
    return results, logs, models


def data_and_backbone(
    settings: DemoSettings, args: argparse.Namespace, run_dir: Path, pool: Jobs
) -> tuple[Path, dict[str, Any], float, dict[str, torch.Tensor] | None, dict[str, Any] | None]:
    """The clips (written, decoded) while the 2D pre-training runs as a job.

    Returns:
        ``(root, decoded splits, data seconds, backbone state or None, pre-training log or None)``.
    """
    task, device, progress = settings.task, torch.device(args.device), not args.no_progress
    pre = None
    cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    if settings.pretrain_frames > 0 and settings.pretrain_epochs > 0:
        pre = pool.submit(cached_pretrain_2d, settings, device, args.seed, run_dir, cache)
    t0 = time.perf_counter()
    root = prepare_digits(task, cache / f"digits-{task.fingerprint()}", progress=progress)
    data = decoded_splits(root, task, progress)
    data_time = time.perf_counter() - t0
    sizes = " / ".join(f"{len(data[s][0])} {s}" for s in ("train", "val", "test"))
    print(f"data: {root} ({sizes} clips, {data_time:.0f}s)", flush=True)
    init, pre_log = pre.result() if pre is not None else (None, None)
    if pre_log is not None:
        print(
            f"2D pre-training: {pre_log['frames']} frames x {pre_log['epochs']} epochs, "
            f"top-1 {100 * pre_log['train_top1']:.0f}% ({pre_log['time_s']:.0f}s"
            + (", reused" if pre_log.get("reused") else "")
            + ")",
            flush=True,
        )
    return root, data, data_time, init, pre_log


def cpu_seconds() -> float:
    """User + system CPU time of this process and of its finished children (the job workers)."""
    try:
        import resource
    except ImportError:  # not on Windows
        return float("nan")
    return sum(
        u.ru_utime + u.ru_stime
        for u in (resource.getrusage(resource.RUSAGE_SELF),
                  resource.getrusage(resource.RUSAGE_CHILDREN))
    )  # fmt: skip


def run_demo(args: argparse.Namespace) -> dict[str, Any]:
    """Run the demo; returns the summary that is also written to ``summary.json``.

    Every job (2D pre-training, each model) has one PyTorch thread; ``--threads`` jobs run side by
    side (:class:`nlnet.engine.jobs.Jobs`), so the figures are the same on any machine.
    """
    t_start, cpu_start = time.perf_counter(), cpu_seconds()
    settings = settings_from_args(args)
    split = getattr(args, "split", "test")
    device = torch.device(args.device)
    jobs = jobs_for(args.threads) if device.type == "cpu" else 1
    torch.set_num_threads(1)
    run_dir = Path(args.output_dir) / f"demo-{time.strftime('%Y%m%d-%H%M%S')}-seed{args.seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    task = settings.task
    print(
        f"nlnet demo: seed {args.seed}, {jobs} job(s) of one thread, device {device}, run dir "
        f"{run_dir}\ntask ({task.task}): {task.num_frames} frames of {task.size}x{task.size}; "
        f"{TASK_TEXT[task.task]} ({task.num_classes} classes, chance "
        f"{100 / task.num_classes:.0f}%)",
        flush=True,
    )
    with Jobs(min(jobs, len(settings.models))) as pool:
        root, data, data_time, init, pre_log = data_and_backbone(settings, args, run_dir, pool)
        manifest = read_manifest(root)
        results, logs, models = train_all(
            settings, root, device, args.seed, init, run_dir, manifest["classes"], pool, split
        )
    plot_curves(logs, run_dir / "curves.png")
    plot_figure4(logs, run_dir / "figure4.png")
    attention_stats, attn_stats = attention_outputs(
        settings, models, data, manifest, root, run_dir, device
    )
    table = results_table(results, split)
    total = time.perf_counter() - t_start
    print("\n" + table + f"\n\ntotal wall time {total:.0f}s; outputs in {run_dir}", flush=True)
    summary = {
        "seed": args.seed,
        "quick": bool(args.quick),
        "overrides": overrides_of(args),
        "device": str(device),
        "threads": jobs,
        "settings": recorded_settings(settings),
        "dataset": str(root),
        "class_names": manifest["classes"],
        "data_time_s": data_time,
        "pretrain": pre_log,
        "results": results,
        "curves": logs,
        "attention_figure": attention_stats,
        "attention_statistics": attn_stats,
        "table": table,
        "total_time_s": total,
        "cpu_time_s": cpu_seconds() - cpu_start,
        "platform": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "machine": platform.machine(), "cpus": os.cpu_count()},
    }  # fmt: skip
    return write_summary(run_dir, summary)  # with the load average at the end


def run_seeds(args: argparse.Namespace) -> str:
    """``nlnet demo --seeds A-B [--report] [--split val]``: run the demo on every seed (or, with
    ``--report``, take each seed's newest run in ``--output-dir``) and write the seed table
    (:func:`nlnet.demo.seeds.seed_table`) to ``<output-dir>/demo-seeds-<task>-<split>.md``.

    Test figures of the screening seeds are refused: they are never reported (docs/demo.md).
    """
    from nlnet.analysis.seeds import parse_seeds
    from nlnet.demo.seeds import check_seeds, collect_runs, seed_table
    from nlnet.engine.errors import UserError

    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    split, task = getattr(args, "split", "test"), getattr(args, "task", "same")
    if getattr(args, "prepare", False):  # data and pre-training only: no figure of any split
        return _prepare(args, seeds)
    try:
        check_seeds(seeds, split)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    out = Path(args.output_dir)
    if getattr(args, "perturb", None):
        return _agreement(args, seeds, split, task, out)
    if args.report:
        try:
            summaries = collect_runs(out, seeds, quick=bool(args.quick), task=task,
                                     settings_of=_settings_of(args, overrides_of(args)),
                                     changes=overrides_of(args))  # fmt: skip
        except ValueError as exc:
            raise UserError(str(exc)) from None
    else:
        summaries = {}
        for seed in seeds:
            summaries[seed] = run_demo(argparse.Namespace(**{**vars(args), "seed": seed}))
            clear_decoded()  # one seed's clips at a time in memory
    what = "validation (screening)" if split == "val" else "test"
    changed = "".join(f" --set {o}" for o in overrides_of(args))
    table = (
        f"`nlnet demo{' --quick' if args.quick else ''} --task {task}{changed}`, seeds "
        f"{args.seeds}: "
        f"{what} top-1 (%), wall and CPU seconds per seed\n\n{seed_table(summaries, split)}\n"
    )
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"demo-seeds-{task}-{split}.md"
    path.write_text(table)
    print(f"\n{table}\nwritten to {path}", flush=True)
    return table


def _agreement(args: argparse.Namespace, seeds: list[int], split: str, task: str, out: Path) -> str:
    """``--report --perturb KEY=VALUE``: each seed's pass/fail without and with the change
    (:func:`nlnet.demo.seeds.agreement_table`), written beside the seed tables."""
    from nlnet.demo.seeds import agreement_table, collect_runs
    from nlnet.engine.errors import UserError

    if not args.report:
        raise UserError("--perturb: needs --report (run the perturbed seeds with --set first)")
    base = overrides_of(args)
    try:
        runs = [collect_runs(out, seeds, quick=bool(args.quick), task=task,
                             settings_of=_settings_of(args, o), changes=o)
                for o in (base, [*base, args.perturb])]  # fmt: skip
    except ValueError as exc:
        raise UserError(str(exc)) from None
    changed = "".join(f" --set {o}" for o in base)
    text = (f"`nlnet demo --task {task}{changed}`, seeds {args.seeds}, {split}: pass/fail without "
            f"and with --set {args.perturb}\n\n{agreement_table(*runs, split, args.perturb)}\n")  # fmt: skip
    path = out / f"demo-seeds-{task}-{split}-agreement.md"
    path.write_text(text)
    print(f"\n{text}\nwritten to {path}", flush=True)
    return text


def _prepare(args: argparse.Namespace, seeds: list[int]) -> str:
    """``--seeds ... --prepare``: each seed's clips (written and decoded) and 2D pre-training in
    the cache (:func:`data_and_backbone`), no training: a later run of the seed, with any
    change of the video training, reuses both."""
    import tempfile

    jobs = jobs_for(args.threads) if torch.device(args.device).type == "cpu" else 1
    for seed in seeds:
        seed_args = argparse.Namespace(**{**vars(args), "seed": seed})
        settings = settings_from_args(seed_args)
        with tempfile.TemporaryDirectory() as tmp, Jobs(min(jobs, 2)) as pool:
            data_and_backbone(settings, seed_args, Path(tmp), pool)
        clear_decoded()
    text = f"prepared seeds {args.seeds}"
    print(text, flush=True)
    return text
