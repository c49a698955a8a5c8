"""The app in a real browser: `mechsim app --no-warm` on 127.0.0.1, Debian's Chromium driven by
Playwright (executable_path=/usr/bin/chromium, no browser download). Each page loads, shows the
API's numbers, takes an input change, and is saved as a screenshot once its charts are drawn.
Every request the pages make goes to the app's own address; no metric is cut off; no Deploy button.

Screenshots go to pytest's tmp dir, and also to $MECHSIM_SCREENSHOTS when set (how
app/screenshots/ was made).

This file: the Estimate, Scale-out and Hardware pages; the shared pieces are in browser_kit.py."""

from __future__ import annotations

from mechsim import hwdb
from mechsim.app import cached, fmt

from browser_kit import MARKS, assert_no_deploy_and_only_local, expect, metric, set_number, snap

pytestmark = MARKS


def test_estimate_page(server, page, shots):
    page.goto(server + "/")
    est = cached.run_estimate(cached.EstimateInputs())
    expect(metric(page, "Step time")).to_have_text(fmt.time_s(est.step_time_s))
    expect(metric(page, "MFU")).to_have_text(fmt.pct(est.mfu))
    assert "model=llama3-70b" in page.url and "tp=4" in page.url
    snap(page, shots, "estimate")
    set_number(page, "Micro-batches per step (grad_accum)", 16)
    est16 = cached.run_estimate(cached.EstimateInputs(grad_accum=16))
    expect(metric(page, "Step time")).to_have_text(fmt.time_s(est16.step_time_s))
    page.wait_for_url("**ga=16**")
    set_number(page, "tp", 3)                            # an impossible plan: a message, no traceback
    expect(page.get_by_text("tp=3 does not divide", exact=False)).to_be_visible()
    assert page.locator('[data-testid="stException"]').count() == 0
    snap(page, shots, "estimate_bad_input")


def test_shared_url_reproduces_the_view(server, page):
    page.goto(server + "/?model=llama3-8b&ga=8&seq=2048&tp=2&pp=2&vp=1&dp=2&schedule=1f1b&zero=0")
    est = cached.run_estimate(cached.EstimateInputs(model="llama3-8b", grad_accum=8, seq=2048,
                                                    plan=cached.Plan(tp=2, pp=2, dp=2, sp=True)))
    expect(metric(page, "Step time")).to_have_text(fmt.time_s(est.step_time_s))


def test_scaleout_page(server, page, shots):
    q = dict(model="llama3-8b", nodes=1, gbs=64, seq=2048)
    page.goto(server + "/scaleout?" + "&".join(f"{k}={v}" for k, v in q.items()))
    res = cached.run_search(cached.SearchInputs(**q))
    expect(metric(page, "Best step time")).to_have_text(fmt.time_s(res.best.step_time_s))
    set_number(page, "Global batch (sequences)", 128)
    res2 = cached.run_search(cached.SearchInputs(**(q | {"gbs": 128})))
    expect(metric(page, "Best step time")).to_have_text(fmt.time_s(res2.best.step_time_s))
    snap(page, shots, "scaleout")


def test_hardware_page(server, page, shots):
    page.goto(server + "/hardware?name=b200")
    expect(metric(page, "Specs shown")).to_have_text(str(len(hwdb.get_gpu("b200").specs)))
    page.goto(server + "/hardware?name=b200&kind=assumed")
    n = sum(1 for s in hwdb.get_gpu("b200").specs.values() if s.kind == "assumed")
    expect(metric(page, "Specs shown")).to_have_text(str(n))
    snap(page, shots, "hardware")


def test_no_deploy_button_and_only_local_requests(server, page, requests_seen):
    assert_no_deploy_and_only_local(server, page, requests_seen)
