"""Where a user's own calibration lives: never inside the installed package.

    $MECHSIM_DATA_DIR, else platformdirs.user_data_dir("mechsim")
        efficiency/<gpu>.toml   kernel efficiency fitted by `mechsim validate calibrate`
        overlap.toml            DP contention / FSDP host cost fitted by the same command
        accuracy.toml           held-out error bands from `mechsim validate compare --write-accuracy`

Each file overlays the package's file of the same name (sim/data/...) when it exists; estimates
name the files they read (Estimate.error_band.data_files). Delete a file to return to the
package's data.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

ENV_VAR = "MECHSIM_DATA_DIR"


def user_data_dir() -> Path:
    """The user data directory (not created here)."""
    override = os.environ.get(ENV_VAR)
    return Path(override) if override else Path(platformdirs.user_data_dir("mechsim", appauthor=False))


def user_file(*parts: str) -> Path:
    """A path inside the user data directory."""
    return user_data_dir().joinpath(*parts)


def existing(*parts: str) -> Path | None:
    """The user file if it exists, else None."""
    p = user_file(*parts)
    return p if p.exists() else None
