"""The step pipeline: typed ops on a target (one GPU, or a cluster) -> a frozen Estimate.

    prepare   the workload's op table and facts (sim/prepare.py), checks of recipe and rates
    kernels   GPU time of every op instance at the calibrated rates (sim/kernels.py)
    power     the SM clock the step sustains under the power cap (sim/power.py) from the step's
              time shares at those rates; kernel times at its compute speeds
    compose   the step from its kernel times:
                one GPU   tandem queue of host launches and GPU kernels (sim/launch.py), + CPU
                          offload copies (sim/offload.py)
                cluster   communication on the network, overlap and the pipeline schedule
                          (sim/distributed.py)
    Estimate  built here, by keyword, in one place.

One GPU on its own is the target without a cluster: it has no network, so no collective ops
(a one-GPU Cluster passed explicitly takes the cluster composition, as before).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..model import hardware_flops_per_step, model_flops_per_step
from ..model.ops_dp import MCORE_DDP_BUCKETS
from ..model.parallel import Parallelism
from ..model.shard import timed_stage
from . import errorband, overlap
from .calibration import on_clear_caches
from .cluster import Cluster
from .collectives import in_cuda_graph
from .distributed import (COLLECTIVE, GroupStretch, StepParts, chunked_tp_gemms, cluster_layouts, comm_times,
                          dp_host_times, offload_fn, plan_text, power_window, scatter_gather_p2p,
                          step_parts, zero3_2021_comm_s)
from .clock import RunPattern
from .clock_state import burst_step
from .kernels import ATTENTION, MATMUL, KernelTimes, check_rates, check_recipe, kernel_times
from .launch import LaunchTimes, host_times, launch_times, phase_end_times, queue_step_time
from .memory import fit_memory
from .offload import step_offload
from .optable import OpTable, build_table
from .power import PowerState, power_state
from .prepare import (Prepared, at_compute_speed, boost_speedup, compute_bound_gemms, efficiency, gemm_power_weight,
                      hw_rates, op_estimates, prepare, step_peak, step_sums, with_tensor_power)
from .results import Estimate, evict_oldest
from .stacks import Stack


@dataclass(frozen=True)
class Target:
    """Where a step runs: ``gpu`` (what-if overrides applied) at ``clock`` (a fraction of boost),
    on ``cluster`` for a multi-GPU job (None: one GPU on its own). ``host``: the hwdb system whose
    host memory CPU offloading uses (one GPU only; a cluster's is its system). ``run``: how the
    steps run (sim/clock.py RunPattern; None: sustained), one GPU only."""

    gpu: Any
    clock: float = 1.0
    cluster: Cluster | None = None
    host: Any = None
    run: RunPattern | None = None


@dataclass(frozen=True)
class Composed:
    """A step composed from kernel times: wall time, GPU busy and idle time, the sums the
    Estimate reports, and the per-op launch view its op records are built from."""

    step_s: float
    busy_s: float
    idle_s: float
    by_category: dict[str, float]
    by_phase: dict[str, float]
    exposed: dict[str, float]
    launch: LaunchTimes


@dataclass(frozen=True)
class Job:
    """What the Estimate says about the job beyond one step's time."""

    summary: str
    tokens: int
    model_flops: float
    hardware_flops: float
    gpus: int = 1
    cluster: str = ""


class Composer(Protocol):
    def power_inputs(self, k: KernelTimes) -> tuple[dict[str, float], float]: ...
    def compose(self, k: KernelTimes, speed: float) -> Composed: ...
    def step_s(self, k: KernelTimes, speed: float) -> float: ...
    def job(self, p: Prepared) -> Job: ...


@dataclass(frozen=True)
class Calibrated:
    """The kernel stage of one (op table, GPU rates, efficiency data, attention kernel): kernel
    times at the calibrated rates and what follows from them alone. No host, launch cost, clock
    pattern or cluster changes it, so it is computed once per such quadruple (kernel_stage) and
    shared: a host band's second pass, a what-if on the host, the same workload asked again."""

    k: KernelTimes
    peak: tuple[str, float]            # step_peak: the dtype MFU is measured against, its FLOP/s
    busy_s: float                      # sum of GPU time at the calibrated rates
    gemm_s: float                      # ... of its compute-bound GEMMs
    attention_s: float                 # ... of its attention kernels
    gemm_power_s: float                # gemm_s x gemm_power_weight
    # OneGpu.power_inputs' shares at these kernel times (they depend on nothing else): computed once,
    # read by the host band's other hosts and a repeated workload
    one_gpu_shares: dict = field(default_factory=dict, compare=False, repr=False)


_STAGES: dict[tuple, tuple[Any, Any, Any, Calibrated]] = {}
STAGE_CACHE_SIZE = 1024


def kernel_stage(t: OpTable, gpu, rates, eff, attention: str) -> Calibrated:
    """The Calibrated stage of ``t`` on ``gpu`` (rates = hw_rates(gpu, clock), eff = its efficiency
    data), after check_rates. Memoised by the identity of the table, rates and efficiency objects
    (all immutable, and themselves cached by value), each entry holding them so no id is reused
    while it lives; the arrays are read-only so no caller can change a shared stage."""
    key = (id(t), id(rates), id(eff), attention)
    hit = _STAGES.get(key)
    if hit is not None and hit[0] is t and hit[1] is rates and hit[2] is eff:
        return hit[3]
    check_rates(t, rates)
    k = kernel_times_by_row(t, rates, eff, attention)
    for a in (k.compute_s, k.memory_s, k.fixed_s, k.gpu_s, k.efficiency):
        a.flags.writeable = False
    cal = kernel_stage_of(t, k, gpu)
    if len(_STAGES) >= STAGE_CACHE_SIZE:
        evict_oldest(_STAGES)
    _STAGES[key] = (t, rates, eff, cal)
    return cal


# Kernel times of a table's GEMM and attention rows, by the numbers kernel_times reads of those rows,
# per (rates, efficiency data, attention kernel): every law in sim/kernels.py is row-wise (a row's
# times follow from its own columns), so equal rows get equal times
_ROW_TIMES: dict[tuple, tuple[Any, Any, dict[bytes, tuple[KernelTimes, np.ndarray]]]] = {}
ROW_CACHE_SIZE = 512   # entries of ~8 KB (a key of ~25 rows x 25 columns, the kept times)


def _rows_key(t: OpTable, rows: np.ndarray) -> bytes:
    """The bytes of every column kernel_times reads (not count) of the rows ``rows`` of ``t``, in order."""
    g, at = t.gemm, t.attn
    cols = (t.kind, t.phase, t.dtype, t.flops, t.bytes, t.bytes_written, t.kernels, g.M, g.N, g.K, g.batch, at.B, at.Hq,
            at.Hkv, at.Sq, at.Skv, at.Dqk, at.Dv, at.causal, at.window, t.align_bytes, t.rows, t.cols, t.strided_elems,
            t.strided_class)
    return np.concatenate(cols, dtype=float).reshape(len(cols), len(t.kind)).take(rows, axis=1).tobytes()


def kernel_times_by_row(t: OpTable, rates, eff, attention: str) -> KernelTimes:
    """kernel_times(t, rates, eff, attention), with the times of its GEMM and attention rows (the laws
    whose cost is per call: the tile and split-K law, the attention launch) kept by those rows'
    numbers (_rows_key) for these rates and efficiency data: when a table's GEMM and attention rows
    were seen before (a plan search asks the same local layer shapes in many plans' tables: other
    pp, dp, zero, vp), only its other rows are timed, as a table of their own; else the whole
    table is. The same floats as kernel_times on the table (tests/sim/test_kernel_rows.py)."""
    heavy_mask = (t.kind == MATMUL) | (t.kind == ATTENTION)
    heavy = np.flatnonzero(heavy_mask)
    if len(heavy) == 0:
        return kernel_times(t, rates, eff, attention)
    memo_key = (id(rates), id(eff), attention)
    hit = _ROW_TIMES.get(memo_key)
    if hit is None or hit[0] is not rates or hit[1] is not eff:
        if len(_ROW_TIMES) >= 8:   # (rates, efficiency, attention) kept: at most ~8 x 4 MB
            evict_oldest(_ROW_TIMES)
        hit = _ROW_TIMES[memo_key] = (rates, eff, {})
    memo, key = hit[2], _rows_key(t, heavy)
    got = memo.get(key)
    if got is None:
        k = kernel_times(t, rates, eff, attention)
        if len(memo) >= ROW_CACHE_SIZE:
            evict_oldest(memo)
        memo[key] = (k, heavy)   # the rows are read off when a table asks for them (kernel_stage: read-only arrays)
        return k
    kh, rows = got
    out = np.empty((5, len(t.ops)))
    out[:, heavy] = np.stack([kh.compute_s, kh.memory_s, kh.fixed_s, kh.gpu_s, kh.efficiency])[:, rows]
    light = np.flatnonzero(~heavy_mask)
    if len(light):
        kl = kernel_times(build_table(tuple(t.ops[i] for i in light.tolist())), rates, eff, attention)
        out[:, light] = np.stack([kl.compute_s, kl.memory_s, kl.fixed_s, kl.gpu_s, kl.efficiency])
    return KernelTimes(out[0], out[1], out[2], out[3], out[4])


@on_clear_caches
def clear_stages() -> None:
    _STAGES.clear()
    _ROW_TIMES.clear()
    _NETWORKS.clear()
    _RUNS.clear()


@dataclass(frozen=True)
class Stepped:
    """One run of the pipeline: what the Estimate is built from."""

    p: Prepared
    composer: "Composer"
    cal: Calibrated
    k: KernelTimes
    out: Any            # Composed; the step's seconds alone when run with full=False
    ps: PowerState | None


_RUNS: dict[tuple, tuple[Any, Target, Stack, Stepped]] = {}


def _run(workload, target: Target, st: Stack, full: bool = True) -> Stepped:
    """The pipeline on (workload, target, st), memoised by the identity of those immutable objects
    (an entry holds them, so no id is reused while it lives): an estimate asked again, or the
    host band's other hosts, find the step they already composed. run_step copies the dicts it
    hands out, so no caller can change a memoised step."""
    key = (id(workload), id(target.gpu), target.clock, id(target.cluster), id(target.host), target.run, id(st), full)
    hit = _RUNS.get(key)
    if hit is not None and hit[0] is workload and hit[1].gpu is target.gpu and hit[1].cluster is target.cluster \
            and hit[1].host is target.host and hit[2] is st:
        return hit[3]
    r = _compute(workload, target, st, full)
    if len(_RUNS) >= STAGE_CACHE_SIZE:
        evict_oldest(_RUNS)
    _RUNS[key] = (workload, target, st, r)
    return r


def _compute(workload, target: Target, st: Stack, full: bool) -> Stepped:
    p = prepare(workload, st.fused)
    gpu, t = target.gpu, p.table
    rates, eff = hw_rates(gpu, target.clock), efficiency(gpu)
    check_recipe(workload, gpu)
    cal = kernel_stage(t, gpu, rates, eff, st.attention)
    run = target.run
    composer = (OneGpu(workload, t, st, gpu, eff, target.host, run.duty if run else 1.0, cal)
                if target.cluster is None else OnCluster(workload, t, st, gpu, eff, rates, target.cluster))
    k = k_cal = cal.k
    r = boost_speedup(eff)
    ps = None
    if r != 1.0:   # the clock the step sustains under the power cap (shares at the calibrated rates)
        ps = power_state(*composer.power_inputs(k), gpu.key, gpu.boost_clock_hz, r, st.attention)
    if ps is not None:
        k = at_compute_speed(t, k, ps.speed, ps.attention_speed)
    if run is not None and not run.sustained:   # a burst: part of it at the boost rate (sim/clock_state.py)
        k = burst_step(t, k_cal, k, gpu, eff, run)
    speed = ps.speed if ps is not None else 1.0
    out = composer.compose(k, speed) if full else composer.step_s(k, speed)
    return Stepped(p, composer, cal, k, out, ps)


def run_step(workload, target: Target, st: Stack) -> Estimate:
    """Estimate one step of ``workload`` on ``target`` with stack ``st`` (module docstring)."""
    r = _run(workload, target, st)
    return _estimate(r.p, r.composer.job(r.p), target, st, r.out,
                     functools.partial(op_estimates, r.p.table, r.k, r.out.launch), r.ps.clock_hz if r.ps else 0.0,
                     r.cal.peak)


def step_seconds(workload, target: Target, st: Stack) -> float:
    """run_step(...).step_time_s without building the Estimate (the host band's other hosts)."""
    return _run(workload, target, st, full=False).out


def kernel_stage_of(t: OpTable, k: KernelTimes, gpu) -> Calibrated:
    """The Calibrated sums of given kernel times (not memoised)."""
    g = k.gpu_s * t.count
    gemm = float(g[compute_bound_gemms(t, k)].sum())
    return Calibrated(k, step_peak(t, gpu), float(g.sum()), gemm, float(g[t.kind == ATTENTION].sum()),
                      gemm * gemm_power_weight(t, k, gpu))


def _estimate(p: Prepared, job: Job, target: Target, st: Stack, out: Composed, ops, clock_hz: float,
              peak: tuple[str, float]) -> Estimate:
    gpu = target.gpu
    peak_dtype, peak_flops = peak
    return Estimate(
        workload=job.summary, mode=p.mode, gpu=gpu.key, stack=st.key, step_time_s=out.step_s,
        gpu_busy_s=out.busy_s, launch_overhead_s=out.idle_s, tokens=job.tokens, model_flops=job.model_flops,
        hardware_flops=job.hardware_flops, peak_flops=peak_flops * job.gpus,
        by_category=dict(out.by_category), by_phase=dict(out.by_phase), memory=fit_memory(dict(p.memory), gpu),
        error_band=errorband.band_for(p.mode, gpu.key, st.key), op_builder=ops, gpus=job.gpus,
        exposed_comm=dict(out.exposed), cluster=job.cluster, sm_clock_hz=clock_hz, peak_dtype=peak_dtype)


class OneGpu:
    """One GPU on its own: host launches and GPU kernels in a tandem queue (sim/launch.py),
    plus CPU offload copies (sim/offload.py) after it. sim/many.py evaluates this composition on
    the rows of many points at once; tests/sim/test_many.py keeps the two equal."""

    def __init__(self, workload, t: OpTable, st: Stack, gpu, eff, host, duty: float = 1.0,
                 cal: Calibrated | None = None) -> None:
        self.w, self.t, self.st, self.gpu, self.eff, self.host, self.duty = workload, t, st, gpu, eff, host, duty
        self.cal = cal

    def power_inputs(self, k: KernelTimes) -> tuple[dict[str, float], float]:
        """Time shares at the calibrated rates: compute-bound GEMMs, attention (kernel
        st.attention), the rest of the GPU time memory-bound, over a step of max(GPU busy, host
        issue time) / duty (the tandem bound's two ends; the power model needs shares, not the
        exact step; idle between steps draws idle power)."""
        t, st, c = self.t, self.st, self.cal
        if c is None or k is not c.k:
            c = kernel_stage_of(t, k, self.gpu)
        host = 0.0 if st.graphs else float(np.dot(host_times(t, st), t.count))
        busy, gemm, att = c.busy_s, c.gemm_s, c.attention_s
        hit = c.one_gpu_shares.get(id(self.gpu))
        if hit is not None and hit[0] is self.gpu:
            return dict(hit[1]), max(busy, host) / self.duty
        shares = with_tensor_power({"matmul_compute": gemm, "attention": att, "memory_bound": busy - gemm - att,
                                    "matmul_power": c.gemm_power_s}, t, k, self.gpu, "memory_bound")
        if c is self.cal and len(c.one_gpu_shares) < 8:   # an entry holds its GPU: no id reused while it lives
            c.one_gpu_shares[id(self.gpu)] = (self.gpu, dict(shares))
        return shares, max(busy, host) / self.duty

    def compose(self, k: KernelTimes, speed: float) -> Composed:
        t = self.t
        lt = launch_times(t, k.gpu_s, self.st)
        by_cat, by_phase = step_sums(t, k, lt.gpu_s * t.count, lt.idle_s)
        step, exposed = lt.step_s, {}
        if getattr(self.w, "offload", "none") != "none":   # CPU offloading (sim/offload.py)
            off = step_offload(self.w, t, k.gpu_s * t.count, self.gpu, self.host, self.eff, self.st.fused).total
            step, exposed = step + off, {"offload": off}
            by_cat["communication"] += off
        return Composed(step, lt.gpu_busy_s, lt.idle_s, by_cat, by_phase, exposed, lt)

    def step_s(self, k: KernelTimes, speed: float) -> float:
        """compose(k, speed).step_s without the category sums."""
        t = self.t
        step = launch_times(t, k.gpu_s, self.st).step_s
        if getattr(self.w, "offload", "none") != "none":
            step += step_offload(self.w, t, k.gpu_s * t.count, self.gpu, self.host, self.eff, self.st.fused).total
        return step

    def job(self, p: Prepared) -> Job:
        return Job(p.summary, p.tokens, p.model_flops, p.hardware_flops)


class OnCluster:
    """A GPU of a multi-GPU job on ``cluster``: its kernels, its collectives on the network,
    overlap and the pipeline schedule (sim/distributed.py step_parts)."""

    def __init__(self, workload, t: OpTable, st: Stack, gpu, eff, rates, cluster: Cluster) -> None:
        self.w, self.t, self.st, self.gpu, self.eff, self.rates, self.cluster = workload, t, st, gpu, eff, rates, cluster
        self.compute = t.kind != COLLECTIVE
        self.host = dp_host_times(t, np.where(self.compute, host_times(t, st), 0.0), st.graphs, st.key)
        n = network_stage(workload, t, st, gpu, eff, rates, cluster)
        self.comm, self.z3, self.off, self.stretch, self.stage, self._flops = n.comm, n.z3, n.off, n.stretch, \
            n.stage, n.flops
        self._net = n

    def _timeline(self, k: KernelTimes, speed: float = 1.0) -> tuple[float, float, StepParts, dict, dict]:
        t, par, st, w = self.t, self.w.parallel, self.st, self.w
        gpu_s = np.where(self.compute, k.gpu_s, 0.0)
        if par.tp_comm_overlap:
            gpu_s = chunked_tp_gemms(t, gpu_s, par.tp, self.rates, self.eff, st.attention, speed)
        busy = float(np.dot(gpu_s, t.count))
        idle = max(0.0, queue_step_time(t, self.host, gpu_s) - busy)   # host syncs cut the queue (launch.py)
        parts = step_parts(t, k, gpu_s, self.comm, par, w.grad_accum if hasattr(w, "grad_accum") else 1,
                           st.key, idle, getattr(w.model, "moe", None), self.z3, self.off, self.stretch,
                           phase_end_s=tuple(phase_end_times(self.host, gpu_s, t.count, t.phase, 3,
                                                             t.block_starts)), stage=self.stage)
        idle = parts.launch_idle_s   # what is left of it once the optimizer overlaps the exposed DP comm
        by_cat, by_phase = step_sums(t, k, gpu_s * t.count, idle + parts.moe_sync_s)
        by_cat["communication"] = float(sum(parts.exposed_s.values()))
        by_cat["pipeline_bubble"] = parts.bubble_s
        return busy, idle, parts, by_cat, by_phase

    def power_inputs(self, k: KernelTimes) -> tuple[dict[str, float], float]:
        """The step's categories at the calibrated rates over the window the power cap averages
        (distributed.power_window: without the pipeline bubble and the exposed DP tail)."""
        memo, key = self._net.power_inputs, (id(k), self.st.launch_host_s, self.st.launch_host_bwd_s)
        hit = memo.get(key)
        if hit is not None and hit[0] is k:
            return dict(hit[1]), hit[2]
        _, _, parts, by_cat, _ = self._timeline(k)
        by_cat["matmul_power"] = by_cat["matmul_compute"] * gemm_power_weight(self.t, k, self.gpu)
        by_cat = with_tensor_power(by_cat, self.t, k, self.gpu, "matmul_memory")
        shares, window = power_window(by_cat, parts)
        if len(memo) < 16:
            memo[key] = (k, dict(shares), window)
        return shares, window

    def compose(self, k: KernelTimes, speed: float) -> Composed:
        busy, idle, parts, by_cat, by_phase = self._timeline(k, speed)
        lt = LaunchTimes(self.host, np.where(self.compute, k.gpu_s, self.comm.per_call_s), parts.step_s, busy, idle)
        return Composed(parts.step_s, busy, idle, by_cat, by_phase, dict(parts.exposed_s), lt)

    def step_s(self, k: KernelTimes, speed: float) -> float:
        return self._timeline(k, speed)[2].step_s

    def job(self, p: Prepared) -> Job:
        par = self.w.parallel
        model_flops, hardware_flops = self._flops
        return Job(p.summary + f" {plan_text(par)}", p.tokens * par.dp, model_flops * par.dp,
                   hardware_flops * par.dp, par.gpus, f"{self.cluster.nodes} x {self.cluster.system}")


@dataclass(frozen=True)
class Network:
    """What a cluster step needs beyond the kernel stage that no host or launch cost changes:
    the collectives' times on the network (after the pipeline's scatter/gather), the serial
    ZeRO-3 comm, the offload timer, the groups' stretch, the drain stage, and the job's model /
    hardware FLOPs per replica (model/flops.py on the plan-free workload)."""

    comm: Any
    z3: float | None
    off: Any
    stretch: GroupStretch
    stage: int
    flops: tuple[float, float]
    # power_inputs at the calibrated kernel times, per host launch costs (OnCluster.power_inputs)
    power_inputs: dict = field(default_factory=dict, compare=False, repr=False)


_NETWORKS: dict[tuple, tuple[Any, Any, Any, Network]] = {}
_ONE_GPU = Parallelism()   # the plan-free workload's plan, built once (a Parallelism() is a pydantic validation)


def network_stage(workload, t: OpTable, st: Stack, gpu, eff, rates, cluster: Cluster) -> Network:
    """The Network of a cluster step, memoised like kernel_stage: by the identity of the op table
    (which the workload and stack fusion determine), rates and efficiency objects, and by the
    stack's key, graphs and fusion and the cluster's value."""
    key = (id(t), id(rates), id(eff), st.key, st.graphs, st.fused, cluster)
    hit = _NETWORKS.get(key)
    if hit is not None and hit[0] is t and hit[1] is rates and hit[2] is eff:
        return hit[3]
    par = workload.parallel
    c = comm_times(t, par, cluster, in_cuda_graph(eff) if st.graphs else eff, moe=getattr(workload.model, "moe", None))
    comm = scatter_gather_p2p(t, c, par, cluster, eff) if overlap.pp_stack_trait("scatter_gather", st.key) else c
    for a in (comm.per_call_s, comm.total_s, comm.group):
        a.flags.writeable = False
    single = workload.model_copy(update={"parallel": _ONE_GPU})
    n = Network(comm, zero3_2021_comm_s(workload, par, cluster, st.key), offload_fn(workload, t, gpu, cluster, eff, st.fused),
                GroupStretch.of(cluster_layouts(par, cluster)),
                timed_stage(workload.model, par) if MCORE_DDP_BUCKETS in st.fused else 0,   # drain_slack_s
                (float(model_flops_per_step(single)), float(hardware_flops_per_step(single, fused=st.fused))))
    if len(_NETWORKS) >= STAGE_CACHE_SIZE:
        evict_oldest(_NETWORKS)
    _NETWORKS[key] = (t, rates, eff, n)
    return n


__all__ = ["Calibrated", "Composed", "Job", "OnCluster", "OneGpu", "Network", "Stepped", "Target", "kernel_stage",
           "network_stage", "run_step",
           "step_seconds"]
