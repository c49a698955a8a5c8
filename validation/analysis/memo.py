"""The comparisons over every committed record, kept between processes (hwdb/cache.cached_object).

`compare()` of the committed records takes seconds of CPU (one estimate per record); the app's
Validation page, `mechsim validate`, the README generator and several test files all ask for the
same answer. It is kept in the user cache folder under the digest of every file it can read or
whose code shapes it, byte for byte: the package's code and data (mechsim/, hwdb/, model/, sim/,
validation/ with its records and published tables) and the user data folder (a user's
calibration, sim/userdata.py), plus the Python and pydantic versions (hwdb/cache.files_key). Any
change to any of them computes it afresh; with MECHSIM_NO_CACHE=1 nothing is kept. A comparison
asked for with explicit record paths is never kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")
_SKIP = {"__pycache__"}


def _package_dirs() -> list[Path]:
    from ... import hwdb, model, sim, validation
    import mechsim
    return [Path(m.__file__).resolve().parent for m in (mechsim, hwdb, model, sim, validation)]


def comparison_inputs() -> list[Path]:
    """Every file of the package's trees and of the user data folder, in a stable order."""
    from ...sim.userdata import user_data_dir
    roots = [*_package_dirs(), user_data_dir()]
    out: list[Path] = []
    for root in roots:
        if root.is_dir():
            out += sorted(p for p in root.rglob("*") if p.is_file() and not _SKIP.intersection(p.parts))
    return out


def kept(name: str, build: Callable[[], T], kind: type[T]) -> T:
    """``build()``, or its value kept from a process that saw the very same files."""
    from ...hwdb.cache import cached_object
    return cached_object(f"validation-{name}", comparison_inputs(), build, kind)
