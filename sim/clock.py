"""How the work runs, and the clock the power controller gives it: an input of estimate / estimate_op.

A GPU's SM clock depends on the power history, not only on the kernel: a GEMM stream of a few
milliseconds after idle runs near the boost clock, a sustained stream settles at the power
cap's clock (H200: ~1,470 MHz for an 8192^3 bf16 GEMM at 700 W), a duty cycle in between. The
caller states how the work runs with a ``RunPattern``:

    sustained()                        back to back for seconds and more (the default of estimate)
    burst(ms, after_idle_s, ...)       ms of back-to-back work after idle (or from a stated load)
    duty_cycle(fraction)               busy `fraction` of the time, idle in between, for long

The board's power controller is modelled as a first-order average of the board power in units
of the cap's headroom over idle (sim/power.py's units), x = (P_avg - idle) / (tdp - idle),

    dx/dt = (p - x) / tau

with p the power the running work demands at the boost clock (a compute-bound GEMM draws
``gemm.boost_power`` > 1: over the cap; memory-bound time the memory activity weight; idle 0).
While x < 1 the clock stays at boost; once x reaches 1 it drops so that p = 1. From x0 < 1, work
of demand p > 1 keeps the boost for

    t_boost = tau ln((p - x0) / (p - 1))          (0 when x0 >= 1, inf when p <= 1)

and the clock then steps down over ``gemm.boost_decay_s``: the boosted share at time t into the
burst is min(1, exp(-(t - t_boost) / decay)). tau, p, decay and the boost speed-up are efficiency
data fitted on H200 GEMM microbenchmark windows (sim/data/efficiency/h200_sxm.toml gemm.power_tau_s,
gemm.boost_power, gemm.boost_decay_s, gemm.boost_speedup; validation LOG "Measured power state of
GEMM microbenchmarks" and the window cases of validation/runners/cases_gemm.py: m8192^3 bf16 775
TFLOP/s over 3-10 replays after 1 s idle, 666 over 300).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

Activity = TypeVar("Activity", float, np.ndarray)   # one value, or a column of them

REPORTS = ("mean", "middle")


@dataclass(frozen=True)
class RunPattern:
    """How the work runs. busy_s: seconds of back-to-back work (inf: sustained); idle_before_s:
    idle seconds before it (inf: from an idle board); start_load: the board's power average at
    the start (0 idle .. 1 at the cap), overriding idle_before_s; duty: busy fraction of a long
    repeating period (1: back to back); report: "mean" time per instance over the burst, or the
    instance at its "middle" (what a median over back-to-back replays measures)."""

    busy_s: float = math.inf
    idle_before_s: float = math.inf
    start_load: float | None = None
    duty: float = 1.0
    report: str = "mean"

    def __post_init__(self) -> None:
        if not self.busy_s > 0:
            raise ValueError(f"busy_s must be > 0 seconds, got {self.busy_s!r}")
        if not self.idle_before_s >= 0:
            raise ValueError(f"idle_before_s must be >= 0 seconds, got {self.idle_before_s!r}")
        if self.start_load is not None and not 0.0 <= self.start_load <= 1.0:
            raise ValueError(f"start_load must be in [0, 1] (0 idle, 1 at the power cap), got {self.start_load!r}")
        if not 0.0 < self.duty <= 1.0:
            raise ValueError(f"duty must be in (0, 1], got {self.duty!r}")
        if self.report not in REPORTS:
            raise ValueError(f"report must be one of {REPORTS}, got {self.report!r}")

    @property
    def sustained(self) -> bool:
        return math.isinf(self.busy_s)


def sustained() -> RunPattern:
    """Back to back for long (seconds): the power-capped steady state."""
    return RunPattern()


def burst(ms: float, after_idle_s: float = math.inf, start_load: float | None = None,
          report: str = "mean") -> RunPattern:
    """``ms`` milliseconds of back-to-back work after ``after_idle_s`` of idle (default: from an
    idle board), or from a board whose power average is ``start_load``."""
    if not ms > 0:
        raise ValueError(f"burst ms must be > 0, got {ms!r}")
    return RunPattern(busy_s=ms * 1e-3, idle_before_s=after_idle_s, start_load=start_load, report=report)


def duty_cycle(fraction: float) -> RunPattern:
    """Busy ``fraction`` of the time for long, idle in between (periods much shorter than the
    controller's averaging time: the average power is what the cap sees)."""
    return RunPattern(duty=fraction)


# ---- the first-order power average (units of the cap's headroom over idle) ----

def demand(activity: Activity, boost_power: float, w_mem: float) -> Activity:
    """p = boost_power a + w_mem (1 - a): power at boost of work whose tensor activity is a."""
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
    x = p + (x0 - p) * math.exp(-dt_s / tau_s) if math.isfinite(dt_s) else p
    return min(x, 1.0) if p > 1.0 else x


def boosted_share(window_s: np.ndarray | float, boost_left: np.ndarray | float, decay_s: float) -> np.ndarray:
    """Boosted share of the instance at the middle of a window: min(1, exp(-(window / 2 - t_boost) / decay))."""
    mid = np.asarray(window_s, dtype=float) / 2.0
    with np.errstate(invalid="ignore"):
        z = np.where(np.isinf(boost_left), -np.inf, mid - np.asarray(boost_left, dtype=float))
    return np.minimum(1.0, np.exp(-z / decay_s))


def mean_boosted_share(window_s: float, boost_left: float, decay_s: float) -> float:
    """Boosted share averaged over a window: (min(W, tb) + decay (1 - exp(-(W - tb) / decay))) / W."""
    if math.isinf(boost_left) or boost_left >= window_s:
        return 1.0
    return (boost_left + decay_s * (1.0 - math.exp(-(window_s - boost_left) / decay_s))) / window_s


def start_load(pattern: RunPattern, tau_s: float) -> float:
    """The power average when the work starts: the stated load, else an idle board's after the
    stated idle (from the cap when the idle is finite: the conservative end), 0 after long idle."""
    if pattern.start_load is not None:
        return pattern.start_load
    return relax(1.0, 0.0, pattern.idle_before_s, tau_s)


def burst_boosted_share(pattern: RunPattern, p: float, eff) -> float:
    """Boosted share of a burst of demand p (the mean over it, or the instance at its middle)."""
    tau, decay = eff.get("gemm.power_tau_s"), eff.get("gemm.boost_decay_s")
    tb = boost_left_s(start_load(pattern, tau), p, tau)
    if pattern.report == "middle":
        return float(boosted_share(pattern.busy_s, tb, decay))
    return mean_boosted_share(pattern.busy_s, tb, decay)


def has_window_model(eff) -> bool:
    """True where the efficiency data carries the power-window parameters."""
    return all(n in eff.params for n in ("gemm.power_tau_s", "gemm.boost_power", "gemm.boost_decay_s",
                                         "gemm.boost_speedup"))
