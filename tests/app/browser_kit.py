"""Shared pieces of the browser tests (tests/app/test_browser_*.py): Chromium settings, screenshot and
metric helpers. Their fixtures (server, page, requests_seen, shots) are in conftest.py and module-scoped:
each test file gets its own server and browser, so pytest-xdist runs the files on two workers side by side."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 240_000      # a new plan search or comparison on a shared, busy 2-core box

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - CI installs it (.ci/run, the test extra)
    expect = sync_playwright = None

MARKS = [   # each browser test file: pytestmark = MARKS
    pytest.mark.browser,
    pytest.mark.slow,           # an app server and Chromium per file: the longest files, started first
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no {CHROMIUM} (apt-get install chromium; .ci/run does)"),
    pytest.mark.skipif(sync_playwright is None, reason="playwright not installed (pip install -e '.[test]')"),
]


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


def assert_no_deploy_and_only_local(server, page, requests_seen) -> None:
    """After a file's pages: the toolbar has no Deploy button, and Chromium's network log holds
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
