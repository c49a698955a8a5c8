"""Per-category error of the step records: is a step's accuracy bought by errors that cancel?

A step record that carries a kernel profile (``extra.kernels``: one profiled call's device
kernels, the top 40 by time, from runners/models.kernel_summary) is split into categories two
ways and compared:

  measured   each profiled kernel's time goes to the category of its family (the rule table of
             ``mechsim trace import``, validation/trace/kernel_families.toml); what the top 40
             leave out (``device_busy_us`` minus their sum) is reported as ``tail`` (small
             kernels: memory-bound as a rule, not split further); host = the timed median
             minus the device-busy time (launch gaps, where positive)
  predicted  the estimate `mechsim validate compare` makes for the record (public API, the
             record's own host-speed probe), its ops' times summed by kind the way the trace
             report does (matmul -> gemm, attention, collective -> communication, the rest
             memory), at the sustained power state (as the trace import), or with
             ``burst_state`` at the profiled call's: ONE call after the profiler's start-up pause,
             ``estimate(..., run=burst(busy))`` from an idle board (LOG "Step categories: host idle
             definition, the profiled call's power state, split-KV decode attention"). Records
             whose profile carries ``profile_lead_calls`` >= 1 (runners/models.kernel_summary)
             recorded their call after ~1 s of back-to-back calls inside the profiler, at the
             timed loop's state: the sustained prediction is the like-for-like one there; host = the
             same quantity as measured: the timed (sustained) step minus the predicted kernel time.

Error = predicted / measured - 1 per category. GPU user annotations the profiler lists among
device events (``Optimizer.step#...``, ``ProfilerStep#...``: ranges, not kernels) are left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ... import burst, estimate
from ..records import iter_records, run_paths
from ..trace.families import classify
from ..trace.report import KIND_CATEGORY
from .compare import DATA_DIR, split_of
from .predict import (NotPredicted, gpu_key, host_scale, host_scaled_stack, inference_workload, moe_workload,
                      train_workload)

STEP_KINDS = ("train_step", "prefill", "decode", "moe_step")
CATEGORIES = ("gemm", "attention", "memory", "communication", "host")
# A step is host-bound where the GPU idles >= this share of its timed median: there the idle is
# launch gaps and its error is relative to itself ("host"); in a GPU-bound step the idle is a few
# percent and mostly the power state's difference between the timed steps and the profiled call,
# so its error is given in points of the step ("idle_pts") instead of relative to a near-zero residual.
HOST_BOUND_SHARE = 0.2
ANNOTATION = re.compile(r"^(Optimizer\.|ProfilerStep)")


@dataclass(frozen=True, slots=True)
class CategoryRow:
    """One category of one profiled step record."""

    run_id: str
    case_id: str
    kind: str
    split: str
    category: str
    predicted_s: float
    measured_s: float
    per_s: float = 0.0     # error relative to this (the timed step: "idle" of a GPU-bound step), else to measured_s

    @property
    def error(self) -> float:
        return (self.predicted_s - self.measured_s) / (self.per_s or self.measured_s)


@dataclass(frozen=True, slots=True)
class StepCategories:
    """Both splits of one record, plus what the kernel list could not place."""

    run_id: str
    case_id: str
    kind: str
    split: str
    rows: tuple[CategoryRow, ...]
    tail_s: float          # device time outside the profiled top-40 kernels
    unknown_s: float       # profiled kernel time no family rule matched
    step_measured_s: float
    step_predicted_s: float


def measured_categories(rec: dict) -> tuple[dict[str, float], float, float]:
    """(seconds per category, tail seconds, unknown-family seconds) from ``rec['extra']``.

    kernel busy = device_busy - annotation ranges; tail = kernel busy - the listed kernels;
    host = max(0, timed median - kernel busy)."""
    ex = rec["extra"]
    out = dict.fromkeys(CATEGORIES, 0.0)
    ranges = listed = unknown = 0.0
    for k in ex["kernels"]:
        s = k["total_us"] * 1e-6
        if ANNOTATION.match(k["name"]):
            ranges += s
            continue
        listed += s
        cat = classify(k["name"]).category
        if cat == "unknown":
            unknown += s
        else:
            out[cat] += s
    busy = ex["device_busy_us"] * 1e-6 - ranges
    out["host"] = max(0.0, rec["timing"]["median_s"] - busy)
    return out, max(0.0, busy - listed), unknown


def step_estimate(rec: dict, run: dict, profiled: bool = False) -> Any:
    """The estimate `validate compare` makes for a step record, as an Estimate; with ``profiled``
    at the power state of the one profiled call (a burst of its predicted busy time from idle)."""
    p, gpu = rec["params"], gpu_key(run["env"])
    scale = host_scale(run, rec, gpu)
    if rec["kind"] == "train_step":
        w = train_workload(p)
    elif rec["kind"] in ("prefill", "decode"):
        w = inference_workload(p, rec["kind"])
    elif rec["kind"] == "moe_step":
        w = moe_workload(p)
    else:
        raise NotPredicted(f"kind {rec['kind']!r} is not a step")
    st = host_scaled_stack(w.stack, gpu, scale)
    est = estimate(w, gpu, st)
    return estimate(w, gpu, st, run=burst(est.gpu_busy_s * 1e3)) if profiled else est


def predicted_categories(est: Any, timed: Any | None = None) -> dict[str, float]:
    """Seconds per category of one estimate's ops; host = the ``timed`` estimate's step (default:
    the same estimate) minus this one's GPU busy time."""
    out = dict.fromkeys(CATEGORIES, 0.0)
    for o in est.ops:
        out[KIND_CATEGORY.get(o.kind, "memory")] += o.time_s
    out["host"] = max(0.0, (timed or est).step_time_s - sum(v for k, v in out.items() if k != "host"))
    return out


def step_categories(run: dict, rec: dict, burst_state: bool = False) -> StepCategories:
    """``burst_state``: predict the GPU categories at the profiled call's power state (a burst from
    idle) instead of the sustained state the trace import and `validate compare` use."""
    meas, tail, unknown = measured_categories(rec)
    est = step_estimate(rec, run)
    pred = predicted_categories(step_estimate(rec, run, profiled=True) if burst_state else est, est)
    median = rec["timing"]["median_s"]
    host_bound = meas["host"] >= HOST_BOUND_SHARE * median
    rows = tuple(CategoryRow(run["run_id"], rec["case_id"], rec["kind"], split_of(rec),
                             c if c != "host" or host_bound else "idle_pts", pred[c], meas[c],
                             median if c == "host" and not host_bound else 0.0)
                 for c in CATEGORIES if meas[c] > 0)
    return StepCategories(run["run_id"], rec["case_id"], rec["kind"], split_of(rec), rows, tail, unknown,
                          rec["timing"]["median_s"], est.step_time_s)


def profiled_steps(paths: Iterable[str | Path] | None = None, burst_state: bool = False) -> list[StepCategories]:
    """Every step record with a kernel profile under ``paths`` (default: the committed runs)."""
    out = []
    for run, rec in iter_records(run_paths(paths or [DATA_DIR])):
        if rec["kind"] in STEP_KINDS and (rec.get("extra") or {}).get("kernels") and run["env"].get("device") != "cpu":
            out.append(step_categories(run, rec, burst_state))
    return out


def mode_of(case_id: str) -> str:
    """The step's kind and execution mode from its case id (train_step/1b/compile/... -> train_step/compile)."""
    parts = case_id.split("/")
    return f"{parts[0]}/{parts[2]}" if len(parts) > 2 else parts[0]


def summary(steps: list[StepCategories], split: str | None = None) -> dict[tuple[str, str], dict[str, float]]:
    """MAPE and signed mean error per (step kind/mode, category), with the row count; ``split``:
    only the records of that split ('held_out', 'calibration')."""
    acc: dict[tuple[str, str], list[float]] = {}
    for s in steps:
        if split is not None and s.split != split:
            continue
        for r in s.rows:
            acc.setdefault((mode_of(s.case_id), r.category), []).append(r.error)
    return {k: {"n": len(v), "mape": sum(abs(e) for e in v) / len(v), "mean": sum(v) / len(v)}
            for k, v in sorted(acc.items())}


def text_table(steps: list[StepCategories]) -> str:
    """The per-category table `mechsim validate compare --categories` prints."""
    lines = ["per-category error of the profiled step records (predicted, sustained state, vs the profiled "
             "kernels; host = timed median - profiled busy, relative where the step is host-bound (idle >= "
             f"{HOST_BOUND_SHARE:.0%}), else idle_pts: points of the step)",
             f"{'step kind/mode':22s} {'category':14s} {'n':>3s} {'MAPE':>7s} {'mean':>7s}"]
    held = summary(steps, "held_out")
    lines[-1] += f" {'held-out n':>10s} {'MAPE':>7s} {'mean':>7s}"
    for (mode, cat), st in summary(steps).items():
        h = held.get((mode, cat))
        ho = f" {h['n']:10d} {h['mape'] * 100:6.1f}% {h['mean'] * 100:+6.1f}%" if h else ""
        lines.append(f"{mode:22s} {cat:14s} {st['n']:3d} {st['mape'] * 100:6.1f}% {st['mean'] * 100:+6.1f}%{ho}")
    tail = sum(s.tail_s for s in steps) / max(sum(s.step_measured_s for s in steps), 1e-30)
    unknown = sum(s.unknown_s for s in steps) / max(sum(s.step_measured_s for s in steps), 1e-30)
    lines.append(f"outside the top-40 kernels: {tail * 100:.1f} % of step time; unmatched kernel names: {unknown * 100:.2f} %")
    return "\n".join(lines)
