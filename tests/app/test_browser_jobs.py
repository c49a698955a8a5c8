"""The app in a real browser: `mechsim app --no-warm` on 127.0.0.1, Debian's Chromium driven by
Playwright (executable_path=/usr/bin/chromium, no browser download). Each page loads, shows the
API's numbers, takes an input change, and is saved as a screenshot once its charts are drawn.
Every request the pages make goes to the app's own address; no metric is cut off; no Deploy button.

Screenshots go to pytest's tmp dir, and also to $MECHSIM_SCREENSHOTS when set (how
app/screenshots/ was made).

This file: the Serving, Procurement and Validation pages and concurrent sessions; the shared pieces are in browser_kit.py."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from mechsim.app import cached, fmt

from browser_kit import MARKS, assert_no_deploy_and_only_local, expect, metric, set_number, snap

pytestmark = MARKS


def test_serving_page(server, page, shots):
    page.goto(server + "/serving?model=llama3-8b")
    plan = cached.run_best_serving(cached.ServingInputs(model="llama3-8b"))
    expect(metric(page, "Capacity (requests/s)")).to_have_text(f"{plan.max_rate_per_s:.3g}")
    set_number(page, "TPOT target (ms, 0 = none)", 30)
    plan2 = cached.run_best_serving(cached.ServingInputs(model="llama3-8b", tpot_s=0.03))
    expect(metric(page, "Capacity (requests/s)")).to_have_text(f"{plan2.max_rate_per_s:.3g}")
    snap(page, shots, "serving")


def test_procurement_page(server, page, shots):
    page.goto(server + "/procurement?model=llama3-8b&options=h100_sxm,b200&gpus=8&seq=2048&gbs=64&tokens_b=100.0")
    best = cached.run_compare(cached.ProcureInputs(model="llama3-8b", options=("h100_sxm", "b200"), gpus=8,
                                                   seq=2048, gbs=64, tokens=100e9)).best
    expect(metric(page, "Best option")).to_have_text(best.option)
    expect(metric(page, "Run cost")).to_have_text(fmt.usd(best.cost_usd))
    set_number(page, "GPUs per option", 16)
    best16 = cached.run_compare(cached.ProcureInputs(model="llama3-8b", options=("h100_sxm", "b200"), gpus=16,
                                                     seq=2048, gbs=64, tokens=100e9)).best
    expect(metric(page, "Run cost")).to_have_text(fmt.usd(best16.cost_usd))
    snap(page, shots, "procurement")


def test_validation_page(server, page, shots, request):
    measured = request.getfixturevalue("measured")      # first: the server then reads it from the run's cache (validation/analysis/memo.py)
    page.goto(server + "/validation")
    expect(metric(page, "Cases compared")).to_have_text(str(len(measured.rows)))
    snap(page, shots, "validation")


SMALL_CASES = (   # small views, so the suite's server (--no-warm) computes each in about a second
    ("", "model=llama3-8b&tp=2&pp=2&vp=1&dp=2&schedule=1f1b&ga=8&seq=2048", "Step time",
     "Micro-batches per step (grad_accum)", (4, 8, 16)),
    ("scaleout", "model=llama3-8b&nodes=1&gbs=64&seq=2048", "Best step time", "Plans shown", (3, 5, 8)),
    ("validation", "", "Cases compared", "", ()),          # a job: the session follows the page's poll
    ("hardware", "name=b200", "Specs shown", "", ()),
)


def test_concurrent_sessions_over_the_websocket(server):
    """8 sessions at once on 127.0.0.1 (app/loadtest.py; bench/app_load.py runs 20 on the default
    views): every one sees its page's numbers and its input changes, within loose bounds for a
    shared 2-core CI box. The run is bounded (120 s per wait) and ends by itself."""
    from mechsim.app import loadtest as L
    port = int(server.rsplit(":", 1)[1])
    cases = tuple(L.PageCase(p, q, m, L.Change(lab, vals)) for p, q, m, lab, vals in SMALL_CASES)
    with ThreadPoolExecutor(1) as pool:          # its own thread: Playwright's sync API holds this one's loop
        res = pool.submit(L.run_load, port, 8, changes=2, think_s=0.5, cases=cases).result(600)
    s = L.summary(res)
    assert s["errors"] == [] and s["first_view"]["n"] == 8 and s["input_change"]["n"] == 8
    assert s["first_view"]["p95"] < 30 and s["input_change"]["p95"] < 5, s
    with pytest.raises(ValueError, match="host"):
        L.run_load(port, 1, host="10.0.0.1")


def test_no_deploy_button_and_only_local_requests(server, page, requests_seen):
    assert_no_deploy_and_only_local(server, page, requests_seen)
