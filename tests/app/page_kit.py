"""Shared pieces of the AppTest page tests (tests/app/test_pages_*.py): read a page's metrics and
errors, and wait for the jobs it started. Imported by module name, like browser_kit.py: a test file
cannot import from ``conftest`` under pytest-xdist (another folder's conftest module may hold that name)."""

from __future__ import annotations

from mechsim.app import jobs


def settle(at, timeout: float = 300):
    """Wait for the jobs a page started (app/jobs.py: it drew a progress line), then rerun it, as
    the page's own poll does in a browser."""
    while jobs.running():
        jobs.wait_all(timeout)
        at.run()
    return at


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


def errors(at) -> list[str]:
    return [e.value for e in at.error]


def clean(at) -> None:
    assert not at.exception, [e.message for e in at.exception]
