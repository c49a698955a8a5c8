"""What-if: change the hardware (or stack) and see how the estimate moves.

The changes are sim/overrides.py's (a spec key of the GPU -> "+20%", "x1.5" or an SI number;
``sustained_clock`` a fraction of the boost clock).

Sensitivity is the elasticity of step time to a parameter,
    e = d ln(step_time) / d ln(x)  ~  (T(x * (1 + h)) / T(x) - 1) / h,
so e = -1 means "fully bound by x", 0 means "x does not matter".
"""

from __future__ import annotations

import dataclasses

from .estimate import estimate
from .overrides import CLOCK_KEY, apply_overrides, parse_change
from .stacks import get_stack

__all__ = ["CLOCK_KEY", "KNOBS", "apply_overrides", "parse_change", "sensitivity"]

KNOBS = ("hbm_bandwidth", "compute", "launch_overhead")


def _scaled(knob: str, workload, hw, stack, h: float):
    """Arguments for estimate() with ``knob`` scaled by (1 + h)."""
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
