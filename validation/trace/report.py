"""Predicted vs measured per op and per category for one trace and one described workload."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

from typing import Any

import numpy as np

from ...sim.estimate import estimate, prepare
from ...sim.stacks import get_stack
from .events import Trace
from .match import Match, match, short_name
from .timeline import Timeline, build_timeline

KIND_CATEGORY = {"matmul": "gemm", "attention": "attention", "collective": "communication"}
CATEGORY_ORDER = ("gemm", "attention", "memory", "communication", "comm_exposed", "comm_hidden",
                  "host_launch_gaps", "step", "idle_between_steps", "unknown")


@dataclass(frozen=True)
class CategoryRow:
    category: str
    predicted_s: float | None     # None: mechsim does not predict this quantity
    measured_s: float

    @property
    def error(self) -> float:
        if self.predicted_s is None or self.measured_s <= 0:
            return math.nan
        return self.predicted_s / self.measured_s - 1.0


@dataclass(frozen=True)
class TraceReport:
    trace: str
    workload: str
    gpu: str
    stack: str
    steps: int
    match: Match
    categories: tuple[CategoryRow, ...]
    step_spans_s: tuple[float, ...]

    def to_dict(self) -> dict:
        m = self.match
        return {"trace": self.trace, "workload": self.workload, "gpu": self.gpu, "stack": self.stack,
                "steps": self.steps, "matched_fraction": m.matched_fraction, "gpu_s_per_step": m.gpu_s,
                "step_spans_s": list(self.step_spans_s),
                "categories": [{**asdict(c), "error": _nan_none(c.error)} for c in self.categories],
                "ops": [{**asdict(r), "error": _nan_none(r.error)} for r in m.rows],
                "unmatched": [asdict(u) for u in m.unmatched]}


def _nan_none(x: float) -> float | None:
    return None if math.isnan(x) else x


def prediction(workload: Any, hw: Any, stack: str | None) -> tuple[Any, tuple]:
    """(estimate, model Op records of one GPU in the estimate's op order)."""
    est = estimate(workload, hw, stack)
    ops = prepare(workload, get_stack(est.stack).fused).table.ops
    if len(ops) != len(est.ops) or any(o.name != e.name for o, e in zip(ops, est.ops)):
        raise ValueError("this plan's per-GPU op list differs from its estimate's, so its kernels cannot be "
                         "matched op by op; describe the workload with fewer parallel dimensions")
    return est, ops


def _measured_categories(tl: Timeline) -> dict[str, float]:
    in_step = tl.step >= 0
    n = max(len(tl.steps), 1)
    out: dict[str, float] = {}
    for fam, d in zip((f for f, s in zip(tl.family, in_step) if s), tl.trace.dur_us[in_step].tolist()):
        out[fam.category] = out.get(fam.category, 0.0) + d * 1e-6 / n
    st = tl.steps
    out["comm_exposed"] = float(np.mean([s.comm_exposed_s for s in st])) if st else 0.0
    out["comm_hidden"] = float(np.mean([s.comm_hidden_s for s in st])) if st else 0.0
    out["host_launch_gaps"] = float(np.mean([s.gaps_s for s in st])) if st else 0.0
    out["step"] = float(np.mean([s.span_s for s in st])) if st else 0.0
    out["idle_between_steps"] = _between_steps(tl)
    return out


def _between_steps(tl: Timeline) -> float:
    t, end = tl.trace, tl.trace.start_us + tl.trace.dur_us
    firsts = [t.start_us[tl.step == s.index].min() for s in tl.steps]
    lasts = [end[tl.step == s.index].max() for s in tl.steps]
    gaps = [max(0.0, f - e) for f, e in zip(firsts[1:], lasts[:-1])]
    return float(np.mean(gaps)) * 1e-6 if gaps else 0.0


def _predicted_categories(est: Any, ops: tuple) -> dict[str, float]:
    out = {"gemm": 0.0, "attention": 0.0, "memory": 0.0, "communication": 0.0}
    for op, e in zip(ops, est.ops):
        out[KIND_CATEGORY.get(op.kind, "memory")] += e.time_s
    exposed = sum(est.exposed_comm.values())
    out.update(comm_exposed=exposed, comm_hidden=max(0.0, out["communication"] - exposed),
               host_launch_gaps=est.launch_overhead_s, step=est.step_time_s)
    return out


def categories(tl: Timeline, est: Any, ops: tuple) -> tuple[CategoryRow, ...]:
    meas, pred = _measured_categories(tl), _predicted_categories(est, ops)
    return tuple(CategoryRow(c, pred.get(c), meas.get(c, 0.0)) for c in CATEGORY_ORDER
                 if c in pred or meas.get(c, 0.0) > 0)


def compare_trace(trace: Trace, workload: Any, hw: Any = "h200_sxm", stack: str | None = None) -> TraceReport:
    """The whole comparison: timeline, op match and categories."""
    tl = build_timeline(trace)
    est, ops = prediction(workload, hw, stack)
    m = match(tl, ops, est.ops)
    return TraceReport(trace.path, est.workload, est.gpu, est.stack, len(tl.steps), m, categories(tl, est, ops),
                       tuple(s.span_s for s in tl.steps))


def _ms(x: float | None) -> str:
    return "       -" if x is None else f"{x * 1e3:8.3f}"


def _err(x: float) -> str:
    return "      -" if math.isnan(x) else f"{x:+7.1%}"


def text_report(r: TraceReport, top: int = 25) -> str:
    m = r.match
    lines = [f"trace {r.trace}: {r.steps} steps; {r.workload} on {r.gpu}, stack {r.stack}",
             f"GPU kernel time {m.gpu_s * 1e3:.3f} ms/step; matched to ops {m.matched_fraction:.1%}", "",
             f"{'category':<20} {'pred ms':>8} {'meas ms':>8} {'error':>7}"]
    lines += [f"{c.category:<20} {_ms(c.predicted_s)} {_ms(c.measured_s)} {_err(c.error)}" for c in r.categories]
    lines += ["", f"{'phase':<9} {'group':<22} {'pred ms':>8} {'meas ms':>8} {'error':>7} {'kern p/m':>11}  ops"]
    rows = sorted(m.rows, key=lambda x: -max(x.predicted_s, x.measured_s))
    for x in rows[:top]:
        g = x.group + (f" {x.shape[0][0]}x{x.shape[0][1]}k{x.shape[1]}" if x.shape else "")
        lines.append(f"{x.phase:<9} {g:<22} {_ms(x.predicted_s)} {_ms(x.measured_s)} {_err(x.error)} "
                     f"{x.predicted_kernels:5.0f}/{x.measured_kernels:<5.0f}  {', '.join(x.ops)[:70]}")
    if len(rows) > top:
        lines.append(f"... {len(rows) - top} more rows (--top, or --json for all)")
    lines += ["", f"unmatched kernels: {len(m.unmatched)} names, {m.gpu_s - m.matched_s:.6f} s/step"]
    lines += [f"  {u.phase:<9} {u.family:<12} {u.measured_s * 1e3:8.3f} ms  x{u.kernels:<5.0f} {short_name(u.name)}"
              for u in m.unmatched[:top]]
    return "\n".join(lines)


def json_report(r: TraceReport) -> str:
    return json.dumps(r.to_dict(), indent=1)
