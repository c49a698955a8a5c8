"""What-if overrides of a GPU's specs: a change spec per spec key, applied to an hwdb GPU.

Overrides are a mapping from a spec key of the GPU (``hbm_bandwidth``,
``flops_bf16``, ``nvlink_bandwidth_per_dir``, ...) to a change:
``"+20%"`` / ``"-10%"`` (relative), ``"x1.5"`` (factor) or a number (absolute,
SI units: B/s, FLOP/s, bytes). ``sustained_clock`` is special: a fraction of the
boost clock (0 < f <= 1) that scales every compute rate, for thermal or power
throttling. (sim/whatif.py: how the estimate moves with them.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CLOCK_KEY = "sustained_clock"


def parse_change(key: str, change: Any, current: float) -> float:
    """New SI value for ``key`` from a change spec; ValueError names the key."""
    if isinstance(change, str) and _is_number(change):
        change = float(change)
    if isinstance(change, (int, float)) and not isinstance(change, bool):
        new = float(change)
    elif isinstance(change, str) and change.strip().endswith("%"):
        new = current * (1.0 + float(change.strip()[:-1]) / 100.0)
    elif isinstance(change, str) and change.strip().lower().startswith("x"):
        new = current * float(change.strip()[1:])
    else:
        raise ValueError(f"override {key}={change!r}: use '+20%', 'x1.5' or an absolute SI number")
    if not new > 0:
        raise ValueError(f"override {key}={change!r} gives {new:g}; it must stay positive")
    return new


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _clock(change: Any) -> float:
    f = parse_change(CLOCK_KEY, change, 1.0)
    if f > 1.0:
        raise ValueError(f"override {CLOCK_KEY}={change!r}: a fraction of the boost clock, at most 1")
    return f


def apply_overrides(gpu, overrides: Mapping[str, Any]):
    """(GPU with the spec changes applied, clock fraction)."""
    clock = 1.0
    for key, change in overrides.items():
        if key == CLOCK_KEY:
            clock = _clock(change)
            continue
        if key not in gpu.specs:
            raise ValueError(f"unknown override {key!r} for {gpu.key}; known: {CLOCK_KEY}, "
                             f"{', '.join(sorted(gpu.specs))}")
        new = parse_change(key, change, gpu.specs[key].si)
        gpu = gpu.with_spec(key, new, note=f"what-if {key}={change}")
    return gpu, clock


