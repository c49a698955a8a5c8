"""App tests: AppTest helpers and the ``browser`` marker (real headless Chromium)."""

from pathlib import Path

import pytest

import mechsim.app

APP_DIR = Path(mechsim.app.__file__).parent


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives the running app in headless Chromium (Playwright)")


@pytest.fixture
def page_test():
    """AppTest of one page module, with URL query parameters set before the first run."""
    from streamlit.testing.v1 import AppTest

    def make(page: str, timeout: float = 120, **query):
        at = AppTest.from_file(str(APP_DIR / page), default_timeout=timeout)
        for k, v in query.items():
            at.query_params[k] = str(v)
        return settle(at.run(), timeout)
    return make


def settle(at, timeout: float = 120):
    """Wait for the jobs a page started (app/jobs.py: it drew a progress line), then rerun it, as
    the page's own poll does in a browser."""
    from mechsim.app import jobs
    while jobs.running():
        jobs.wait_all(timeout)
        at.run()
    return at
