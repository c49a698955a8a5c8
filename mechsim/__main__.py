"""`python -m mechsim ...` runs the command line (mechsim/cli.py)."""

import sys

from mechsim.cli import main

sys.exit(main())
