"""Error bands: how far off this kind of estimate has measured to be.

`mechsim validate compare --write-accuracy` writes accuracy.toml (to the user data directory,
sim/userdata.py, unless given --out): for each validated GPU and estimate kind (train, prefill,
decode, ...), the held-out MAPE and max error against measured runs. The user's file is read
when it exists, else the package's (sim/data/accuracy.toml). An estimate carries the band of its
kind on its own GPU, else on the GPU whose calibration it shares (sim/data/efficiency/transfer.toml:
same die), else "unvalidated"; the band names every data file the estimate read (``data_files``).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

from . import userdata
from ._toml import DataFileError, load_toml
from .calibration import DATA, efficiency_files, on_clear_caches, transfer_source
from .results import ErrorBand

ACCURACY_FILE = DATA / "accuracy.toml"
BAND_FIELDS = ("mape", "max_error")


@functools.cache
def accuracy_file() -> Path:
    """The accuracy table in use: the user's if present, else the package's."""
    return userdata.existing("accuracy.toml") or ACCURACY_FILE


@functools.cache
def _accuracy(path: Path) -> dict:
    data = load_toml(path)
    for gpu, table in data.items():
        if isinstance(table, dict):
            for key, rec in table.items():
                _check_band(path, gpu, key, rec)
    return data


def _check_band(path: Path, gpu: str, key: str, rec: object) -> None:
    ok = isinstance(rec, dict) and all(isinstance(rec.get(f), (int, float)) and math.isfinite(rec[f])
                                       and rec[f] >= 0 for f in BAND_FIELDS)
    if not ok:
        raise DataFileError(f"{path}: [{gpu}] {key!r} needs finite mape >= 0 and max_error >= 0; "
                            "write it again with `mechsim validate compare --write-accuracy`")


@functools.cache
def data_files(gpu_key: str) -> tuple[str, ...]:
    """Calibration and accuracy files an estimate on ``gpu_key`` reads beyond the arch defaults."""
    files = [str(p) for p in efficiency_files(gpu_key)]
    overlap = userdata.existing("overlap.toml")
    return tuple(files + ([str(overlap)] if overlap else []) + [str(accuracy_file())])


def band_for(mode: str, gpu_key: str, stack_key: str) -> ErrorBand:
    """Held-out error of ``mode`` estimates (on ``stack_key``) for the closest validated GPU."""
    acc, files = _accuracy(accuracy_file()), data_files(gpu_key)
    for key, note in ((gpu_key, ""), (transfer_source(gpu_key) or "", "same chip, other memory")):
        rec = acc.get(key, {}).get(f"{mode}.{stack_key}")
        if rec:
            return ErrorBand("validated", rec["mape"], rec["max_error"], f"{mode}.{stack_key}", key,
                             note or rec.get("note", ""), files)
    return ErrorBand("unvalidated", kind=f"{mode}.{stack_key}",
                     note=f"no held-out measurements of {mode} with stack {stack_key} on {gpu_key} or its chip",
                     data_files=files)


@on_clear_caches
def clear_caches() -> None:
    """Forget which files are in use (after a command in this process wrote new ones)."""
    for f in (accuracy_file, _accuracy, data_files):
        f.cache_clear()
