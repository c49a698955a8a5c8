"""Per-step kernel timelines: which step and phase each kernel belongs to, and per step the
GPU span, busy time, host/launch gaps and exposed/hidden communication.

Steps are torch.profiler's ``ProfilerStep#N`` ranges (``prof.step()``, on the thread that calls
it); a kernel belongs to the step its launch call (matched by correlation id) falls in. Phase:
``optimizer`` inside torch.optim's ``Optimizer.step#``/``Optimizer.zero_grad#`` ranges
(torch/optim/optimizer.py), ``bwd`` when launched from another thread than the steps' (the
autograd engine runs CUDA backward on its own device thread), else ``fwd``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .events import Trace
from .families import classify

STEP_RANGE = re.compile(r"^ProfilerStep#\d+$")
OPTIMIZER_RANGE = re.compile(r"^Optimizer\.(step|zero_grad)#")
PHASES = ("fwd", "bwd", "optimizer")


@dataclass(frozen=True)
class StepStats:
    """One step on the GPU (seconds): span = first kernel start to last kernel end."""

    index: int
    name: str
    span_s: float
    busy_s: float
    gaps_s: float                # span - busy: the GPU waits inside the step (host launches, syncs)
    comm_s: float
    comm_hidden_s: float         # collective time overlapped by compute kernels on other streams
    comm_exposed_s: float
    kernels: int


@dataclass(frozen=True)
class Timeline:
    """A trace's kernels labelled by step (-1: outside every step), phase and family."""

    trace: Trace
    step: np.ndarray
    phase: np.ndarray            # index into PHASES
    family: tuple                # Family per kernel
    steps: tuple[StepStats, ...]
    step_names: tuple[str, ...]
    main_tid: int


def main_thread(t: Trace) -> int:
    steps = [r for r in t.ranges if STEP_RANGE.match(r.name)]
    if steps:
        return steps[0].tid
    known = t.launch_tid[t.launch_tid >= 0]
    return int(known[0]) if len(known) else -1


def assign_steps(t: Trace, main_tid: int) -> tuple[np.ndarray, tuple[str, ...]]:
    """Step index of each kernel by its launch time (its start where the launch is unknown)."""
    rs = [r for r in t.ranges if STEP_RANGE.match(r.name) and r.tid == main_tid]
    when = np.where(np.isnan(t.launch_us), t.start_us, t.launch_us)
    if not rs:
        return np.zeros(t.n, dtype=np.int64), ("whole trace",)
    starts = np.array([r.start_us for r in rs])
    ends = np.array([r.end_us for r in rs])
    i = np.searchsorted(starts, when, side="right") - 1
    ok = (i >= 0) & (when < ends[np.clip(i, 0, None)])
    return np.where(ok, i, -1), tuple(r.name for r in rs)


def assign_phases(t: Trace, main_tid: int, fams: tuple) -> np.ndarray:
    phase = np.where((t.launch_tid >= 0) & (t.launch_tid != main_tid), 1, 0)
    opt = [r for r in t.ranges if OPTIMIZER_RANGE.match(r.name)]
    for r in opt:
        phase[(t.launch_us >= r.start_us) & (t.launch_us < r.end_us)] = 2
    phase[np.array([f.group == "optimizer" for f in fams], dtype=bool)] = 2
    return phase


def families(t: Trace) -> tuple:
    ops = t.ops
    out = []
    for nid, oi in zip(t.name_id.tolist(), t.op_index.tolist()):
        out.append(classify(t.names[nid], ops[oi].name if oi >= 0 else ""))
    return tuple(out)


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    """Total length covered by intervals [start, end)."""
    if not len(start):
        return 0.0
    o = np.argsort(start, kind="stable")
    s, e = start[o], np.maximum.accumulate(end[o])
    gaps = np.clip(s[1:] - e[:-1], 0.0, None)
    return float(e[-1] - s[0] - gaps.sum())


def _step_stats(i: int, name: str, s: np.ndarray, e: np.ndarray, comm: np.ndarray) -> StepStats:
    busy = union_length(s, e)
    cs, ce = s[comm], e[comm]
    c = union_length(cs, ce)
    both = c + union_length(s[~comm], e[~comm]) - busy   # |comm ∩ compute| by inclusion-exclusion
    span = float(e.max() - s.min())
    return StepStats(i, name, span * 1e-6, busy * 1e-6, (span - busy) * 1e-6, c * 1e-6, both * 1e-6,
                     (c - both) * 1e-6, len(s))


def build_timeline(t: Trace) -> Timeline:
    tid = main_thread(t)
    step, names = assign_steps(t, tid)
    fams = families(t)
    comm = np.array([f.category == "communication" for f in fams], dtype=bool)
    end = t.start_us + t.dur_us
    stats = []
    for i, name in enumerate(names):
        m = step == i
        if m.any():
            stats.append(_step_stats(i, name, t.start_us[m], end[m], comm[m]))
    return Timeline(t, step, assign_phases(t, tid, fams), fams, tuple(stats), names, tid)
