"""Validation tests: the comparison of every committed record, made once per test process."""

import pytest

from mechsim.validation.analysis.compare import compare


@pytest.fixture(scope="session")
def committed_comparison():
    """``compare()`` of the committed records: (rows, unused), computed once and shared (seconds each)."""
    rows, unused = compare()
    return tuple(rows), tuple(unused)
