"""GPU runners, exercised on CPU: case lists and the smoke suite end to end (needs torch)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNNERS = REPO / "validation" / "runners"
SUITE_SCRIPT = RUNNERS / "run_suite.py"


def _records():
    spec = importlib.util.spec_from_file_location("_records_for_runner_tests", REPO / "validation" / "records.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def run_suite():
    pytest.importorskip("torch")
    before = set(sys.modules)
    sys.path.insert(0, str(RUNNERS))
    try:
        spec = importlib.util.spec_from_file_location("_run_suite_under_test", SUITE_SCRIPT)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(RUNNERS))
        for name in set(sys.modules) - before:  # the runners' generic top-level names (env, timing, ...)
            if str(RUNNERS) in str(getattr(sys.modules[name], "__file__", "") or ""):
                del sys.modules[name]


@pytest.mark.parametrize("suite", ["smoke", "quick", "full"])
def test_case_ids_unique_and_kinds_known(run_suite, suite):
    groups = run_suite.build_groups(suite)
    ids = [c.case_id for g in groups for c in g.cases]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1][:5]
    kinds = {c.kind for g in groups for c in g.cases}
    assert kinds <= _records().KINDS
    assert kinds == set(run_suite.KINDS), "every kind has at least one case in every suite"


@pytest.mark.parametrize("suite, budget_s, n_min, n_max", [("quick", 110, 60, 110), ("full", 470, 250, 400)])
def test_suite_sizes_and_estimated_budget(run_suite, suite, budget_s, n_min, n_max):
    """Single-GPU cases (the 2-GPU group runs on its own machine) fit the time budget."""
    groups = [g for g in run_suite.build_groups(suite) if not g.dist]
    n = sum(len(g.cases) for g in groups)
    assert n_min <= n <= n_max
    assert run_suite.estimate_s(groups) < budget_s


def test_gemm_counts(run_suite):
    count = {s: sum(len(g.cases) for g in run_suite.build_groups(s, only=["gemm"])) for s in ("quick", "full")}
    assert 20 <= count["quick"] <= 35
    assert 130 <= count["full"] <= 185


def test_only_and_match_filters(run_suite):
    groups = run_suite.build_groups("quick", only=["gemm"], match="fp8")
    cases = [c for g in groups for c in g.cases]
    assert cases and all(c.kind == "gemm" and "fp8" in c.case_id for c in cases)


def test_rotation_and_inner_rules(run_suite):
    import timing  # noqa: PLC0415 - on sys.path via the fixture
    l2 = 60 << 20
    assert timing.rotation_count(200 << 20, l2) == 1          # one set already exceeds 2x L2
    n = timing.rotation_count(1 << 20, l2)
    assert n * (1 << 20) > 2 * l2 and (n - 1) * (1 << 20) <= 2 * l2
    inner = timing.choose_inner(5e-6, n)
    assert inner % n == 0 and inner * 5e-6 >= timing.TARGET_S
    assert timing.choose_inner(1.0, 1) == 1


def test_gpu_slug(run_suite):
    import env  # noqa: PLC0415
    assert env.gpu_slug("NVIDIA H200") == "h200"
    assert env.gpu_slug("NVIDIA H100 80GB HBM3") == "h100_80gb_hbm3"


@pytest.mark.slow
def test_smoke_suite_on_cpu_end_to_end(tmp_path):
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, str(SUITE_SCRIPT), "--suite", "smoke", "--device", "cpu",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = list((tmp_path / "cpu").glob("*.json"))
    assert len(files) == 1 and files[0].name.endswith("_smoke_" + files[0].stem.split("_")[-1] + ".json")
    run = _records().load_run(files[0])
    assert run["status"] == "complete" and run["finished_utc"]
    errors = {r["case_id"]: r["error"] for r in run["records"] if r["error"]}
    assert not errors, errors
    kinds = {r["kind"] for r in run["records"]}
    assert kinds == _records().KINDS
    assert len(list(tmp_path.rglob("*"))) <= 8  # the device returns at most 8 files


def test_graph_timing_logic_with_fake_graph(run_suite, monkeypatch):
    """The graph path cannot run on CPU; drive its control flow with a fake capture."""
    import time as _time  # noqa: PLC0415

    import timing  # noqa: PLC0415
    captured = []

    class FakeGraph:
        def __init__(self, inner):
            self.inner = inner

        def replay(self):
            _time.sleep(self.inner * 2e-6)  # 2 us per captured call

    def fake_capture(call, inner):
        captured.append(inner)
        return FakeGraph(inner)
    monkeypatch.setattr(timing, "_capture", fake_capture)
    clock = timing.Clock("cpu")
    result, inner = timing.graph_timing(lambda i: None, clock, inner=10, n_rot=5, reps=None)
    assert captured[0] == 10 and len(captured) == 2, "a replay far below TARGET_S is recaptured larger"
    assert inner == captured[1] and inner % 5 == 0 and inner > 10
    assert result["method"] == "graph_rotating" and result["inner"] == inner
    assert timing.MIN_REPS <= result["n"] <= timing.MAX_REPS
    assert result["min_s"] <= result["median_s"] <= result["max_s"]
