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

    import nlnet.demo.models  # noqa: F401
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
    for name in ("summary.json", "curves.png", "attention.png"):
        assert (run_dir / name).is_file(), name
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "top-1" in proc.stdout and "c2d_tiny_nl1" in proc.stdout
    return {"summary": summary, "stdout": proc.stdout, "run_dir": run_dir}


def test_quick_demo_smoke_and_the_same_figures_with_jobs_side_by_side(tmp_path):
    """A quick run with one job; then ``--threads 2``, which trains the models side by side in
    worker processes, one thread each (nlnet.demo.jobs): its weights and figures equal the
    one-job run's bit for bit."""
    import torch

    out = _run_demo(tmp_path, "--quick", "--threads", "1", timeout=300)
    s = out["summary"]
    assert s["quick"] is True
    assert set(s["results"]) >= {"c2d_tiny", "c2d_tiny_nl1"}
    for r in s["results"].values():
        assert 0.0 <= r["test_top1"] <= 1.0 and r["params"] > 0 and r["macs"] > 0
    assert (tmp_path / "cache").is_dir()  # the dataset went to the cache
    assert (out["run_dir"] / "c2d_tiny_nl1.pt").is_file()
    # the dataset the demo trained on is the cached one that a second run reuses (the reuse
    # itself is tested in tests/data/test_digits.py without a second demo run)
    from nlnet.demo.digits_cache import prepare_digits
    from nlnet.demo.video import DemoSettings

    manifests = list((tmp_path / "cache").glob("*/manifest.json"))
    assert len(manifests) == 1
    stamp = manifests[0].stat().st_mtime_ns
    root = prepare_digits(DemoSettings.quick(0).task, manifests[0].parent)
    assert root == manifests[0].parent and Path(s["dataset"]).resolve() == root.resolve()
    assert manifests[0].stat().st_mtime_ns == stamp
    one, two = out, _run_demo(tmp_path / "two", "--quick", "--threads", "2", timeout=300)
    assert two["summary"]["threads"] == 2
    for name, r in one["summary"]["results"].items():
        assert two["summary"]["results"][name]["test_top1"] == r["test_top1"], name
        a, b = (torch.load(o["run_dir"] / f"{name}.pt", weights_only=False)["model"]
                for o in (one, two))  # fmt: skip
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


def test_jobs_run_inline_on_one_thread_and_deliver_errors():
    import torch

    from nlnet.demo.jobs import Jobs

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

    from nlnet.demo.jobs import Jobs

    start = time.perf_counter()
    with pytest.raises(ValueError, match="not a number"):
        with Jobs(2) as jobs:
            jobs.submit(time.sleep, 120)
            jobs.submit(int, "not a number").result()
    assert time.perf_counter() - start < 60
