"""Suite-wide: estimates read no user calibration of the machine running the tests (a user data
directory of its own, empty; sim/userdata.py) and write no parsed-data cache into the user's
cache folder (a cache directory of its own, hwdb/cache.py); the step pipeline's memoised stages (sim/step.py)
start and end empty in every test, so a test that patches a sim function sees no step composed
before it.

The two comparisons that several folders check against (every committed record, and every published
at-scale row: seconds of CPU each) are session fixtures, computed once per test process.

Files with a test marked ``slow`` start first (pytest-xdist hands files out in collection order,
``--no-loadscope-reorder`` in pyproject.toml), so under ``-n 2 --dist loadfile`` the long files run side
by side at the start and the short ones fill the gaps at the end (docs/testing.md)."""

import os
import tempfile

import pytest

os.environ["MECHSIM_DATA_DIR"] = tempfile.mkdtemp(prefix="mechsim-test-data-")
os.environ.setdefault("MECHSIM_CACHE_DIR", tempfile.mkdtemp(prefix="mechsim-test-cache-"))


def pytest_collection_modifyitems(items):
    """Stable reorder: every file with a ``slow`` test first; each file's tests stay together and in order."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


@pytest.fixture(autouse=True)
def _fresh_steps():
    from mechsim.sim.step import clear_stages
    clear_stages()
    yield
    clear_stages()


@pytest.fixture(scope="session")
def measured():
    """``mechsim.validation.api.measured_comparison()``: predicted vs measured for every committed
    record (what the Validation page and `mechsim validate compare` show), once per test process."""
    from mechsim.validation.api import measured_comparison
    return measured_comparison()


@pytest.fixture(scope="session")
def published():
    """``mechsim.validation.api.published_comparison()``: every published at-scale training row
    predicted, once per test process."""
    from mechsim.validation.api import published_comparison
    return published_comparison()
