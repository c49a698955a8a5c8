"""What-if: change the hardware (or stack) and see how the estimate moves.

Overrides are a mapping from a spec key of the GPU (``hbm_bandwidth``,
``flops_bf16``, ``nvlink_bandwidth_per_dir``, ...) to a change:
``"+20%"`` / ``"-10%"`` (relative), ``"x1.5"`` (factor) or a number (absolute,
SI units: B/s, FLOP/s, bytes). ``sustained_clock`` is special: a fraction of the
boost clock (0 < f <= 1) that scales every compute rate, for thermal or power
throttling.

Sensitivity is the elasticity of step time to a parameter,
    e = d ln(step_time) / d ln(x)  ~  (T(x * (1 + h)) / T(x) - 1) / h,
so e = -1 means "fully bound by x", 0 means "x does not matter".
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

CLOCK_KEY = "sustained_clock"
KNOBS = ("hbm_bandwidth", "compute", "launch_overhead")


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


def _scaled(knob: str, workload, hw, stack, h: float):
    """Arguments for estimate() with ``knob`` scaled by (1 + h)."""
    from .stacks import get_stack
    st = get_stack(stack if stack is not None else workload.stack)
    if knob == "hbm_bandwidth":
        return hw, st, {"hbm_bandwidth": f"{100 * h:+g}%"}
    if knob == "compute":  # every FLOP/s rate up by (1+h): clock can't exceed 1, so invert
        return hw, st, {}, 1.0 / (1.0 + h)
    if knob == "launch_overhead":
        return hw, dataclasses.replace(st, launch_host_s=st.launch_host_s * (1 + h),
                                       launch_host_bwd_s=st.launch_host_bwd_s * (1 + h)), {}
    raise ValueError(f"unknown sensitivity knob {knob!r}; known: {', '.join(KNOBS)}")


def sensitivity(workload, hw="h100_sxm", stack=None, knobs=KNOBS, h: float = 0.05) -> dict[str, float]:
    """Elasticity of step time to each knob (see module docstring).

    For ``compute`` the baseline runs at clock 1/(1+h) and the probe at 1, i.e.
    the same relative step in FLOP/s, since the clock cannot exceed boost.
    """
    from .estimate import estimate
    base = estimate(workload, hw, stack).step_time_s
    out = {}
    for knob in knobs:
        args = _scaled(knob, workload, hw, stack, h)
        if knob == "compute":
            slow = estimate(workload, hw, stack, {CLOCK_KEY: args[3]}).step_time_s
            out[knob] = (base / slow - 1.0) / h
        else:
            out[knob] = (estimate(workload, args[0], args[1], args[2]).step_time_s / base - 1.0) / h
    return out
