"""App tests: AppTest helpers and the ``browser`` marker (real headless Chromium)."""

from pathlib import Path

import pytest

import mechsim.app

from page_kit import settle

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


@pytest.fixture
def settled():
    """``page_kit.settle`` as a fixture (test files may also import it from page_kit)."""
    return settle


# The browser tests' fixtures (tests/app/test_browser_*.py): module-scoped, so each file has its own
# app server and Chromium page.

@pytest.fixture(scope="module")
def server():
    from mechsim.app.local_server import running_app
    with running_app(warm=False, timeout_s=90) as (port, _):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def requests_seen() -> list[str]:
    return []


@pytest.fixture(scope="module")
def page(server, requests_seen):
    from browser_kit import ARGS, CHROMIUM, TIMEOUT_MS, expect, sync_playwright
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

