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


@pytest.mark.parametrize("suite, budget_s, n_min, n_max", [("quick", 110, 60, 110), ("full", 470, 250, 430)])
def test_suite_sizes_and_estimated_budget(run_suite, suite, budget_s, n_min, n_max):
    """Single-GPU cases (the 2-GPU group runs on its own machine) fit the time budget."""
    groups = [g for g in run_suite.build_groups(suite) if not g.dist]
    n = sum(len(g.cases) for g in groups)
    assert n_min <= n <= n_max
    assert run_suite.estimate_s(groups) < budget_s


def test_gemm_counts(run_suite):
    count = {s: sum(len(g.cases) for g in run_suite.build_groups(s, only=["gemm"])) for s in ("quick", "full")}
    assert 20 <= count["quick"] <= 35
    assert 130 <= count["full"] <= 200


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


FAKE_SMI = r"""#!/usr/bin/env python3
import sys, time
from datetime import datetime
args = sys.argv[1:]
if args == ["-h"]:
    print("    -lms  --loop-ms=   Probe until Ctrl+C at specified millisecond interval." if LMS else "    -l")
    sys.exit(0)
if args == ["--help-query-gpu"]:
    print('"power.draw.instant"\n"clocks_event_reasons.active"')
    sys.exit(0)
fields = [a for a in args if a.startswith("--query-gpu=")][0].split("=", 1)[1].split(",")
def line(k):
    vals = {"timestamp": datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:-3], "clocks.sm": str(1980 - 10 * (k % 3)),
            "clocks.mem": "3201", "power.draw": "650.5", "temperature.gpu": "55", "power.draw.instant": "700.25",
            "clocks_event_reasons.active": "0x0000000000000004"}
    return ", ".join(vals[f] for f in fields)
if "-lms" in args:
    k = 0
    while True:
        print(line(k), flush=True)
        k += 1
        time.sleep(int(args[args.index("-lms") + 1]) / 1e3)
print(line(0))
"""


@pytest.mark.parametrize("lms", [True, False])
def test_power_sampler_with_fake_nvidia_smi(run_suite, tmp_path, lms):
    """The sampler's two modes (-lms stream, 100 ms polling) against a fake nvidia-smi:
    only samples inside begin()/end() count, the summary has the documented keys."""
    import time as _time  # noqa: PLC0415

    import timing  # noqa: PLC0415
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI.replace("if LMS", f"if {lms}"))
    smi.chmod(0o755)
    helpq = subprocess.run([str(smi), "--help-query-gpu"], capture_output=True, text=True).stdout
    fields = timing.POWER_FIELDS + [f for f in timing.POWER_OPTIONAL[0] if f in helpq]
    has_lms = "-lms" in subprocess.run([str(smi), "-h"], capture_output=True, text=True).stdout
    assert has_lms == lms
    s = timing.PowerSampler({"smi": str(smi), "gpu_id": "0", "fields": fields, "lms": has_lms,
                             "stdbuf": None}).start()
    _time.sleep(0.4)              # start-up, outside the window
    s.begin()
    _time.sleep(0.6)
    s.end()
    _time.sleep(0.2)
    state = s.stop()
    assert state["overhead_s"] < 0.05, "stop() does not wait for nvidia-smi to exit"
    s._reap()
    assert state["source"] == ("lms" if lms else "poll") and state["window"] == "timed"
    assert 2 <= state["samples"] < len(s.rows)
    assert 1960 <= state["sm_clock_mhz"]["min"] <= state["sm_clock_mhz"]["median"] <= state["sm_clock_mhz"]["max"] <= 1980
    assert state["power_w"] == {"median": 650.5, "max": 650.5} and state["temp_c"] == {"median": 55.0}
    assert state["power_instant_w"]["max"] == 700.2 or state["power_instant_w"]["max"] == 700.3
    assert state["clock_event_reasons"] == {"0x0000000000000004": state["samples"]}
    assert s.proc is None or s.proc.poll() is not None, "the nvidia-smi process is gone after stop()"


def test_no_power_state_on_cpu(run_suite):
    import timing  # noqa: PLC0415
    assert timing.power_sampler("cpu") is None
    _, extra = timing.measure(lambda i: sum(range(100)), "cpu", flush=False)
    assert "power_state" not in extra
    _, extra = timing.measure_steps(lambda i: sum(range(100)), "cpu", warmup=2, reps=3)
    assert "power_state" not in extra
