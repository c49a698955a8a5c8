"""The power history of back-to-back GEMM microbenchmarks (validation side only).

The simulator's GEMM efficiency is the sustained (power-capped) rate. A microbenchmark's timed
window starts at boost clock only if the board's power controller has headroom left, and that
depends on the cases run before it in the same run file (the runner runs them back to back:
cases_gemm.py; run_suite.py). The controller is modelled as a first-order average of the board
power, in units of the cap's headroom over idle (sim/power.py's units),

    x = (P_avg - idle) / (tdp - idle),      dx/dt = (p - x) / tau,

with p the power the running work demands at boost clock: a compute-bound GEMM draws
``gemm.boost_power`` (> 1: over the cap), memory-bound time draws w_mem (sim/power.py's
memory-bound activity weight), host gaps and setup draw idle (p = 0). While x < 1 the clock
stays at boost; when x reaches 1 the clock drops so that p = 1 (x stays at 1). From a state
x0 < 1, work of demand p > 1 keeps the boost for

    t_boost = tau * ln((p - x0) / (p - 1))          (0 when x0 >= 1, inf when p <= 1).

The timeline of each case comes from what the record carries: ``extra.case_wall_s`` (whole
case), the timed window n x inner x median, the GEMM work before it (3 warm-up calls, the
``extra.t_estimate_s`` burst, the first graph replay); the rest of the case is setup at idle
power; between groups the runner's own overhead, (run wall_s - sum of case walls) / groups.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

WARMUP_CALLS = 3          # timing.measure's warm-up calls
ESTIMATE_BURST_S = 2e-3   # timing.estimate_call_s: a burst of >= 2 x TARGET_S (or one call if longer)
TARGET_S = 1e-3           # timing.TARGET_S: the first graph replay (inner calls) lasts at least this


@dataclass(frozen=True)
class CaseTimeline:
    """Seconds of one GEMM case in run order: idle before its GEMM work, GEMM work before the
    timed window, the window; ``activity`` = compute-bound share of the GEMM's time (0..1)."""

    idle_s: float
    prework_s: float
    window_s: float
    activity: float


def demand(activity: float, boost_power: float, w_mem: float) -> float:
    """p = boost_power * a + w_mem * (1 - a): power of a GEMM at boost over idle, in (tdp - idle)."""
    return boost_power * activity + w_mem * (1.0 - activity)


def boost_left_s(x0: float, p: float, tau_s: float) -> float:
    """t_boost = tau ln((p - x0) / (p - 1)): seconds at boost before the average reaches the cap."""
    if p <= 1.0:
        return math.inf
    if x0 >= 1.0:
        return 0.0
    return tau_s * math.log((p - x0) / (p - 1.0))


def relax(x0: float, p: float, dt_s: float, tau_s: float) -> float:
    """x after dt at demand p: p + (x0 - p) exp(-dt / tau), held at 1 once the cap is reached."""
    x = p + (x0 - p) * math.exp(-dt_s / tau_s)
    return min(x, 1.0) if p > 1.0 else x


def case_timeline(rec: dict, activity: float) -> CaseTimeline:
    """The case's idle, pre-window GEMM and window seconds (module docstring)."""
    t, extra = rec["timing"], rec.get("extra") or {}
    t_call = float(extra.get("t_estimate_s") or t["median_s"])
    window = t["n"] * t.get("inner", 1) * t["median_s"]
    burst = t_call if t_call > 2 * ESTIMATE_BURST_S else max(ESTIMATE_BURST_S, t_call)
    prework = WARMUP_CALLS * t_call + burst + max(TARGET_S, t["inner"] * t["median_s"])
    if "reps" in rec["params"]:   # window cases: fixed replays, inner 1, no estimate burst
        prework = WARMUP_CALLS * t_call + t["median_s"]
    wall = float(extra.get("case_wall_s") or (window + prework))
    return CaseTimeline(max(0.0, wall - window - prework), prework, window, activity)


def boost_at_windows(cases: list[CaseTimeline], group_start: list[bool], group_gap_s: float,
                     boost_power: float, tau_s: float, w_mem: float) -> np.ndarray:
    """Seconds of boost left at the start of each case's timed window, carrying the state
    through the run in order (x = 0 at the first GEMM case: the run's idle launch group)."""
    x, out = 0.0, np.empty(len(cases))
    for i, c in enumerate(cases):
        if group_start[i] and i:
            x = relax(x, 0.0, group_gap_s, tau_s)
        p = demand(c.activity, boost_power, w_mem)
        x = relax(relax(x, 0.0, c.idle_s, tau_s), p, c.prework_s, tau_s)
        out[i] = boost_left_s(x, p, tau_s)
        x = relax(x, p, c.window_s, tau_s)
    return out


def boosted_share(window_s: np.ndarray | float, boost_left: np.ndarray | float, decay_s: float) -> np.ndarray:
    """Boosted share of the window's median (middle) replay:
    min(1, exp(-(window / 2 - t_boost) / decay)), decay = how fast the clock steps down."""
    mid = np.asarray(window_s, dtype=float) / 2.0
    with np.errstate(invalid="ignore"):
        z = np.where(np.isinf(boost_left), -np.inf, mid - np.asarray(boost_left, dtype=float))
    return np.minimum(1.0, np.exp(-z / decay_s))


@dataclass(frozen=True)
class RunHistory:
    """The GEMM records of one run, in order, with what the power history needs."""

    case_ids: tuple[str, ...]
    cases: tuple[CaseTimeline, ...]
    group_start: tuple[bool, ...]
    group_gap_s: float

    def boost_left(self, eff, w_mem: float) -> dict[str, float]:
        b = boost_at_windows(list(self.cases), list(self.group_start), self.group_gap_s,
                             eff.get("gemm.boost_power"), eff.get("gemm.power_tau_s"), w_mem)
        return dict(zip(self.case_ids, b.tolist()))


def run_history(run: dict, activity_of) -> RunHistory:
    """RunHistory of a run file; ``activity_of(rec)`` gives a GEMM record's compute-bound share."""
    recs = [r for r in run["records"] if r["kind"] == "gemm" and r.get("timing")]
    groups = [(r.get("env_sample") or {}).get("group") for r in recs]
    starts = tuple(i == 0 or groups[i] != groups[i - 1] for i in range(len(recs)))
    walls = sum((r.get("extra") or {}).get("case_wall_s") or 0.0 for r in run["records"])
    n_groups = len({(r.get("env_sample") or {}).get("group") for r in run["records"]}) or 1
    gap = max(0.0, (float(run.get("wall_s") or walls) - walls) / n_groups)
    return RunHistory(tuple(r["case_id"] for r in recs), tuple(case_timeline(r, activity_of(r)) for r in recs),
                      starts, gap)


@functools.lru_cache(maxsize=8)
def w_mem_of(gpu: str) -> float:
    from ..sim.power import clock_params
    cp = clock_params(gpu)
    return cp[1] if cp else 0.0
