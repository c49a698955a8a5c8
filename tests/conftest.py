"""Suite-wide: estimates read no user calibration of the machine running the tests (a user data
directory of its own, empty; sim/userdata.py)."""

import os
import tempfile

os.environ["MECHSIM_DATA_DIR"] = tempfile.mkdtemp(prefix="mechsim-test-data-")
