"""One training step of a pipeline, drawn: start and end of every forward and backward
chunk of every micro-batch on every stage (for a Gantt chart).

sim/pipeline.py gives the step in closed form; this module lays the same schedule out in
time with a list scheduler, so a chart can show where the bubble is.

Inputs (seconds, one stage, one micro-batch; the same for every stage, as pipeline.py
assumes): t_f forward, t_b full backward, t_p one boundary send/recv. With vp virtual
stages each chunk takes t_f / vp and t_b / vp.

Per-stage op order (the schedules of sim/pipeline.py):
    gpipe        all m forwards, then all m backwards (Huang et al. 2019, arXiv:1811.06965)
    1f1b         stage s (0-based) runs w = min(p - s - 1, m) warm-up forwards, then
                 alternates one forward and one backward, then drains the last w backwards
                 (PipeDream-Flush; Narayanan et al. 2021, arXiv:2104.04473 sec. 2.2.1)
    interleaved  virtual micro-batches k = 0 .. m vp - 1; forward k is chunk (k // p) % vp of
                 micro-batch (k // (p vp)) p + k % p, backward k the same with the chunk order
                 reversed; warm-up w = min(2 (p - s - 1) + (vp - 1) p, m vp) forwards, then
                 1F1B (Megatron-Core schedules.py forward_backward_pipelining_with_interleaving,
                 get_model_chunk_id / num_warmup_microbatches)
Dependencies: F(j, c) on stage s needs F(j, c) on stage s - 1 (or, on stage 0, F(j, c - 1) on
the last stage); B(j, c) on stage s needs B(j, c) on stage s + 1 (on the last stage: B(j, c + 1)
on stage 0, or for the last chunk F(j, vp - 1) on the same stage). A cross-stage dependency
adds t_p. Each op starts at
    start = max(end of the previous op on its stage, end of its dependency (+ t_p))
and the step is the latest end. With t_p = 0 this reproduces pipeline.py's step:
m (t_f + t_b) + (p - 1)(t_f + t_b) for gpipe / 1f1b and m (t_f + t_b) + (p - 1)(t_f + t_b) / vp
for interleaved (tests/app/test_timeline.py checks both).
zero_bubble and dualpipe split the backward and are not laid out here (ValueError).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import distributed as d
from .kernels import check_rates, check_recipe, kernel_times
from .pipeline import check_schedule
from .prepare import efficiency, hw_rates, prepare, resolve_stack

DRAWN = ("gpipe", "1f1b", "interleaved")


@dataclass(frozen=True, slots=True)
class Interval:
    """One chunk of one micro-batch on one stage (seconds from the step start)."""

    stage: int
    microbatch: int
    chunk: int
    kind: str          # "F" forward, "B" backward
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Timeline:
    """Every interval of one step; ``step_s`` the makespan, ``idle_s`` per stage."""

    schedule: str
    pp: int
    vp: int
    n_microbatches: int
    intervals: tuple[Interval, ...]

    @property
    def step_s(self) -> float:
        return max(i.end_s for i in self.intervals)

    @property
    def total(self) -> float:
        return self.step_s

    def busy_s(self, stage: int) -> float:
        return sum(i.end_s - i.start_s for i in self.intervals if i.stage == stage)

    def idle_s(self, stage: int) -> float:
        """step - busy time of ``stage``: its share of the bubble (and exposed p2p)."""
        return self.step_s - self.busy_s(stage)


def _order_plain(schedule: str, p: int, m: int, s: int) -> list[tuple[str, int, int]]:
    """(kind, micro-batch, chunk) in issue order on stage s, for gpipe and 1f1b."""
    if schedule == "gpipe":
        return [("F", j, 0) for j in range(m)] + [("B", j, 0) for j in range(m)]
    w = min(p - s - 1, m)
    out = [("F", j, 0) for j in range(w)]
    for j in range(m - w):
        out += [("F", w + j, 0), ("B", j, 0)]
    return out + [("B", j, 0) for j in range(m - w, m)]


def _virtual(k: int, p: int, vp: int, forward: bool) -> tuple[int, int]:
    """(micro-batch, chunk) of virtual micro-batch k (Megatron-Core get_model_chunk_id)."""
    chunk = (k // p) % vp
    return (k // (p * vp)) * p + k % p, chunk if forward else vp - 1 - chunk


def _order_interleaved(p: int, vp: int, m: int, s: int) -> list[tuple[str, int, int]]:
    total = m * vp
    w = min(2 * (p - s - 1) + (vp - 1) * p, total)
    out = [("F", *_virtual(k, p, vp, True)) for k in range(w)]
    for k in range(total - w):
        out += [("F", *_virtual(w + k, p, vp, True)), ("B", *_virtual(k, p, vp, False))]
    return out + [("B", *_virtual(k, p, vp, False)) for k in range(total - w, total)]


def _dependency(op: tuple[str, int, int], s: int, p: int, vp: int) -> tuple[tuple, int] | None:
    """((kind, micro-batch, chunk), stage) this op waits for; None for the very first forward."""
    kind, j, c = op
    if kind == "F":
        if s > 0:
            return ("F", j, c), s - 1
        return (("F", j, c - 1), p - 1) if c > 0 else None
    if s < p - 1:
        return ("B", j, c), s + 1
    return (("B", j, c + 1), 0) if c < vp - 1 else (("F", j, vp - 1), s)


def _check_times(**times: float) -> None:
    for name, v in times.items():
        if not (isinstance(v, (int, float)) and v >= 0 and v != float("inf")):
            raise ValueError(f"{name}: must be a finite time >= 0 s, got {v!r}")


def pipeline_timeline(schedule: str, pp: int, n_microbatches: int, t_f: float, t_b: float,
                      t_p: float = 0.0, vp: int = 1) -> Timeline:
    """Lay out one step (module docstring: op orders, dependencies, start times)."""
    check_schedule(schedule, pp, vp, n_microbatches)
    _check_times(t_f=t_f, t_b=t_b, t_p=t_p)
    if schedule not in DRAWN:
        raise ValueError(f"schedule: the timeline draws {', '.join(DRAWN)}, not {schedule!r}")
    m = n_microbatches
    orders = [(_order_interleaved(pp, vp, m, s) if schedule == "interleaved" else _order_plain(schedule, pp, m, s))
              for s in range(pp)]
    return Timeline(schedule, pp, vp, m, tuple(_simulate(orders, pp, vp, t_f / vp, t_b / vp, t_p)))


def _simulate(orders: list[list[tuple]], p: int, vp: int, f: float, b: float, t_p: float) -> list[Interval]:
    """List-schedule every stage's ops in order, each as soon as its dependency is done."""
    done: dict[tuple, float] = {}          # ((kind, j, c), stage) -> end time
    pos, free, out = [0] * p, [0.0] * p, []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                op = orders[s][pos[s]]
                dep = _dependency(op, s, p, vp)
                if dep is not None and dep not in done:
                    break
                ready = 0.0 if dep is None else done[dep] + (t_p if dep[1] != s else 0.0)
                start = max(free[s], ready)
                free[s] = start + (f if op[0] == "F" else b)
                done[(op, s)] = free[s]
                out.append(Interval(s, op[1], op[2], op[0], start, free[s]))
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:      # a schedule whose orders wait on each other: a bug, say so
            raise ValueError(f"timeline: schedule deadlocks at stage positions {pos}")
    return out


@dataclass(frozen=True)
class StageTimes:
    """Per-micro-batch times of the busiest stage, as sim/distributed.py composes them."""

    t_f: float
    t_b: float
    t_p: float
    n_microbatches: int


def stage_times(workload, hw, stack=None) -> StageTimes:
    """t_f, t_b, t_p of a training workload's busiest stage on ``hw`` (a Cluster or a name).

    The first lines of distributed.step_parts: t_f = (forward kernel time + exposed TP/CP/EP
    forward communication) / m, t_b likewise for the backward, t_p = pipeline send/recv per
    micro-batch; m = grad_accum.
    """
    par = workload.parallel
    cluster = d.resolve_cluster(hw, par.gpus)
    gpu = cluster.sys.gpu
    st = resolve_stack(stack, gpu, workload)
    t, rates, eff = prepare(workload, st.fused).table, hw_rates(gpu), efficiency(gpu)
    check_recipe(workload, gpu)
    check_rates(t, rates)
    k = kernel_times(t, rates, eff, st.attention)
    k_total = np.where(t.kind == d.COLLECTIVE, 0.0, k.gpu_s * t.count)
    c = d.comm_times(t, par, cluster, eff)
    fwd, bwd, _ = d.phase_compute(t, k_total)
    crit = d.critical_comm(t, c, k_total, st.key)
    m = workload.grad_accum
    return StageTimes((fwd + sum(v[0] for v in crit.values())) / m, (bwd + sum(v[1] for v in crit.values())) / m,
                      d.p2p_per_microbatch(t, c, m), m)


def step_timeline(workload, hw, stack=None) -> Timeline:
    """The timeline of a training workload's pipeline on ``hw`` (stage_times + pipeline_timeline)."""
    st = stage_times(workload, hw, stack)
    par = workload.parallel
    return pipeline_timeline(par.schedule, par.pp, st.n_microbatches, st.t_f, st.t_b, st.t_p, par.vp)
