"""Suite-wide: estimates read no user calibration of the machine running the tests (a user data
directory of its own, empty; sim/userdata.py) and write no parsed-data cache into the user's
cache folder (a cache directory of its own, hwdb/cache.py); the step pipeline's memoised stages (sim/step.py)
start and end empty in every test, so a test that patches a sim function sees no step composed
before it."""

import os
import tempfile

import pytest

os.environ["MECHSIM_DATA_DIR"] = tempfile.mkdtemp(prefix="mechsim-test-data-")
os.environ.setdefault("MECHSIM_CACHE_DIR", tempfile.mkdtemp(prefix="mechsim-test-cache-"))


@pytest.fixture(autouse=True)
def _fresh_steps():
    from mechsim.sim.step import clear_stages
    clear_stages()
    yield
    clear_stages()
