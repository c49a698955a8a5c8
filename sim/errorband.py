"""Error bands: how far off this kind of estimate has measured to be.

`mechsim validate compare` writes sim/data/accuracy.toml: for each validated GPU
and estimate kind (train, prefill, decode, ...), the held-out MAPE and max error
against measured runs. An estimate carries the band of its kind on its own GPU,
else on the GPU whose calibration it shares (sim/data/efficiency/transfer.toml: same
die), else "unvalidated".
"""

from __future__ import annotations

import functools

from .calibration import DATA, transfer_source
from .results import ErrorBand
from ._toml import load_toml

ACCURACY_FILE = DATA / "accuracy.toml"


@functools.cache
def _accuracy() -> dict:
    return load_toml(ACCURACY_FILE) if ACCURACY_FILE.exists() else {}


def band_for(mode: str, gpu_key: str, stack_key: str) -> ErrorBand:
    """Held-out error of ``mode`` estimates (on ``stack_key``) for the closest validated GPU."""
    acc = _accuracy()
    for key, note in ((gpu_key, ""), (transfer_source(gpu_key) or "", "same chip, other memory")):
        rec = acc.get(key, {}).get(f"{mode}.{stack_key}")
        if rec:
            return ErrorBand("validated", rec["mape"], rec["max_error"], f"{mode}.{stack_key}", key,
                             note or rec.get("note", ""))
    return ErrorBand("unvalidated", kind=f"{mode}.{stack_key}",
                     note=f"no held-out measurements of {mode} with stack {stack_key} on {gpu_key} or its chip")
