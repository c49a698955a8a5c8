"""Validation tests: the comparison of every committed record, made once per test process."""

import pytest


@pytest.fixture(scope="session")
def committed_comparison(measured):
    """``compare()`` of the committed records: (rows, unused), computed once and shared (seconds each):
    the rows and unused records of the session's ``measured_comparison()`` (tests/conftest.py)."""
    return measured.rows, measured.unused
