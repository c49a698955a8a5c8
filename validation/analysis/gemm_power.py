"""The power history of back-to-back GEMM microbenchmarks: the board's power average at the
start of each case's timed window, carried through a run file's GEMM cases in order.

The controller model is the simulator's (sim/clock.py through the public facade:
``mechsim.power_demand`` and ``mechsim.power_average``): a first-order average x of the board
power in units of the cap's headroom over idle, dx/dt = (p - x) / tau. The runner runs the cases
back to back (cases_gemm.py; run_suite.py), so a window starts at boost only if the cases before
it left headroom. What validation knows is what a user can state: each window is predicted with
``mechsim.RunPattern(busy_s=window, start_load=x, report="middle")``.

The timeline of each case comes from what the record carries: ``extra.case_wall_s`` (whole
case), the timed window n x inner x median, the GEMM work before it (3 warm-up calls, the
``extra.t_estimate_s`` burst, the first graph replay); the rest of the case is setup at idle
power; between groups the runner's own overhead, (run wall_s - sum of case walls) / groups.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import power_average

WARMUP_CALLS = 3          # timing.measure's warm-up calls
ESTIMATE_BURST_S = 2e-3   # timing.estimate_call_s: a burst of >= 2 x TARGET_S (or one call if longer)
TARGET_S = 1e-3           # timing.TARGET_S: the first graph replay (inner calls) lasts at least this


@dataclass(frozen=True)
class CaseTimeline:
    """Seconds of one GEMM case in run order: idle before its GEMM work, GEMM work before the
    timed window, the window."""

    idle_s: float
    prework_s: float
    window_s: float


def case_timeline(rec: dict) -> CaseTimeline:
    """The case's idle, pre-window GEMM and window seconds (module docstring)."""
    t, extra = rec["timing"], rec.get("extra") or {}
    t_call = float(extra.get("t_estimate_s") or t["median_s"])
    window = t["n"] * t.get("inner", 1) * t["median_s"]
    burst = t_call if t_call > 2 * ESTIMATE_BURST_S else max(ESTIMATE_BURST_S, t_call)
    prework = WARMUP_CALLS * t_call + burst + max(TARGET_S, t["inner"] * t["median_s"])
    if "reps" in rec["params"]:   # window cases: fixed replays, inner 1, no estimate burst
        prework = WARMUP_CALLS * t_call + t["median_s"]
    wall = float(extra.get("case_wall_s") or (window + prework))
    return CaseTimeline(max(0.0, wall - window - prework), prework, window)


def loads_at_windows(cases: list[CaseTimeline], demands: list[float], group_start: list[bool],
                     group_gap_s: float, hw: str) -> list[float]:
    """The power average at the start of each case's timed window, carrying the state through
    the run in order (x = 0 at the first GEMM case: the run's idle launch group); ``demands``:
    each case's power at boost (mechsim.power_demand)."""
    x, out = 0.0, []
    for i, (c, p) in enumerate(zip(cases, demands)):
        if group_start[i] and i:
            x = power_average(x, 0.0, group_gap_s, hw)
        x = power_average(power_average(x, 0.0, c.idle_s, hw), p, c.prework_s, hw)
        out.append(min(max(x, 0.0), 1.0))
        x = power_average(x, p, c.window_s, hw)
    return out


@dataclass(frozen=True)
class RunHistory:
    """The GEMM records of one run, in order, with what the power history needs."""

    case_ids: tuple[str, ...]
    cases: tuple[CaseTimeline, ...]
    group_start: tuple[bool, ...]
    group_gap_s: float
    params: tuple[dict, ...] = ()

    def start_loads(self, demands: list[float], hw: str) -> dict[str, float]:
        """case id -> power average at the start of its timed window."""
        x = loads_at_windows(list(self.cases), demands, list(self.group_start), self.group_gap_s, hw)
        return dict(zip(self.case_ids, x))


def run_history(run: dict) -> RunHistory:
    """RunHistory of a run file (its GEMM records with a timing, in order)."""
    recs = gemm_records(run)
    groups = [(r.get("env_sample") or {}).get("group") for r in recs]
    starts = tuple(i == 0 or groups[i] != groups[i - 1] for i in range(len(recs)))
    walls = sum((r.get("extra") or {}).get("case_wall_s") or 0.0 for r in run["records"])
    n_groups = len({(r.get("env_sample") or {}).get("group") for r in run["records"]}) or 1
    gap = max(0.0, (float(run.get("wall_s") or walls) - walls) / n_groups)
    return RunHistory(tuple(r["case_id"] for r in recs), tuple(case_timeline(r) for r in recs), starts, gap,
                      tuple(r["params"] for r in recs))


def gemm_records(run: dict) -> list[dict]:
    return [r for r in run["records"] if r["kind"] == "gemm" and r.get("timing")]
