"""Readable tables (a header with its unit for every column, rounded numbers) and the shared jobs
(one computation per key, however many sessions ask; errors kept; bounded)."""

import threading
import time

import pytest

from mechsim.app import cached, jobs, tables


@pytest.fixture(scope="module")
def est():
    return cached.run_estimate(cached.EstimateInputs(model="llama3-8b", hw="hgx_h100", grad_accum=4,
                                                     plan=cached.Plan(tp=2, pp=2, dp=2, sp=True)))


def _headers(records) -> list[str]:
    keys = dict.fromkeys(k for r in records for k in r)
    return [tables.column(k).label for k in keys]


def test_every_shown_column_has_a_readable_header(est):
    serving = cached.run_best_serving(cached.ServingInputs(model="llama3-8b"))
    shown = [tables.op_records(est), list(serving.candidates), tables.plan_records(
        cached.run_search(cached.SearchInputs(model="llama3-8b", nodes=1, gbs=64, seq=2048, top=3)))]
    for recs in shown:
        for key in dict.fromkeys(k for r in recs for k in r):
            assert key in tables.COLUMNS, key                       # a deliberate header, not a fallback
        assert all("_" not in h for h in _headers(recs)), _headers(recs)


def test_display_rows_round_and_scale():
    recs = [{"GFLOP": 615726.5116, "mfu": 0.50761, "ttft_s": 0.11287976, "cost_usd": 6354.5207, "value": 3.5,
             "plan": "tp=2"}]
    d = tables.display_rows(recs)[0]
    assert d["GFLOP"] == 615726.5 and d["mfu"] == 0.50761            # percent is formatted by the column
    assert d["ttft_s"] == 112.9 and tables.column("ttft_s").label == "TTFT (ms)"
    assert d["cost_usd"] == 6355 and isinstance(d["cost_usd"], int)
    assert d["value"] == "3.5" and d["plan"] == "tp=2"
    assert tables.column("some_new_key").label == "Some new key"


def test_a_job_runs_once_for_many_askers():
    calls = []

    def slow():
        calls.append(1)
        time.sleep(1.0)
        return 42

    key = ("test", time.monotonic())
    ready, job = jobs.peek(key, slow, "a test", wait_s=0.05)   # a page's wait, well inside the job
    assert not ready and not job.done()
    got = []
    ts = [threading.Thread(target=lambda: got.append(jobs.get(key, slow, "a test", timeout=10))) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(10)
    assert got == [42] * 8 and calls == [1] and jobs.peek(key, slow, "a test") == (True, 42)


def test_a_failing_job_keeps_its_error():
    def bad():
        raise ValueError("gbs: must be positive")

    key = ("test-bad", time.monotonic())
    with pytest.raises(ValueError, match="gbs"):
        jobs.get(key, bad, "bad", timeout=10)
    with pytest.raises(ValueError, match="gbs"):
        jobs.peek(key, bad, "bad")


def test_jobs_are_bounded(monkeypatch):
    monkeypatch.setattr(jobs, "MAX_JOBS", 3)
    base = time.monotonic()
    for i in range(6):
        jobs.get(("bounded", base, i), lambda i=i: i, "n", timeout=10)
    jobs.get(("bounded", base, 6), lambda: 6, "n", timeout=10)
    assert len(jobs._JOBS) <= 3 + len(jobs.running())


def test_search_serves_every_top_from_one_search():
    a, b = cached.SearchInputs(model="llama3-8b", nodes=1, gbs=64, seq=2048, top=5), \
        cached.SearchInputs(model="llama3-8b", nodes=1, gbs=64, seq=2048, top=12)
    assert cached.search_key(a) == cached.search_key(b)
    full = cached.search_result(a)
    ten = cached.run_search(cached.SearchInputs(model="llama3-8b", nodes=1, gbs=64, seq=2048, top=10))
    assert [r.plan for r in full.rows[:10]] == [r.plan for r in ten.rows]
