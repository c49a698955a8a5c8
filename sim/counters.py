"""Hardware counters per op: the achieved fraction of each unit's peak and the unit that binds,
as Nsight Compute shows them for one launch of the op's kernels (docs/counters.md).

The model's roofline already knows the sides of an op's time (compute, memory, fixed); this turns
them into a profiler's view. For one instance of time t (estimate_op, run as a burst from idle: a
profiled kernel runs alone, at the boost clock):

    tensor = flops / (t_cal x tensor FLOP per SM per clock[dtype] x SMs x f_cal)     matmul, attention
             (t_cal: the time at the calibrated rate, f_cal the clock it was measured at: a
             compute-bound kernel's pipe cycles do not change with the clock; pipe_clock_hz)
    sm     = SM-pipe seconds / t x row fill     other ops: the compute side (element rates, row
             latency) and a one-pass warp softmax's element rate; row fill = rows / (rows per SM x SMs)
             of a row kernel, at most 1 (few rows leave SMs idle: latency)
           = rows x slots x SM work per slot / t   the 1024-thread softmax blocks (Reg, Smem, the
             three-pass kernel: sim/data/counters.toml), whose row law is a shared latency, not work
           = exponentials / (t x MUFU rate)    attention
    hbm    = dram_bytes / (t x HBM peak)
    l2     = (l2 request bytes + DRAM read bytes) / (t x L2 throughput)   (sim/data/counters.toml:
             every byte read from DRAM passes the L2 twice, as a fill and as the request it serves)

dram_bytes is what a profiler counts with its caches flushed before the kernel: every byte read
comes from DRAM once (a row kernel's re-reads too once its rows in flight overflow C: dram_read_bytes); written bytes stay in L2 (write-back) until the kernel's footprint
(read + written) passes the L2's write-back capacity, and the evicted share of them reaches DRAM:
    dram_bytes = read + written x max(0, footprint - C) / footprint,  C = l2_writeback_fraction x L2
l2 request bytes: a GEMM re-reads A once per column of tiles and B once per row of tiles (the CTA
tile the model's GEMM efficiency picks), times gemm_l2_reuse; a flash-attention kernel reads K and V once per query block
(not when FA2 packs a GQA group into one block); other kernels move their bytes through L2 once.

The binding unit follows Nsight Compute's speed-of-light reading (binding_unit): latency when
neither the compute side max(tensor, sm) nor the memory side (hbm) reaches 60 % of peak.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model.ops import DTYPE_BYTES, AttentionShape, GemmShape, Op, RowShape
from ._toml import load_toml
from .calibration import DATA
from .clock import burst
from .estimate import efficiency, estimate, estimate_op, prepare, resolve_gpu
from .optable import KINDS
from .kernel_laws import has_row_law, norm_family, softmax_family
from .power import calibration_clock, clock_params
from .results import OpEstimate
from .rowkernels import elem_rate, row_slots, softmax_kernel
from .stacks import Stack, get_stack

UNITS = ("tensor", "sm", "hbm", "l2")
BINDINGS = ("tensor", "sm", "hbm", "l1", "latency")
LATENCY_BELOW = 0.60      # Nsight Compute SpeedOfLight.py: latency_bound_threshold = 60 (% of peak)
TENSOR_KINDS = ("matmul", "attention")
_PROFILED = burst(1.0)    # one launch after idle: the profiler replays each kernel on its own


@dataclass(frozen=True, slots=True)
class OpCounters:
    """One op instance as a profiler would show it. Fractions of each unit's peak (0..1+)."""

    name: str
    kind: str
    phase: str
    time_s: float          # GPU time of one instance
    tensor: float          # tensor-pipe cycles active / elapsed
    sm: float              # the SM's FP32 / integer / SFU / load-store pipes
    hbm: float             # DRAM bytes / (time x HBM peak)
    l2: float              # L2 bytes / (time x L2 peak); nan without L2 data for the GPU
    dram_bytes: float
    l2_bytes: float
    binding: str           # one of BINDINGS
    l2_regime: str         # "resident": the written bytes stay in L2 at the kernel's end; "streaming"
    model_bound: str       # the roofline side the time came from (compute, memory, latency)

    @property
    def compute_sol(self) -> float:
        return max(self.tensor, self.sm)

    @property
    def memory_sol(self) -> float:
        return self.hbm


def binding_unit(tensor: float, sm: float, hbm: float, l1: float = 0.0,
                 compute: float | None = None, memory: float | None = None) -> str:
    """The unit that binds, from fractions of peak (docs/counters.md: one rule for the model and
    for Nsight Compute, its speed-of-light reading): 'latency' when max(compute, memory) < 0.6;
    else, when compute >= memory, 'tensor' if the tensor pipe is at least the SM pipes, else 'sm';
    else 'hbm' if DRAM is at least L1, else 'l1'. compute / memory default to max(tensor, sm) and
    max(hbm, l1); from a profiler they are sm__throughput and gpu__compute_memory_throughput (on
    Hopper the max of DRAM and L1 throughput: the L2's own lts__throughput is not part of it, so
    the L2 is reported as a fraction, not as a binding unit)."""
    c = max(tensor, sm) if compute is None else compute
    m = max(hbm, l1) if memory is None else memory
    if max(c, m) < LATENCY_BELOW:
        return "latency"
    if c >= m:
        return "tensor" if tensor >= sm else "sm"
    return "hbm" if hbm >= l1 else "l1"


@dataclass(frozen=True, slots=True)
class L2Params:
    """The L2 as a profiler sees it (sim/data/counters.toml): throughput_Bps is the rate of request
    plus fill bytes at which lts__throughput reads 100 %; writeback_fraction the share of the L2
    holding a kernel's written bytes at its end; gemm_reuse scales the tile re-read traffic of a
    GEMM to what cuBLAS's clustered (TMA-multicast) kernels request."""

    throughput_Bps: float
    writeback_fraction: float
    gemm_reuse: float
    norm_blocks_per_sm: float = math.nan      # vectorized norm rows resident per SM (their re-read in flight)
    reg_sm_s_per_slot: float = math.nan       # SM work of the one-pass 1024-thread softmax per slot
    block_sm_s_per_element: float = math.nan  # SM work of the three-pass softmax per element


@functools.lru_cache(maxsize=8)
def l2_params(arch: str) -> L2Params | None:
    """The L2 data of ``arch``, None without data (then the L2 fraction is nan)."""
    raw = load_toml(DATA / "counters.toml").get(arch)
    if raw is None:
        return None
    opt = lambda k: float(raw[k]["value"]) if k in raw else math.nan  # noqa: E731
    return L2Params(float(raw["l2_throughput"]["value"]) * 1e12, float(raw["l2_writeback_fraction"]["value"]),
                    float(raw["gemm_l2_reuse"]["value"]), opt("norm_blocks_per_sm"),
                    opt("softmax_reg_sm_s_per_slot"), opt("softmax_block_sm_s_per_element"))


def tensor_peak_at_boost(gpu, dtype: str) -> float:
    """Dense tensor FLOP/s of ``dtype`` at the boost clock: the datasheet peak (quoted at the
    tensor clock) x boost / tensor clock; nan where the GPU has no such rate."""
    try:
        peak = float(gpu.peak_flops(dtype))
        return peak * float(gpu.boost_clock_hz) / float(gpu.tensor_clock_hz)
    except (KeyError, ValueError):
        return math.nan


def _mufu_at_boost(gpu) -> float:
    """Exponentials per second of the SFU (MUFU.EX2) at the boost clock; inf without data."""
    try:
        return float(gpu.mufu_ex2_rate) * float(gpu.boost_clock_hz) / float(gpu.tensor_clock_hz)
    except (KeyError, ValueError):
        return math.inf


def dram_read_bytes(op: Op, sm_count: int, eff, cap: float | None = None, norm_blocks_per_sm: float = math.nan) -> float:
    """Bytes read from DRAM with caches flushed: the op's reads, and the re-reads of a row kernel
    that walks its rows more than once (the three-pass softmax twice more, the vectorized norm once
    more: its moments pass, then the normalising pass) where its rows in flight overflow ``cap``, the
    L2 share a profiled kernel keeps (l2_writeback_fraction x L2). Past it the L2 (LRU) has evicted
    a row before its next pass comes back, so the re-reads all miss: a cliff, not a slope (H200
    counters, calibration and development runs: norms 1.9-23.8 MB in flight re-read 1.00-1.01x of x,
    50.5 MB 1.99x; log_softmax 7-8 MB 1.00x, 135-146 MB 2.98-3.00x). Without ``cap`` (no counter data
    for the GPU) the three-pass softmax keeps the time model's L2 share (sim/rowkernels.py)."""
    s = op.shape
    if not isinstance(s, RowShape) or op.phase != "fwd":
        return op.bytes_read
    e = DTYPE_BYTES[op.dtype]
    row = s.cols * e
    if op.kind == "softmax" and softmax_kernel(int(s.cols), int(e)) == "block":
        in_flight = min(s.rows, 2 * sm_count) * row
        if cap is None:
            miss = max(0.0, 1.0 - eff.get("rowsoftmax.l2_resident_bytes") / in_flight)
        else:
            miss = 1.0 if in_flight > cap else 0.0
        return op.bytes_read * (1.0 + 2.0 * miss)
    if cap is not None and math.isfinite(norm_blocks_per_sm) and norm_family(op) in ("layer_norm", "rms_norm"):
        in_flight = min(s.rows, norm_blocks_per_sm * sm_count) * row
        return op.bytes_read + (s.rows * row if in_flight > cap else 0.0)
    return op.bytes_read


def dram_bytes(op: Op, l2_capacity: float, read: float | None = None) -> float:
    """Bytes a profiler counts at DRAM for one instance with caches flushed before it (module
    docstring): reads, plus the written bytes' evicted share."""
    read = op.bytes_read if read is None else read
    foot = op.bytes_read + op.bytes_written
    evicted = max(0.0, foot - l2_capacity) / foot if foot > 0 else 0.0
    return read + op.bytes_written * evicted


def gemm_tile(g: GemmShape, sm_count: int, eff) -> tuple[float, float]:
    """The CTA tile (tm, tn) sim/kernels.gemm_efficiency picks: the best wave x K efficiency of
    the candidate tiles (ties: the first, the largest tile in the data's order)."""
    tiles = np.asarray(eff.get("gemm.tiles"), dtype=float)
    tm, tn = tiles[:, 0], tiles[:, 1]
    n_tiles = np.ceil(g.M / tm) * np.ceil(g.N / tn) * g.batch
    split = np.maximum(1.0, np.minimum(np.floor(sm_count / n_tiles), np.floor(g.K / eff.get("gemm.splitk_min_k"))))
    waves = np.ceil(n_tiles * split / sm_count)
    wave_eff = np.minimum((g.M * g.N * g.batch) / (waves * sm_count * tm * tn / split), 1.0)
    k_eff = (g.K / split) / (g.K / split + eff.get("gemm.k_overhead"))
    i = int(np.argmax(wave_eff * k_eff))
    return float(tm[i]), float(tn[i])


def l2_bytes(op: Op, sm_count: int, eff, attention_impl: str, gemm_reuse: float = 1.0) -> float:
    """Bytes the SMs request from L2 in one instance (module docstring)."""
    s = op.shape
    if op.kind == "matmul" and isinstance(s, GemmShape):
        tm, tn = gemm_tile(s, sm_count, eff)
        e_in = op.bytes_read / max((s.M * s.K + s.K * s.N) * s.batch, 1)
        reads = e_in * s.batch * s.K * (s.M * math.ceil(s.N / tn) + s.N * math.ceil(s.M / tm))
        return max(reads * gemm_reuse, op.bytes_read) + op.bytes_written
    if op.kind == "attention" and isinstance(s, AttentionShape) and op.phase == "fwd":
        e = DTYPE_BYTES[op.dtype]
        packed = attention_impl == "fa2" and s.Sq == 1 and s.Hq > s.Hkv
        heads, rows = (s.Hkv, s.Hq // s.Hkv) if packed else (s.Hq, s.Sq)
        blocks = math.ceil(rows / eff.get(f"attention.{attention_impl}.block_m"))
        causal = 0.5 if s.causal and s.Sq == s.Skv else 1.0
        kv = s.B * heads * blocks * s.Skv * (s.Dqk + s.Dv) * e * causal
        q_o = s.B * s.Hq * s.Sq * (s.Dqk + s.Dv) * e
        return kv + q_o
    return op.bytes_read + op.bytes_written


def _sm_time(op: Op, compute_s: float, eff, lp: L2Params | None = None) -> float:
    """Seconds of SM-pipe work of one instance (at sm__throughput = 100 % of the whole GPU): the
    roofline's compute side; for a one-pass warp softmax its element rate where that, not HBM, sets
    the time (sim/rowkernels.py); for the 1024-thread softmax blocks (Reg, Smem, the three-pass
    kernel) the work their code issues per slot / element (sim/data/counters.toml), not their row
    law's time: that law is a latency per row the SM's co-resident rows share (kernel_laws.
    SM_SHARED_ROWS), which a profiler reads as a partly busy SM, not as busy pipes."""
    s = op.shape
    if op.kind != "softmax" or op.phase != "fwd" or not isinstance(s, RowShape):
        return compute_s
    fam = softmax_kernel(int(s.cols), int(DTYPE_BYTES[op.dtype]))
    if fam == "warp":
        return max(compute_s, s.rows * s.cols / elem_rate(fam, int(s.cols), eff))
    if lp is None:
        return compute_s
    if fam == "block" and math.isfinite(lp.block_sm_s_per_element):
        return s.rows * s.cols * lp.block_sm_s_per_element
    if fam in ("reg", "smem") and math.isfinite(lp.reg_sm_s_per_slot):
        return s.rows * row_slots(fam, int(s.cols)) * lp.reg_sm_s_per_slot
    return compute_s


def _counts_own_fill(op: Op, lp: L2Params | None) -> bool:
    """Whether _sm_time already is the work of the op's rows (a 1024-thread softmax block with its
    work per element in the data): then no row fill scales it."""
    s = op.shape
    if lp is None or op.kind != "softmax" or op.phase != "fwd" or not isinstance(s, RowShape):
        return False
    fam = softmax_kernel(int(s.cols), int(DTYPE_BYTES[op.dtype]))
    return (fam == "block" and math.isfinite(lp.block_sm_s_per_element)) or \
        (fam in ("reg", "smem") and math.isfinite(lp.reg_sm_s_per_slot))


def _row_fill(op: Op, sm_count: int, eff) -> float:
    """Share of the GPU a row kernel's rows keep busy: rows / (rows_per_sm x SMs), at most 1
    (sim/kernel_laws.py's row law: fewer rows than that run one wave of row latency on idle
    SMs, which a profiler reads as latency, not as busy pipes); 1 for other kernels."""
    s = op.shape
    if not isinstance(s, RowShape) or op.phase != "fwd":
        return 1.0
    fam = softmax_family(s.cols, DTYPE_BYTES[op.dtype]) if op.kind == "softmax" else norm_family(op)
    if fam is None or not has_row_law(eff, fam):
        return 1.0
    return min(1.0, s.rows / (eff.get(f"rowkernel.{fam}.rows_per_sm") * sm_count))


def _exps(op: Op) -> float:
    s = op.shape
    if not isinstance(s, AttentionShape):
        return 0.0
    frac = 1.0 - (s.Sq - 1) / (2.0 * s.Skv) if s.causal and s.Sq == s.Skv else 1.0
    return s.B * s.Hq * s.Sq * s.Skv * frac * (2.0 if op.phase == "bwd" else 1.0)


def pipe_clock_hz(gpu, kind: str) -> float:
    """The clock whose cycles the calibrated rate of ``kind`` was measured in: GEMMs at the
    calibration GPU's sustained GEMM clock (sim/power.py: speed 1 means that clock), attention
    and the other kernels at the boost clock (their microbenchmarks ran there)."""
    if kind == "matmul" and clock_params(gpu.key) is not None:
        return float(calibration_clock(gpu.key))
    return float(gpu.boost_clock_hz)


def counters_of(op: Op, e: OpEstimate, hw: Any, attention_impl: str = "fa2",
                calibrated_s: float | None = None) -> OpCounters:
    """The profiler's view of ``op`` timed as ``e`` (an OpEstimate of that op) on ``hw``.
    calibrated_s: the op's time at its calibrated rate (estimate_op without a run pattern), whose
    pipe cycles at pipe_clock_hz a compute-bound kernel keeps at any clock (default: e's time)."""
    gpu = resolve_gpu(hw)
    eff = efficiency(gpu)
    n = max(e.count, 1)
    t = e.time_s / n
    if not t > 0:
        raise ValueError(f"time_s: op {op.name!r} has no GPU time ({e.time_s!r} s); counters need a timed op")
    lp = l2_params(gpu.arch)
    cap = (lp.writeback_fraction if lp else 1.0) * float(gpu.l2_bytes)
    read = dram_read_bytes(op, int(gpu.sm_count), eff, cap if lp else None,
                           lp.norm_blocks_per_sm if lp else math.nan)
    dram = dram_bytes(op, cap, read)
    l2b = l2_bytes(op, int(gpu.sm_count), eff, attention_impl, lp.gemm_reuse if lp else 1.0)
    l2 = (l2b + read) / (t * lp.throughput_Bps) if lp else math.nan
    hbm = dram / (t * float(gpu.hbm_bandwidth))
    if op.kind in TENSOR_KINDS:
        dtype = "bf16" if op.kind == "attention" else op.dtype
        t_pipe = (calibrated_s if calibrated_s is not None else e.time_s) / n
        peak = tensor_peak_at_boost(gpu, dtype) * pipe_clock_hz(gpu, op.kind) / float(gpu.boost_clock_hz)
        tensor = op.flops / (t_pipe * peak)
        sm = _exps(op) / (t * _mufu_at_boost(gpu)) if op.kind == "attention" else 0.0
    else:
        fill = 1.0 if _counts_own_fill(op, lp) else _row_fill(op, int(gpu.sm_count), eff)
        tensor, sm = 0.0, _sm_time(op, e.compute_s / n, eff, lp) / t * fill
    regime = "resident" if op.bytes_read + op.bytes_written <= cap else "streaming"
    return OpCounters(op.name, op.kind, op.phase, t, tensor, sm, hbm, l2, dram, l2b,
                      binding_unit(tensor, sm, hbm), regime, e.bound)


def op_counters(op: Op, hw: Any = "h100_sxm", stack: str | Stack = "eager") -> OpCounters:
    """Counters of one instance of ``op`` as one profiled launch (a burst from idle) on ``hw``;
    the stack names the attention kernel (e.g. a stack with attention "fa2" for torch SDPA's
    flash backend)."""
    st = get_stack(stack)
    cal = estimate_op(op, hw, st).time_s if op.kind in TENSOR_KINDS else None
    return counters_of(op, estimate_op(op, hw, st, run=_PROFILED), hw, st.attention, cal)


def ops_counters(ops: list[Op] | tuple[Op, ...], hw: Any = "h100_sxm", stack: str | Stack = "eager") -> OpCounters:
    """Counters of a chain of ops run back to back (one eager op of several kernels, e.g.
    cross-entropy's log_softmax + nll): each unit's fraction is the time-weighted mean, the
    binding unit decided on those means (the same rule a profiler's per-kernel figures get)."""
    if not ops:
        raise ValueError("ops: need at least one op")
    cs = [op_counters(o, hw, stack) for o in ops]
    w = np.array([c.time_s * o.count for c, o in zip(cs, ops)])
    total = float(w.sum())
    mean = {u: float(np.dot(w, [getattr(c, u) for c in cs]) / total) for u in UNITS}
    regime = "streaming" if any(c.l2_regime == "streaming" for c in cs) else "resident"
    bound = cs[int(np.argmax(w))].model_bound
    return OpCounters(ops[0].name if len(ops) == 1 else "+".join(o.name for o in ops), ops[0].kind, ops[0].phase,
                      total, mean["tensor"], mean["sm"], mean["hbm"], mean["l2"],
                      float(sum(c.dram_bytes * o.count for c, o in zip(cs, ops))),
                      float(sum(c.l2_bytes * o.count for c, o in zip(cs, ops))),
                      binding_unit(mean["tensor"], mean["sm"], mean["hbm"]), regime, bound)


COUNTED_KINDS = tuple(k for k in KINDS if k not in ("collective", "memcpy", "copy_engine"))


def estimate_counters(workload, hw: Any = "h100_sxm", stack: str | Stack | None = None,
                      overrides: dict | None = None) -> tuple[OpCounters, ...]:
    """Counters of every GPU-kernel op of one step of ``workload`` (the busiest GPU's op list, as
    estimate() times it; collectives and copies, which run on the network or the copy engines, are
    left out), each from its step time (the clock the step sustains)."""
    est = estimate(workload, hw, stack, overrides)
    st = get_stack(stack or workload.stack)
    ops = prepare(workload, st.fused).table.ops
    if len(ops) != len(est.ops) or any(o.name != e.name for o, e in zip(ops, est.ops)):
        raise ValueError("workload: its op list differs from the estimate's (a pipeline stage with MTP modules); "
                         "pass the stage's workload (Parallelism(timed_stage=...))")
    return tuple(counters_of(o, e, est.gpu, st.attention) for o, e in zip(ops, est.ops)
                 if o.kind in COUNTED_KINDS and e.time_s > 0)
