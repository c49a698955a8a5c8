"""The Estimate page's counters view: per op, the unit that binds and the achieved fraction of each
unit's peak, as Nsight Compute shows one launch (sim/counters.py, docs/counters.md).

counter_records is a pure function (unit conversion only: fractions to percent, seconds to us);
estimate_counters caches the API call by the page's frozen inputs."""

from __future__ import annotations

import math

import streamlit as st

from . import cached, common

CAPTION = ("Which unit binds each op and how close it runs to that unit's peak, as Nsight Compute's "
           "speed-of-light section reads one launch: tensor pipes, SM pipes (FP32 / integer / SFU), HBM, "
           "L2; 'latency' when no unit reaches 60 % of its peak. On H200 the binding unit agreed with "
           "ncu on 37 of 40 held-out random op shapes (docs/counters.md).")


def _pct(x: float) -> float | None:
    return None if math.isnan(x) else round(100.0 * x, 1)


def counter_records(cs) -> list[dict]:
    """One flat record per OpCounters, slowest instance first."""
    return [{"op": c.name, "kind": c.kind, "phase": c.phase, "binds": c.binding, "tensor_pct": _pct(c.tensor),
             "sm_pipes_pct": _pct(c.sm), "hbm_pct": _pct(c.hbm), "l2_pct": _pct(c.l2),
             "time_per_launch_us": round(c.time_s * 1e6, 2), "l2_regime": c.l2_regime, "roofline_side": c.model_bound}
            for c in sorted(cs, key=lambda c: -c.time_s)]


@st.cache_resource(max_entries=64, show_spinner=False)
def estimate_counters(inp: cached.EstimateInputs) -> list[dict]:
    from ..sim.counters import estimate_counters as run
    return counter_records(run(inp.workload(), inp.hw, inp.stack, inp.overrides()))


def render(inp: cached.EstimateInputs) -> None:
    """Computed only when asked (a toggle): an expander's body runs on every rerun even closed, and
    the counters are a second pass over the step's ops, as long as the estimate itself."""
    with st.expander("Counters view: which unit binds each op"):
        st.caption(CAPTION)
        if not st.toggle("Compute", value=False, key="est.counters.go"):
            return
        recs = common.attempt(lambda: estimate_counters(inp), "counters")
        if recs:
            common.table(recs, height=320)
