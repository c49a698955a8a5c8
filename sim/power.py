"""The SM clock a workload sustains under the board power cap, and its compute speed.

Power in units of the cap's headroom over idle, (P - idle) / (tdp - idle), at SM clock f:

    p(f) = u_gemm G(f) / G(f_gemm) + u_att G(f) / G(f_att) + w_mem u_mem

u_gemm, u_att and u_mem are the step's time shares of compute-bound GEMMs (each GEMM's time
weighted by its efficiency over the 8192^3 reference GEMM's, "matmul_power": a GEMM that uses the
tensor cores less draws less, sim/prepare.gemm_power_weights; one weaker than w_mem draws w_mem at
f_gemm, its shortfall counted as memory-bound time, sim/prepare.gemm_floor_s), attention and
memory-bound work
(HBM-bound kernels, exposed communication); short idle time (host gaps) draws idle power inside
the window, while idle blocks of seconds (pipeline bubbles, the exposed DP
reduction at the step's end) leave it: the controller averages over ~0.11 s
(sim/distributed.power_window). f_gemm is the clock a pure GEMM stream sustains at the cap
(hwdb/data/power.toml [gemm_sustained_clock], measured on H200) and f_att the one a pure
attention stream sustains ([attention_cap_clock]: f_att = rho f_ref on the GPU it was measured
on, FA2 rho 1.361, cuDNN 1.165). G is the dynamic power of a tensor-core load against the clock,
in x = f / f_boost ([dynamic_power_curve], measured on H200 by
validation/experiments/clock_power_curve.py --loads gemm: n SMs of a persistent 8192^3 GEMM,
n = 4..132, clock and power at the cap):

    G(x) = beta x^3 + (1 - beta) x          beta = 0.856 (GH100)

the core's f V^2 with V ~ f, plus data movement (L2, crossbar, HBM) that scales with the work
rate only; its local exponent is 2.7 at boost and 2.5 at 1,470 MHz, so a lower cap costs more
clock than the cube law (beta = 1) says. w_mem is the memory-bound activity weight of
sim/energy.py (power.toml [activity]). The clock is the boost clock when p(f_boost) <= 1, else
the f >= f_gemm with p(f) = 1. Measured check (validation/experiments/attention_power.py on
H200): GEMM / attention streams alternating every few ms sustain 1,515-1,890 MHz, which this
predicts within 5 % (tests/sim/test_power.py).

Compute speed at clock f, relative to each kernel's calibrated rate:

    GEMMs      speed(f) = f / f_cal                                          f <= f_cal
                          1 + (boost_speedup - 1) (f - f_cal) / (f_boost - f_cal)  above
               (f_cal: the calibration GPU's f_gemm; boost_speedup: the burst rate at boost)
    others     speed(f) = f / f_boost    (attention and the element-rate kernels: their
                                          microbenchmarks ran at 1,935-1,980 MHz)

Attention is linear in the clock, as measured in the same alternating runs (phases at 0.80-0.96
of its lone clock ran at 0.80-0.95 of its lone speed). GEMMs there (8192^3 and the 8B step's
shapes) are linear too up to ~1.18x, then flat: steeper above f_cal than the line, which is kept
because the held-out H200 eager train steps need it (validation LOG, "Attention draws less power per clock than GEMMs", 2026-11-30: the measured
slope gave a -5 % bias there, before the element-rate kernels followed the clock: "Element-rate kernels follow the step's clock"). Shares
depend on f (compute time changes with the clock): power_state iterates. Timed eager train steps on H200 ran at 1,980 MHz
(host-bound 125M/1B), 1,935 (1B mbs2), 1,770 (1B mbs4 s4096) and 1,583 MHz (8B, 4 layers).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .calibration import calibration_source

MEMORY = ("matmul_memory", "memory_bound", "communication")


@dataclass(frozen=True)
class PowerState:
    """Sustained SM clock (Hz); GEMM speed over the calibrated sustained rate; attention speed
    over its calibrated (boost-clock) rate."""

    clock_hz: float
    speed: float
    attention_speed: float
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


@functools.lru_cache(maxsize=64)
def curve_beta(gpu_key: str) -> float:
    """beta of the GPU's dynamic power curve G (power.toml [dynamic_power_curve]); 1 (the cube
    law) where none is recorded."""
    from ..hwdb.prices import load_prices
    rec = load_prices().power.get("dynamic_power_curve", {}).get(gpu_key)
    return rec.value if rec is not None else 1.0


def power_curve(x: float, beta: float) -> float:
    """G(x) = beta x^3 + (1 - beta) x: dynamic power at clock x = f / f_boost over that at boost."""
    return beta * x ** 3 + (1.0 - beta) * x


def power_curve_inverse(y, beta: float):
    """The x >= 0 with G(x) = y (G is increasing for 0 <= beta <= 1): Cardano's root of
    x^3 + p x + q = 0 with p = (1 - beta) / beta, q = -y / beta. ``y``: a float or an array
    (elementwise; one formula for the scalar and the batched paths, see _xp)."""
    xp = _xp(y)
    if beta >= 1.0:
        out = xp.cbrt(y)
    elif beta <= 0.0:
        out = y
    else:
        p, q = (1.0 - beta) / beta, -y / beta
        s = xp.sqrt(q * q / 4.0 + p ** 3 / 27.0)   # > 0 for every y: p > 0
        out = xp.cbrt(-q / 2.0 + s) + xp.cbrt(-q / 2.0 - s)
    return xp.where(y <= 0.0, 0.0, out)


def same_power_clock(f: float, f_from: float, f_to: float, f_boost: float, beta: float) -> float:
    """The clock at which a load draws what it drew at ``f`` once the power it may draw is scaled
    by G(f_to) / G(f_from) (a GEMM's cap clock moving from f_from to f_to): how another load's
    cap clock moves with the cap."""
    g = power_curve(f / f_boost, beta) * power_curve(f_to / f_boost, beta) / power_curve(f_from / f_boost, beta)
    return f_boost * power_curve_inverse(g, beta)


@functools.lru_cache(maxsize=16)
def attention_clock_ratio(kernel: str | None) -> float:
    """rho = f_att / f_gemm of an attention kernel (power.toml [attention_cap_clock]); 1 (GEMM
    power) for kernels not measured."""
    from ..hwdb.prices import load_prices
    rec = load_prices().power.get("attention_cap_clock", {}).get(kernel or "")
    return rec.value if rec is not None else 1.0


def cap_power(f, loads: tuple, u_mem, w_mem: float, f_boost: float, beta: float):
    """p(f) = sum of u G(f) / G(f_cap) over the (share u, cap clock f_cap) loads + w_mem u_mem
    (f, the shares and u_mem floats or arrays of one shape)."""
    g = power_curve(f / f_boost, beta)
    return sum(u * g / power_curve(fc / f_boost, beta) for u, fc in loads) + w_mem * u_mem


def cap_clock(loads: tuple, u_mem, w_mem: float, f_floor: float, f_boost: float, beta: float):
    """The clock in [f_floor, f_boost] at which p(f) = 1 (f_boost when it stays under the cap):
    f = f_boost G^-1((1 - w_mem u_mem) / sum(u / G(f_cap))). Shares and u_mem: floats or arrays
    (elementwise)."""
    xp = _xp(u_mem)
    k = sum(u / power_curve(fc / f_boost, beta) for u, fc in loads)
    at_boost = (k <= 0) | (cap_power(f_boost, loads, u_mem, w_mem, f_boost, beta) <= 1.0)
    f = f_boost * power_curve_inverse(xp.maximum(1.0 - w_mem * u_mem, 0.0) / xp.where(k > 0, k, 1.0), beta)
    return xp.where(at_boost, f_boost, xp.minimum(xp.maximum(f, f_floor), f_boost))


def gemm_speed(f, f_cal: float, f_boost: float, boost_speedup: float):
    """GEMM compute speed at clock f over the calibrated sustained rate, f_cal being the sustained
    GEMM clock of the GPU whose efficiencies were calibrated: f / f_cal below it (e.g. the same die
    under a lower power cap; a compute-bound GEMM is linear in the clock there, measured from
    1,455 to ~1,750 MHz), above it the line through (f_cal, 1) and (f_boost, boost_speedup).
    ``f``: a float or an array."""
    xp = _xp(f)
    if f_boost <= f_cal:
        return xp.where(f <= f_cal, f / f_cal, 1.0)
    return xp.where(f <= f_cal, f / f_cal, 1.0 + (boost_speedup - 1.0) * (f - f_cal) / (f_boost - f_cal))


def power_state(by_category: Mapping[str, float], step_s: float, gpu_key: str, f_boost: float,
                boost_speedup: float, attention: str | None = None) -> PowerState | None:
    """The clock and speeds of a step whose categories were timed at the calibrated rates (GEMMs
    at the sustained rate, attention at its boost-clock rate): "matmul_compute" (compute-bound
    GEMMs), "matmul_power" (the same time weighted by power per second; default: unweighted),
    "attention", and the MEMORY categories. ``attention`` names the attention kernel
    (Stack.attention) for its cap clock."""
    g, a = by_category.get("matmul_compute", 0.0), by_category.get("attention", 0.0)
    gp = by_category.get("matmul_power", g)
    mem = sum(by_category.get(c, 0.0) for c in MEMORY)
    return _power_state(g, a, gp, mem, step_s, gpu_key, f_boost, boost_speedup, attention)


@functools.lru_cache(maxsize=4096)
def _power_state(g: float, a: float, gp: float, mem: float, step_s: float, gpu_key: str, f_boost: float,
                 boost_speedup: float, attention: str | None) -> PowerState | None:
    """power_state on its scalars (a pure function of them and the GPU's power data, so memoised:
    a host band's second pass or a repeated estimate finds the clock it already solved)."""
    s = power_states(g, a, gp, mem, step_s, gpu_key, f_boost, boost_speedup, attention)
    if s is None:
        return None
    f = float(s.clock_hz)
    return PowerState(f, float(s.speed), float(s.attention_speed), f < f_boost)


@dataclass(frozen=True)
class PowerStates:
    """power_state's clock (Hz), GEMM speed and attention speed, each a float or an array."""

    clock_hz: Any
    speed: Any
    attention_speed: Any


def power_states(g, a, gp, mem, step_s, gpu_key: str, f_boost: float, boost_speedup: float,
                 attention: str | None = None) -> PowerStates | None:
    """The power state of one step (float inputs) or of many (arrays of one shape, elementwise:
    sim/many.py): g, a = compute-bound GEMM and attention seconds at the calibrated rates, gp = g
    weighted by power per second, mem = memory-bound seconds, step_s = the window. None where the
    GPU has no clock model.

    Fixed point: at clock f the GEMM time is g / gemm_speed(f), the attention time a f_boost / f,
    the step changes by the difference; five iterations settle it to well under 0.1 %. A step
    whose time reaches 0 keeps the clock it had."""
    params = clock_params(gpu_key)
    if params is None or boost_speedup <= 1.0:
        return None
    xp = _xp(g)
    f_gemm, w_mem = params
    beta, f_cal = curve_beta(gpu_key), calibration_clock(gpu_key)
    f_line = calibration_boost(gpu_key) or f_boost
    f_att = same_power_clock(attention_clock_ratio(attention) * f_cal, f_cal, f_gemm, f_boost, beta)
    f = np.full(np.shape(g), f_gemm) if xp is np else f_gemm
    live = True
    for _ in range(5):
        speed = gemm_speed(f, f_cal, f_line, boost_speedup)
        tg, ta = g / speed, a * f_boost / f
        step = step_s + (tg - g) + (ta - a)
        live = live & (step > 0)
        safe = xp.where(live, step, 1.0)
        loads = ((xp.minimum(gp / speed / safe, 1.0), f_gemm), (xp.minimum(ta / safe, 1.0), f_att))
        f = xp.where(live, cap_clock(loads, xp.minimum(mem / safe, 1.0), w_mem, f_gemm, f_boost, beta), f)
    return PowerStates(f, gemm_speed(f, f_cal, f_line, boost_speedup), f / f_boost)


class _Floats:
    """The numpy functions the power formulas use, on Python floats (a scalar estimate pays no
    numpy call): the same formula code serves one step and arrays of many."""

    where = staticmethod(lambda c, a, b: a if c else b)
    minimum = staticmethod(min)
    maximum = staticmethod(max)
    sqrt = staticmethod(math.sqrt)
    cbrt = staticmethod(math.cbrt)


def _xp(x: Any) -> Any:
    """numpy for an array argument, _Floats for a float."""
    return np if isinstance(x, np.ndarray) else _Floats


@functools.lru_cache(maxsize=64)
def calibration_clock(gpu_key: str) -> float:
    """Sustained GEMM clock (Hz) of the GPU whose calibrated efficiencies ``gpu_key`` uses (itself,
    or the same-die GPU of sim/data/efficiency/transfer.toml): the clock its "speed 1" means. A GPU
    whose efficiencies were measured on a die with another per-clock tensor rate carries that clock
    on its own axis (power.toml [gemm_calibration_clock]: the calibration GPU's sustained clock
    times the ratio of the tensor clocks of the two dense peaks, the same work per SM-clock)."""
    rec = _power_table("gemm_calibration_clock").get(gpu_key)
    if rec is not None:
        return rec.value * 1e6
    src = calibration_source(gpu_key) or gpu_key
    params = clock_params(src) or clock_params(gpu_key)
    if params is None:
        raise ValueError(f"calibration_clock: {gpu_key!r} has no clock model (clock_params is None)")
    return params[0]


@functools.lru_cache(maxsize=64)
def calibration_boost(gpu_key: str) -> float | None:
    """The calibration GPU's boost clock (Hz) on ``gpu_key``'s axis (power.toml
    [gemm_calibration_boost]), where gemm_speed's line reaches boost_speedup; None: the GPU's own
    boost clock (same die as its calibration GPU)."""
    rec = _power_table("gemm_calibration_boost").get(gpu_key)
    return rec.value * 1e6 if rec is not None else None


def _power_table(name: str) -> Mapping[str, Any]:
    from ..hwdb.prices import load_prices
    return load_prices().power.get(name, {})
