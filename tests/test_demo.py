"""``nlnet demo`` through the real command line: a quick smoke run and (slow) the full demo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_c2d_is_a_sum_over_frames_and_the_non_local_model_is_not():
    """The argument of docs/demo.md: C2D logits are additive over frames, so frame 0 and the
    last frame cannot interact; a spacetime non-local block makes them interact."""
    import torch

    import nlnet.models  # noqa: F401  (registers the tiny models)
    from nlnet.models.registry import create_model

    torch.manual_seed(0)
    a, b, c, d = (torch.randn(1, 3, 1, 32, 32) for _ in range(4))
    mid = torch.randn(1, 3, 2, 32, 32)

    def clip(first, last):
        return torch.cat([first, mid, last], dim=2)  # (1, 3, 4, 32, 32)

    for name, additive in (("c2d_tiny", True), ("c2d_tiny_nl1", False)):
        model = create_model(name, num_classes=3, width=4).eval()
        for m in model.modules():  # a trained-like block: gamma != 0
            if type(m).__name__.startswith("NonLocal"):
                torch.nn.init.ones_(m.norm.weight)
        with torch.no_grad():
            lhs = model(clip(a, b)) + model(clip(c, d))
            rhs = model(clip(a, d)) + model(clip(c, b))
        assert torch.allclose(lhs, rhs, atol=1e-5) == additive, name


def _run_demo(tmp_path: Path, *extra: str, timeout: int) -> dict:
    env = {**os.environ, "NLNET_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "nlnet", "demo", "--output-dir", str(tmp_path / "runs"),
           "--no-progress", *extra]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    for name in ("summary.json", "curves.png", "figure4.png", "attention.png"):
        assert (run_dir / name).is_file(), name
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "top-1" in proc.stdout and "c2d_tiny_nl1" in proc.stdout
    return {"summary": summary, "stdout": proc.stdout, "run_dir": run_dir}


def test_quick_demo_smoke_and_the_same_figures_with_jobs_side_by_side(tmp_path, monkeypatch):
    """A quick run through ``python -m nlnet`` with ``--threads 2``, the path of ``make demo``
    on two cores: the models train side by side in worker processes, one thread each
    (nlnet.engine.jobs); then the same command with one job, in this process: its weights and
    figures equal the side-by-side run's bit for bit."""
    import torch

    from nlnet.cli import main

    out = _run_demo(tmp_path, "--quick", "--threads", "2", timeout=300)
    s = out["summary"]
    assert s["quick"] is True and s["threads"] == 2
    assert set(s["results"]) >= {"c2d_tiny", "c2d_tiny_nl1"}
    for r in s["results"].values():
        assert 0.0 <= r["test_top1"] <= 1.0 and r["params"] > 0 and r["macs"] > 0
    assert (tmp_path / "cache").is_dir()  # the dataset went to the cache
    assert (out["run_dir"] / "c2d_tiny_nl1.pt").is_file()
    for log in s["curves"].values():  # Figure 4: several points per epoch, x in iterations
        steps = log["steps_per_epoch"]
        assert log["curve_iter"] == list(range(1, steps + 1)) and steps >= 3
        assert len(log["curve_train_top1"]) == len(log["curve_val_top1"]) == steps
    # the dataset the demo trained on is the cached one that a second run reuses (the reuse
    # itself is tested in tests/data/test_digits.py without a second demo run)
    from nlnet.data.digits.cache import prepare_digits
    from nlnet.demo.video import DemoSettings

    manifests = list((tmp_path / "cache").glob("*/manifest.json"))
    assert len(manifests) == 1
    stamp = manifests[0].stat().st_mtime_ns
    root = prepare_digits(DemoSettings.quick(0).task, manifests[0].parent)
    assert root == manifests[0].parent and Path(s["dataset"]).resolve() == root.resolve()
    assert manifests[0].stat().st_mtime_ns == stamp
    monkeypatch.setenv("NLNET_CACHE", str(tmp_path / "cache"))  # the same data: only jobs differ
    argv = ["demo", "--quick", "--threads", "1", "--output-dir", str(tmp_path / "one"),
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    (one_dir,) = (tmp_path / "one").iterdir()
    one = json.loads((one_dir / "summary.json").read_text())
    assert one["threads"] == 1
    for name, r in s["results"].items():
        assert one["results"][name]["test_top1"] == r["test_top1"], name
        a, b = (torch.load(d / f"{name}.pt", weights_only=False)["model"]
                for d in (one_dir, out["run_dir"]))  # fmt: skip
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


def test_jobs_run_inline_on_one_thread_and_deliver_errors():
    import torch

    from nlnet.engine.jobs import Jobs

    before = torch.get_num_threads()
    with Jobs(1) as jobs:
        assert not jobs.parallel
        assert jobs.submit(torch.get_num_threads).result() == 1
        failed = jobs.submit(int, "not a number")
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="not a number"):
        failed.result()
    with pytest.raises(ValueError, match="n: expected a positive number of jobs"):
        Jobs(0)


@pytest.mark.slow
def test_full_demo_meets_the_margin(tmp_path):
    """The default demo: the spacetime non-local model beats C2D by >= 20 points top-1."""
    s = _run_demo(tmp_path, timeout=1800)["summary"]
    res = s["results"]
    gap = res["c2d_tiny_nl1"]["test_top1"] - res["c2d_tiny"]["test_top1"]
    assert gap >= 0.20, s["table"]


def test_jobs_stop_the_other_workers_when_one_fails():
    """A failing job ends the ``with Jobs(...)`` block at once: the other workers are killed,
    not waited for."""
    import time

    from nlnet.engine.jobs import Jobs

    start = time.perf_counter()
    with pytest.raises(ValueError, match="not a number"):
        with Jobs(2) as jobs:
            jobs.submit(time.sleep, 120)
            jobs.submit(int, "not a number").result()
    assert time.perf_counter() - start < 60


# --------------------------------------------------------------------------------------------
# the seed table (docs/demo.md, Protocol)
# --------------------------------------------------------------------------------------------


def _recorded(seed: int, changes: tuple[str, ...] = (), task: str = "same") -> dict:
    """The settings a run of ``nlnet demo --task TASK --set CHANGE...`` of ``seed`` records."""
    from nlnet.cli import build_parser
    from nlnet.demo.video_run import _settings_of

    argv = ["--task", task] + [a for c in changes for a in ("--set", c)]
    args = build_parser("demo").parse_args(argv)
    return json.loads(json.dumps(_settings_of(args, list(changes))(seed)))


def _fake_run(root: Path, seed: int, c2d: float, nl: float, *, val: float = 0.5,
              stamp: str = "20261202-010000", quick: bool = False, task: str = "same",
              changes: tuple[str, ...] = ()) -> None:  # fmt: skip
    run = root / f"demo-{stamp}-seed{seed}"
    run.mkdir(parents=True)
    results = {"c2d_tiny_nl1": {"test_top1": nl, "val_top1": val},
               "c2d_tiny": {"test_top1": c2d, "val_top1": 1 - val}}  # fmt: skip
    settings = {"task": {"task": task}} if quick else _recorded(seed, changes, task)
    summary = {"seed": seed, "quick": quick, "settings": settings,
               "results": results, "total_time_s": 100.0 + seed, "cpu_time_s": 190.0 + 2 * seed}  # fmt: skip
    (run / "summary.json").write_text(json.dumps(summary))


def _table_rows(table: str) -> dict[str, list[str]]:
    rows = [line.strip("|").split("|") for line in table.splitlines() if line.startswith("| ")]
    return {r[0].strip(): [c.strip() for c in r[1:]] for r in rows[2:]}  # after the separator


def test_seed_table_rows_and_statistics_from_fabricated_runs(tmp_path):
    import statistics

    from nlnet.analysis.seeds import parse_seeds
    from nlnet.demo.seeds import collect_runs, seed_table

    assert parse_seeds("0-2,5,7-8") == [0, 1, 2, 5, 7, 8] and parse_seeds("3") == [3]
    for bad in ("a", "3-1", "-1", ""):
        with pytest.raises(ValueError, match="--seeds"):
            parse_seeds(bad)
    c2d, nl = [0.50, 0.48, 0.55], [0.95, 0.90, 0.99]
    for seed in range(3):
        _fake_run(tmp_path, seed, c2d[seed], nl[seed], val=0.6 + 0.1 * seed)
    _fake_run(tmp_path, 1, 0.1, 0.1, stamp="20261201-000000")  # older: not taken
    _fake_run(tmp_path, 2, 0.1, 0.1, stamp="20261203-000000", quick=True)  # another setting
    runs = collect_runs(tmp_path, [0, 1, 2], quick=False, task="same")
    rows = _table_rows(seed_table(runs, "test"))
    assert list(rows) == ["0", "1", "2", "mean", "std", "min"]
    assert rows["1"][:3] == ["48.0", "90.0", "+42.0"]  # C2D, NL, gap
    gaps = [100 * (n - c) for n, c in zip(nl, c2d)]
    assert rows["mean"][0] == f"{100 * statistics.fmean(c2d):.1f}"
    assert rows["std"][1] == f"{100 * statistics.stdev(nl):.1f}"
    assert rows["min"][1] == "90.0" and rows["min"][0] == "48.0"
    assert rows["mean"][2] == f"{statistics.fmean(gaps):+.1f}"
    assert rows["min"][2] == f"{min(gaps):+.1f}"
    assert rows["2"][3:] == ["102 s", "194 s"] and rows["mean"][3] == "101 s"
    # validation figures only in the screening table
    val = seed_table(runs, "val")
    vrows = _table_rows(val)
    assert vrows["0"][:2] == ["40.0", "60.0"] and "test" not in val.splitlines()[0]
    assert vrows["std"][1] == f"{statistics.stdev([60.0, 70.0, 80.0]):.1f}"
    with pytest.raises(ValueError, match="seed\\(s\\) \\[3\\]"):
        collect_runs(tmp_path, [0, 3], quick=False, task="same")
    # the failure count under the table: the bar NL >= 90 and C2D <= 60 (seed 1 is at 90.0)
    assert seed_table(runs, "test").endswith(
        "failures (c2d_tiny_nl1 >= 90% and c2d_tiny <= 60% not met): 0 of 3 seeds; 95% interval "
        "of the failure rate (exact binomial) 0.0-70.8%"
    )
    assert "3 of 3 seeds: seed(s) 0, 1, 2;" in val  # NL 60.0, 70.0 and 80.0 < 90


def test_report_matches_runs_by_their_recipe_however_spelled(tmp_path):
    """A run with ``--set epochs=E`` (E the default) is a run of the default recipe; a run with
    another value is not."""
    from nlnet.demo.seeds import collect_runs
    from nlnet.demo.video import DemoSettings
    from nlnet.demo.video_run import _settings_of

    same = f"epochs={DemoSettings.default().epochs}"
    other = f"epochs={DemoSettings.default().epochs + 1}"
    _fake_run(tmp_path, 0, 0.5, 0.95, changes=(same,))
    _fake_run(tmp_path, 0, 0.5, 0.10, stamp="20261203-000000", changes=(other,))  # newer
    from nlnet.cli import build_parser

    args = build_parser("demo").parse_args([])
    runs = collect_runs(tmp_path, [0], quick=False, task="same", settings_of=_settings_of(args, []))
    assert runs[0]["results"]["c2d_tiny_nl1"]["test_top1"] == 0.95
    newer = collect_runs(tmp_path, [0], quick=False, task="same",
                         settings_of=_settings_of(args, [other]))  # fmt: skip
    assert newer[0]["results"]["c2d_tiny_nl1"]["test_top1"] == 0.10
    with pytest.raises(ValueError, match="epochs=9"):
        collect_runs(tmp_path, [0], quick=False, task="same",
                     settings_of=_settings_of(args, ["epochs=9"]), changes=["epochs=9"])  # fmt: skip


def test_perturbation_agreement_table(tmp_path, capsys):
    """``--report --perturb KEY=VALUE``: each seed's pass/fail without and with the change."""
    from nlnet.cli import main

    for seed, (a, b) in enumerate(((0.95, 0.97), (0.91, 0.85), (0.5, 0.52))):
        _fake_run(tmp_path, seed, 0.5, 0.5, val=a)
        _fake_run(tmp_path, seed, 0.5, 0.5, val=b, stamp="20261202-020000",
                  changes=("init_noise=1e-6",))  # fmt: skip
    argv = ["demo", "--seeds", "0-2", "--split", "val", "--report", "--output-dir", str(tmp_path),
            "--perturb", "init_noise=1e-6"]  # fmt: skip
    assert main(argv) == 0
    text = (tmp_path / "demo-seeds-same-val-agreement.md").read_text()
    rows = _table_rows(text)
    assert rows["0"] == ["95.0", "97.0", "pass / pass", "yes"]
    assert rows["1"] == ["91.0", "85.0", "pass / FAIL", "NO"]
    assert rows["2"][2:] == ["FAIL / FAIL", "yes"]
    assert "the same pass/fail on 2 of 3 seeds" in text
    capsys.readouterr()
    assert main(["demo", "--perturb", "init_noise=1e-6"]) == 2
    assert "--perturb: needs --seeds and --report" in capsys.readouterr().err


def test_seed_table_of_one_seed_has_no_std_and_old_runs_no_cpu(tmp_path):
    from nlnet.demo.seeds import seed_table

    summary = {"results": {"c2d_tiny": {"test_top1": 0.5}, "c2d_tiny_nl1": {"test_top1": 0.9}},
               "total_time_s": 100.0}  # fmt: skip
    rows = _table_rows(seed_table({0: summary}))
    assert rows["std"] == ["–"] * 5 and rows["0"][4] == "–" and rows["mean"][1] == "90.0"


def test_seeds_command_runs_each_seed_and_reports_the_table(tmp_path, monkeypatch, capsys):
    """``nlnet demo --quick --seeds 0-1`` end to end; ``--report`` writes the same table from the
    two runs; the screening seeds' test figures are refused (one line, exit code 2)."""
    from nlnet.cli import main

    monkeypatch.setenv("NLNET_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "runs"
    base = ["demo", "--quick", "--threads", "1", "--no-progress", "--output-dir", str(out)]
    assert main([*base, "--seeds", "0-1"]) == 0
    table_path = out / "demo-seeds-same-test.md"
    table = table_path.read_text()
    rows = _table_rows(table)
    assert list(rows) == ["0", "1", "mean", "std", "min"]
    runs = sorted(out.glob("demo-*-seed*/summary.json"))
    assert len(runs) == 2
    first = json.loads(runs[0].read_text())
    assert rows["0"][1] == f"{100 * first['results']['c2d_tiny_nl1']['test_top1']:.1f}"
    assert first["cpu_time_s"] > 0
    table_path.unlink()
    assert main([*base, "--seeds", "0-1", "--report"]) == 0
    assert table_path.read_text() == table
    assert main([*base, "--seeds", "0-1", "--report", "--split", "val"]) == 0
    val_rows = _table_rows((out / "demo-seeds-same-val.md").read_text())
    assert val_rows["0"][1] == f"{100 * first['results']['c2d_tiny_nl1']['val_top1']:.1f}"
    capsys.readouterr()
    assert main([*base, "--seeds", "99-101", "--report"]) == 2
    err = capsys.readouterr().err
    assert "[100, 101] are screening seeds" in err and "Traceback" not in err
    assert main([*base, "--seeds", "100", "--report", "--split", "val"]) == 2
    assert "no quick 'same' run of seed(s) [100]" in capsys.readouterr().err
    # a screened recipe change is its own set of runs: not mixed with the runs without it
    assert main([*base, "--seeds", "0", "--report", "--set", "epochs=2"]) == 2
    assert "no quick 'same' --set epochs=2 run of seed(s) [0]" in capsys.readouterr().err


def test_recipe_overrides_are_typed_and_bad_ones_are_one_line(capsys):
    """``--set KEY=VALUE`` changes one field of the settings (``task.KEY``: of the task), read as
    YAML and checked against the field's type; a mistake is one line and exit code 2."""
    from nlnet.cli import main
    from nlnet.demo.video import DemoSettings

    s = DemoSettings.default(3)
    changed = s.override("lr=3e-3").override("task.num_train=8000").override("epochs=6")
    assert (changed.lr, changed.task.num_train, changed.epochs) == (3e-3, 8000, 6)
    assert changed.task.seed == 3 and s.lr == 2e-3  # a copy; the seed is not a recipe setting
    assert s.override("task.digits=[0, 1, 2]").task.digits == (0, 1, 2)
    assert s.override("models=[c2d_tiny_res1]").models == ("c2d_tiny_res1",)
    for item, message in (("lr", "expected KEY=VALUE"), ("foo=1", "unknown key 'foo'"),
                          ("models=[nope]", "unknown model 'nope'"),
                          ("epochs=2.5", "expected int"), ("task.seed=1", "unknown key"),
                          ("task.num_frames=1", "num_frames must be >= 2")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            s.override(item)
    for args, message in ((["--set", "epochs=x"], "--set epochs=x: expected int"),
                          (["--split", "val"], "--split: needs --seeds"),
                          (["--task", "unet", "--set", "lr=x"], "--set lr=x: expected float")):  # fmt: skip
        capsys.readouterr()
        assert main(["demo", "--quick", "--threads", "1", *args]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


# --------------------------------------------------------------------------------------------
# the paper's controls (Sec. 4.1) and Figure 4
# --------------------------------------------------------------------------------------------


def test_residual_control_sits_where_the_block_does_with_about_its_parameters():
    import nlnet.models  # noqa: F401  (registers the tiny models)
    from nlnet.models.registry import create_model
    from nlnet.models.video.tiny import ResidualControl3d

    nl, res = (create_model(n, num_classes=2, width=8) for n in ("c2d_tiny_nl1", "c2d_tiny_res1"))
    nl_slots = {n for n, m in nl.named_modules() if n.endswith("non_local") and m is not None}
    res_slots = {n: m for n, m in res.named_modules() if isinstance(m, ResidualControl3d)}
    assert nl_slots == set(res_slots) == {"layer3.1.non_local"}
    block_nl = sum(p.numel() for p in nl.get_submodule("layer3.1.non_local").parameters())
    block_res = sum(p.numel() for p in res_slots["layer3.1.non_local"].parameters())
    assert abs(block_res - block_nl) <= 0.1 * block_nl, (block_res, block_nl)
    count = [sum(p.numel() for p in m.parameters()) for m in (nl, res)]
    assert abs(count[1] - count[0]) <= 0.1 * count[0], count
    assert res_slots["layer3.1.non_local"].conv_b.kernel_size == (1, 3, 3)


def test_order_task_is_invisible_to_c2d_and_non_local_but_not_to_the_time_model():
    """Reversing the frames leaves the logits of C2D and of C2D + a non-local block unchanged
    (both are symmetric in the frames), so the order task is at chance for them in principle;
    the temporal control's logits change."""
    import torch

    import nlnet.models  # noqa: F401  (registers the tiny models)
    from nlnet.data.digits.video import DigitsTaskConfig, generate_split
    from nlnet.demo.video import TIME_MODEL
    from nlnet.models.registry import create_model

    torch.manual_seed(0)
    x = torch.randn(3, 3, 4, 32, 32)
    for name, sees_order in (("c2d_tiny", False), ("c2d_tiny_nl1", False), (TIME_MODEL, True)):
        model = create_model(name, num_classes=2, width=4).eval()
        for m in model.modules():  # trained-like blocks: their last BN is not zero
            if isinstance(m, torch.nn.BatchNorm3d):
                torch.nn.init.uniform_(m.weight, 0.5, 1.5)
        torch.nn.init.normal_(model.fc.weight)  # logits of order 1 (not 0.01)
        with torch.no_grad():
            same = torch.allclose(model(x), model(x.flip(2)), atol=1e-5)
        assert same != sees_order, name
    # the data: the boxed white cue is in frame 0 (label 0) or in the last frame (label 1)
    cfg = DigitsTaskConfig(task="order", num_train=12, num_val=0, num_test=0, seed=3)
    split = generate_split(cfg, "train")
    assert sorted(split.labels.tolist()) == [0] * 6 + [1] * 6 and cfg.num_classes == 2
    for clip, label in zip(split.clips, split.labels):
        white = (clip.min(axis=-1) > 200).reshape(len(clip), -1).sum(1)  # white pixels per frame
        assert (white[0] > white[-1]) == (label == 0)


def test_c2d_kernels_inflate_to_temporal_ones_with_the_same_response_on_a_static_clip():
    """A C2D's ``1 x k x k`` kernels inflate like 2D ones (the demo's pre-trained backbone to an
    I3D): each of the ``t`` planes is the kernel divided by ``t``."""
    import torch

    from nlnet.models.inflate import inflate_state_dict

    conv2d = torch.nn.Conv3d(2, 3, (1, 3, 3), padding=(0, 1, 1), bias=False)
    conv3d = torch.nn.Conv3d(2, 3, (3, 3, 3), padding=(1, 1, 1), bias=False)
    state, report = inflate_state_dict({"weight": conv2d.weight.detach()}, conv3d)
    assert report.converted["inflated"] == ["weight"]
    assert torch.equal(state["weight"], conv2d.weight.detach().repeat(1, 1, 3, 1, 1) / 3)
    conv3d.weight.data.copy_(state["weight"])
    frame = torch.randn(1, 2, 1, 8, 8)
    static = frame.expand(1, 2, 5, 8, 8)
    with torch.no_grad():  # inner frames (away from the zero padding in time): the 2D response
        assert torch.allclose(conv3d(static)[:, :, 1:-1], conv2d(static)[:, :, 1:-1], atol=1e-5)


def test_figure4_points_leave_the_training_unchanged():
    """Extra mid-epoch measurements (Figure 4) restore the random state: the weights equal
    those of a run measured once per epoch; the curve has the asked points per epoch."""
    import dataclasses

    import torch

    from nlnet.demo.video import DemoSettings, train_model

    settings = DemoSettings.quick(0)
    settings.task = dataclasses.replace(settings.task, num_frames=2)
    torch.manual_seed(1)
    data = {s: (torch.randn(n, 3, 2, 32, 32), torch.arange(n) % 2)
            for s, n in (("train", 48), ("val", 8))}  # fmt: skip
    runs = {}
    for points in (1, 3):
        s = dataclasses.replace(settings, curve_points_per_epoch=points, epochs=2)
        runs[points] = train_model("c2d_tiny_nl1", s, data, torch.device("cpu"), 0, False)
    (m1, log1), (m3, log3) = runs[1], runs[3]
    assert log3["steps_per_epoch"] == 3 and log3["curve_iter"] == [1, 2, 3, 4, 5, 6]
    assert log1["curve_iter"] == [3, 6]
    assert log3["curve_val_top1"][-1] == pytest.approx(log3["val_top1"][-1])
    a, b = m1.state_dict(), m3.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_controls_start_from_the_2d_backbone_like_the_non_local_model():
    """The residual and temporal controls load the pre-trained backbone (their ``non_local``
    slot keeps its own initialisation, as the non-local block does)."""
    import torch

    from nlnet.demo.video import TIME_MODEL, DemoSettings, build_model

    settings = DemoSettings.quick(0)
    backbone = build_model("c2d_tiny", settings).state_dict()
    backbone = {k: torch.randn_like(v) if v.is_floating_point() else v
                for k, v in backbone.items() if not k.startswith("fc.")}  # fmt: skip
    for name in ("c2d_tiny_res1", TIME_MODEL):
        state = build_model(name, settings, backbone).state_dict()
        assert all(torch.equal(state[k], v) for k, v in backbone.items()), name
        assert any(".non_local." in k for k in state), name


def test_pretraining_is_reused_bit_for_bit_and_perturbation_and_block_options_apply(tmp_path):
    """The 2D pre-training of a seed is kept and reused (the same weights a fresh run gives);
    ``init_noise`` perturbs every initial weight by seeded noise of that size; ``block`` and
    ``block_lr_mult`` reach the non-local models only (docs/demo.md, Protocol)."""
    import torch

    from nlnet.demo.pretrain import cached_pretrain_2d
    from nlnet.demo.video import DemoSettings, build_model, demo_config

    torch.set_num_threads(1)
    settings = DemoSettings.quick(5)
    cpu = torch.device("cpu")
    first, log = cached_pretrain_2d(settings, cpu, 5, None, tmp_path)
    again, log2 = cached_pretrain_2d(settings, cpu, 5, None, tmp_path)
    assert "reused" not in log and log2["reused"].startswith(str(tmp_path))
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)
    other, log3 = cached_pretrain_2d(settings.override("pretrain_lr=1e-3"), cpu, 5, None, tmp_path)
    assert "reused" not in log3 and not torch.equal(other["conv1.weight"], first["conv1.weight"])

    def built(s: DemoSettings) -> torch.nn.Module:
        torch.manual_seed(0)  # the block's own initialisation
        return build_model("c2d_tiny_nl1", s, first)

    plain = built(settings)
    noisy = [built(settings.override("init_noise=1e-6")) for _ in range(2)]
    for (name, p), q, r in zip(plain.named_parameters(), *(m.parameters() for m in noisy)):
        assert torch.equal(q, r), name  # seeded: the same perturbation each time
        assert 0 < (q - p).abs().max() < 1e-5, name
    opened = settings.override("block={gamma_init: 0.1}").override("block_lr_mult=10.0")
    assert build_model("c2d_tiny_nl1", opened).layer3[1].non_local.norm.weight[0] == 0.1
    build_model("c2d_tiny", opened)  # the baseline has no block: the options do not reach it
    for name, mult in (("c2d_tiny_nl1", 10.0), ("c2d_tiny", 1.0)):
        cfg = demo_config(opened, name, tmp_path, num_classes=2, epochs=1, batch_size=4, lr=1e-3,
                          schedule="onecycle", seed=0, device=cpu, progress=False, num_frames=4)  # fmt: skip
        assert cfg.optim.non_local_lr_mult == mult


def test_prepare_fills_the_cache_of_screening_seeds_and_a_run_reuses_it(tmp_path, monkeypatch):
    """``--seeds 100 --prepare`` (a screening seed: no figures, so no split to refuse) writes
    the clips and the 2D pre-training; the seed's run then reuses the pre-training."""
    from nlnet.cli import main

    monkeypatch.setenv("NLNET_CACHE", str(tmp_path / "cache"))
    base = ["demo", "--quick", "--threads", "1", "--no-progress", "--output-dir", str(tmp_path)]
    assert main([*base, "--seeds", "100", "--prepare"]) == 0
    assert len(list((tmp_path / "cache" / "pretrain-2d").glob("*.pt"))) == 1
    assert len(list((tmp_path / "cache").glob("digits-*/manifest.json"))) == 1
    assert not list(tmp_path.glob("demo-*"))  # nothing trained, no run directory
    assert main([*base, "--seeds", "100", "--split", "val", "--set", "models=[c2d_tiny_nl1]"]) == 0
    (summary,) = tmp_path.glob("demo-*-seed100/summary.json")
    assert json.loads(summary.read_text())["pretrain"]["reused"]


def test_an_interrupted_training_leaves_no_seed_figure(tmp_path, monkeypatch, capsys):
    """SIGTERM during a model's training (the engine saves and stops early): the demo stops
    (exit 130) and writes no ``summary.json``, so ``--report`` cannot take a cut-short run."""
    import nlnet.engine.loop as loop
    from nlnet.cli import main

    real = loop.train

    def stopped_early(cfg, **kwargs):  # the video models: what train() returns after a SIGTERM
        if "hooks" not in kwargs:  # the 2D pre-training (no curve hook) runs as it is
            return real(cfg, **kwargs)
        return {"interrupted": True, "iterations": 3, "loop_time_s": 1.0, "checkpoint": None}

    monkeypatch.setattr(loop, "train", stopped_early)
    monkeypatch.setenv("NLNET_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "runs"
    argv = ["demo", "--quick", "--threads", "1", "--no-progress", "--output-dir", str(out)]
    assert main(argv) == 130
    assert "interrupted" in capsys.readouterr().err
    assert not list(out.glob("demo-*/summary.json"))
