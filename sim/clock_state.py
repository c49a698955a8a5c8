"""Kernel times at the clock a RunPattern (sim/clock.py) gives the work.

    sustained / duty cycle   the power state of sim/power.py from the work's time shares, the
                             shares scaled by the duty (idle time draws idle power):
                             GEMM compute / speed(f), the other ops' compute x f_boost / f
    burst                    a time mix of the work at boost (GEMM compute / boost_speedup, the
                             rest as calibrated: their microbenchmarks ran at boost) and at the
                             sustained state, weighted by the boosted share b of the burst
                             (sim/clock.burst_boosted_share, from the work's power demand p)

The demand at boost of a set of ops is the time-weighted p = boost_power a + w_mem (1 - a) with
a GEMM's tensor activity a = c / (max(c, memory) + fixed) x efficiency / peak_fraction[dtype]
(c = compute at boost: a misaligned or wave-starved GEMM draws less), 0 for the other ops.
"""

from __future__ import annotations

import numpy as np

from .clock import RunPattern, burst_boosted_share, demand, has_window_model
from .kernels import ATTENTION, MATMUL, KernelTimes, _peak_fraction
from .power import clock_params, power_state
from .prepare import at_compute_speed, compute_bound_gemms, gemm_power_weight, with_tensor_power


def gemm_activity(t, k: KernelTimes, eff) -> np.ndarray:
    """Tensor activity at boost of each row (0 for non-GEMM rows; module docstring)."""
    mm = t.kind == MATMUL
    c = k.compute_s / eff.get("gemm.boost_speedup")
    share = c / np.maximum(np.maximum(c, k.memory_s) + k.fixed_s, 1e-30)
    return np.where(mm, share * k.efficiency / _peak_fraction(t.dtype, eff), 0.0)


def work_demand(t, k: KernelTimes, eff, w_mem: float) -> float:
    """Time-weighted power demand at boost of the rows (module docstring)."""
    g = k.gpu_s * t.count
    if g.sum() <= 0:
        return 0.0
    a = gemm_activity(t, k, eff)
    return float(np.dot(g, demand(a, eff.get("gemm.boost_power"), w_mem)) / g.sum())


def at_boost(t, k: KernelTimes, eff) -> KernelTimes:
    """Kernel times with the GEMMs' compute at the boost rate (gemm.boost_speedup over sustained)."""
    return at_compute_speed(t, k, eff.get("gemm.boost_speedup"), 1.0)


def at_sustained(t, k: KernelTimes, gpu, eff, duty: float = 1.0) -> KernelTimes:
    """Kernel times at the sustained power state of the rows run back to back, idle (1 - duty)."""
    g = k.gpu_s * t.count
    busy = float(g.sum())
    gemm, att = float(g[compute_bound_gemms(t, k)].sum()), float(g[t.kind == ATTENTION].sum())
    ps = power_state(with_tensor_power({"matmul_compute": gemm, "attention": att, "memory_bound": busy - gemm - att,
                                        "matmul_power": gemm * gemm_power_weight(t, k, gpu)}, t, k, gpu,
                                       "memory_bound"), busy / duty, gpu.key,
                     gpu.boost_clock_hz, eff.get("gemm.boost_speedup"))
    return k if ps is None else at_compute_speed(t, k, ps.speed, ps.attention_speed)


def mix(a: KernelTimes, b: KernelTimes, share_a: float) -> KernelTimes:
    """Time mix share_a a + (1 - share_a) b of two kernel-time sets."""
    w = float(share_a)
    col = lambda x, y: w * x + (1.0 - w) * y  # noqa: E731
    return KernelTimes(col(a.compute_s, b.compute_s), a.memory_s, a.fixed_s, col(a.gpu_s, b.gpu_s), a.efficiency)


def at_pattern(t, k: KernelTimes, gpu, eff, pattern: RunPattern) -> KernelTimes:
    """Kernel times of the rows run as ``pattern`` says (module docstring); unchanged where the
    GPU's efficiency data has no power-window model."""
    if not has_window_model(eff):
        return k
    sust = at_sustained(t, k, gpu, eff, pattern.duty)
    if pattern.sustained:
        return sust
    params = clock_params(gpu.key)
    p = work_demand(t, k, eff, params[1] if params else 0.0)
    return mix(at_boost(t, k, eff), sust, burst_boosted_share(pattern, p, eff))


def burst_step(t, k_cal: KernelTimes, k_sust: KernelTimes, gpu, eff, pattern: RunPattern) -> KernelTimes:
    """A step's kernel times in a burst: the mix of the boost-rate times (from the calibrated
    ``k_cal``) and the sustained ``k_sust`` by the burst's boosted share."""
    if not has_window_model(eff):
        return k_sust
    params = clock_params(gpu.key)
    p = work_demand(t, k_cal, eff, params[1] if params else 0.0)
    return mix(at_boost(t, k_cal, eff), k_sust, burst_boosted_share(pattern, p, eff))
