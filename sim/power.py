"""The SM clock a workload sustains under the board power cap, and its compute speed.

Power in units of the cap's headroom over idle, (P - idle) / (tdp - idle), at SM clock f:

    p(f) = u_tc(f) * (f / f_gemm)^3 + w_mem * u_mem(f)

u_tc and u_mem are the step's time shares of tensor-core-bound work (GEMM and attention
compute) and memory-bound work (HBM-bound kernels, exposed communication); idle time (host
gaps, pipeline bubbles) draws idle power. f_gemm is the clock a pure GEMM stream sustains at
the cap (u_tc = 1 gives p = 1: hwdb/data/power.toml [gemm_sustained_clock], measured on H200),
the cube is dynamic power ~ f V^2 with V ~ f across the DVFS range, and w_mem is the
memory-bound activity weight of sim/energy.py (power.toml [activity]). The clock is the boost
clock when p(f_boost) <= 1, else the f in [f_gemm, f_boost] with p(f) = 1.

Compute-bound speed relative to the calibrated GEMM efficiency, which is the sustained rate
(validation/predict.boosted_compute_scale), rising to gemm.boost_speedup at boost:

    speed(f) = 1 + (boost_speedup - 1) * (f - f_gemm) / (f_boost - f_gemm)

Shares depend on f (compute time shrinks as the clock rises): sustained_speed iterates.
Measured check (LOG 2026-11-30): timed eager train steps on H200 ran at 1,980 MHz (host-bound
125M/1B), 1,935 (1B mbs2), 1,770 (1B mbs4 s4096) and 1,583 MHz (8B, 4 layers).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

TENSOR = ("matmul_compute", "attention")
MEMORY = ("matmul_memory", "memory_bound", "communication")


@dataclass(frozen=True)
class PowerState:
    """Sustained SM clock (Hz) and compute speed over the calibrated sustained rate."""

    clock_hz: float
    speed: float
    throttled: bool


@functools.lru_cache(maxsize=64)
def clock_params(gpu_key: str) -> tuple[float, float] | None:
    """(f_gemm Hz, memory-bound activity weight) of a GPU, None where no clock is modelled."""
    from ..hwdb.prices import load_prices
    book = load_prices()
    table = book.power.get("gemm_sustained_clock", {})
    if gpu_key not in table:
        return None
    return table[gpu_key].value * 1e6, book.value("power.activity.memory_bound")


def cap_power(u_tc: float, u_mem: float, f: float, f_gemm: float, w_mem: float) -> float:
    """p(f) = u_tc (f / f_gemm)^3 + w_mem u_mem: power over idle, in units of (tdp - idle)."""
    return u_tc * (f / f_gemm) ** 3 + w_mem * u_mem


def cap_clock(u_tc: float, u_mem: float, f_gemm: float, f_boost: float, w_mem: float) -> float:
    """The clock in [f_gemm, f_boost] at which p(f) = 1 (f_boost when it stays under the cap)."""
    if u_tc <= 0 or cap_power(u_tc, u_mem, f_boost, f_gemm, w_mem) <= 1.0:
        return f_boost
    f = f_gemm * ((1.0 - w_mem * u_mem) / u_tc) ** (1.0 / 3.0)
    return min(max(f, f_gemm), f_boost)


def speed_at(f: float, f_cal: float, f_boost: float, boost_speedup: float) -> float:
    """Compute speed at clock f over the calibrated sustained rate: linear through (f_cal, 1) and
    (f_boost, boost_speedup), f_cal being the sustained GEMM clock of the GPU whose efficiencies
    were calibrated (below it, e.g. the same die under a lower power cap, the speed drops under 1)."""
    if f_boost <= f_cal:
        return 1.0
    return 1.0 + (boost_speedup - 1.0) * (f - f_cal) / (f_boost - f_cal)


def shares(by_category: Mapping[str, float], step_s: float) -> tuple[float, float]:
    """(u_tc, u_mem): time shares of tensor-core-bound and memory-bound work in the step."""
    if step_s <= 0:
        return 0.0, 0.0
    tc = sum(by_category.get(c, 0.0) for c in TENSOR)
    mem = sum(by_category.get(c, 0.0) for c in MEMORY)
    return min(tc / step_s, 1.0), min(mem / step_s, 1.0)


def power_state(by_category: Mapping[str, float], step_s: float, gpu_key: str, f_boost: float,
                boost_speedup: float) -> PowerState | None:
    """The clock and speed of a step whose categories were timed at the sustained rate (speed 1).

    Fixed point: at speed s the tensor-core time is tc / s and the step is shorter by
    tc (1 - 1/s); three iterations settle it to well under 0.1 %."""
    params = clock_params(gpu_key)
    if params is None or boost_speedup <= 1.0:
        return None
    f_gemm, w_mem = params
    f_cal = calibration_clock(gpu_key)
    tc = sum(by_category.get(c, 0.0) for c in TENSOR)
    speed, f = 1.0, f_gemm
    for _ in range(3):
        step = step_s - tc * (1.0 - 1.0 / speed)
        u_tc, u_mem = shares({**by_category, "matmul_compute": tc / speed, "attention": 0.0}, step)
        f = cap_clock(u_tc, u_mem, f_gemm, f_boost, w_mem)
        speed = speed_at(f, f_cal, f_boost, boost_speedup)
    return PowerState(f, speed, f < f_boost)


@functools.lru_cache(maxsize=64)
def calibration_clock(gpu_key: str) -> float:
    """Sustained GEMM clock (Hz) of the GPU whose calibrated efficiencies ``gpu_key`` uses (itself,
    or the same-die GPU of sim/data/efficiency/transfer.toml): the clock its "speed 1" means."""
    from .calibration import calibration_source
    src = calibration_source(gpu_key) or gpu_key
    params = clock_params(src) or clock_params(gpu_key)
    return params[0]
