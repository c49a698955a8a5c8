"""The app in a real browser: `mechsim app --no-warm` on 127.0.0.1, Debian's Chromium driven by
Playwright (executable_path=/usr/bin/chromium, no browser download). Each page loads, shows the
API's numbers, takes an input change, and is saved as a screenshot once its charts are drawn.
Every request the pages make goes to the app's own address; no metric is cut off; no Deploy button.

Screenshots go to pytest's tmp dir, and also to $MECHSIM_SCREENSHOTS when set (how
app/screenshots/ was made)."""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mechsim import hwdb
from mechsim.app import cached, fmt
from mechsim.app.local_server import running_app

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 240_000      # a new plan search or comparison on a shared, busy 2-core box

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - CI installs it (.ci/run, the test extra)
    sync_playwright = None

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no {CHROMIUM} (apt-get install chromium; .ci/run does)"),
    pytest.mark.skipif(sync_playwright is None, reason="playwright not installed (pip install -e '.[test]')"),
]


@pytest.fixture(scope="module")
def server():
    with running_app(warm=False, timeout_s=90) as (port, _):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def requests_seen() -> list[str]:
    return []


@pytest.fixture(scope="module")
def page(server, requests_seen):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page(viewport={"width": 1500, "height": 2400})
        pg.on("request", lambda r: requests_seen.append(r.url))      # Chromium's network log
        pg.set_default_timeout(TIMEOUT_MS)
        expect.set_options(timeout=TIMEOUT_MS)     # a cold first render on a busy 2-core CI box
        yield pg
        browser.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    return tmp_path_factory.mktemp("screenshots")


def metric(pg, label: str):
    return pg.locator('[data-testid="stMetric"]', has_text=label).locator('[data-testid="stMetricValue"]')


def drawn(pg) -> None:
    """Wait until the script run is over and every Plotly chart on the page has drawn its plot."""
    expect(pg.locator('[data-testid="stStatusWidget"]')).to_have_count(0)
    pg.wait_for_function("() => [...document.querySelectorAll('[data-testid=\"stPlotlyChart\"]')]"
                         ".every(c => c.querySelector('.main-svg'))")


def truncated_metrics(pg) -> list[str]:
    """Metric values wider than their box (shown with an ellipsis)."""
    return pg.eval_on_selector_all('[data-testid="stMetricValue"]',
                                   "els => els.filter(e => [e, ...e.querySelectorAll('*')]"
                                   ".some(x => x.scrollWidth > x.clientWidth + 1)).map(e => e.innerText)")


def snap(pg, shots: Path, name: str) -> None:
    drawn(pg)
    assert truncated_metrics(pg) == []
    path = shots / f"{name}.png"
    pg.screenshot(path=str(path))
    assert path.stat().st_size > 10_000
    extra = os.environ.get("MECHSIM_SCREENSHOTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(extra) / path.name)


def set_number(pg, label: str, value) -> None:
    box = pg.get_by_label(label, exact=True)
    box.fill(str(value))
    box.press("Enter")


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


def test_validation_page(server, page, shots):
    page.goto(server + "/validation")
    rows = cached.run_validation().rows
    expect(metric(page, "Cases compared")).to_have_text(str(len(rows)))
    snap(page, shots, "validation")


def test_hardware_page(server, page, shots):
    page.goto(server + "/hardware?name=b200")
    expect(metric(page, "Specs shown")).to_have_text(str(len(hwdb.get_gpu("b200").specs)))
    page.goto(server + "/hardware?name=b200&kind=assumed")
    n = sum(1 for s in hwdb.get_gpu("b200").specs.values() if s.kind == "assumed")
    expect(metric(page, "Specs shown")).to_have_text(str(n))
    snap(page, shots, "hardware")


def test_no_deploy_button_and_only_local_requests(server, page, requests_seen):
    """After every page above: the toolbar has no Deploy button, and Chromium's network log holds
    requests to the app's own 127.0.0.1 address only (favicon, fonts, Plotly all served locally)."""
    page.goto(server + "/hardware")
    expect(metric(page, "Specs shown")).to_be_visible()
    drawn(page)
    assert page.get_by_text("Deploy", exact=True).count() == 0
    assert page.locator('[data-testid="stAppDeployButton"]').count() == 0
    icon = page.eval_on_selector('link[rel*="icon"]', "e => e.href")
    assert icon.startswith(server)
    outside = sorted({u for u in requests_seen if not u.startswith(("http://127.0.0.1:", "ws://127.0.0.1:",
                                                                   "data:", "blob:"))})
    assert requests_seen and outside == []


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
