"""What a step estimate needs before any timing: the GPU, its peak rates and efficiency data,
the calibrated stack, and the workload's op table (cached per workload and stack fusion), plus
the per-op records and category sums every estimate reports.

    resolve_gpu / hw_rates / efficiency      the GPU side (hwdb + sim/calibration.py)
    calibrated_stack / resolve_stack         the software stack (sim/stacks.py), launch costs
                                             calibrated for the GPU's machine
    prepare                                  the workload side: op table (sim/optable.py), the
                                             summary, tokens, model / hardware FLOPs, memory parts
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import hwdb
from ..model import build_ops, hardware_flops_per_step, model_flops_per_step
from .calibration import Efficiency, efficiency_for
from .kernels import ATTENTION, MATMUL, HwRates, KernelTimes, gemm_efficiency
from .launch import LaunchTimes
from .memory import memory_components
from .optable import DTYPES, KINDS, PHASES, GemmColumns, OpTable, build_table
from .power import clock_params
from .results import CATEGORIES, OpEstimate, evict_oldest
from .stacks import Stack, get_stack


def resolve_gpu(hw: Any) -> hwdb.GPU:
    """A GPU object from a name/alias, a GPU, or a system (its GPU)."""
    if isinstance(hw, str):
        return _gpu_named(hw)
    if hasattr(hw, "peak_flops"):
        return hw
    if hasattr(hw, "gpu"):
        return hw.gpu
    raise TypeError(f"hw must be a GPU name, GPU or System, not {type(hw).__name__}")


@functools.lru_cache(maxsize=256)
def _gpu_named(hw: str) -> hwdb.GPU:
    """resolve_gpu of a name (memoised: a name lookup normalises the spelling first; names that
    fail raise every time, unremembered)."""
    try:
        return hwdb.get_gpu(hw)
    except hwdb.UnknownHardwareError:
        try:
            return hwdb.get_system(hw).gpu
        except hwdb.UnknownHardwareError:
            pass
    return hwdb.get_gpu(hw)   # raises the GPU error (it lists the close GPU names)


def _peak_or_nan(gpu, dtype: str) -> float:
    try:
        return float(gpu.peak_flops("fp64_tc" if dtype == "fp64" else dtype))
    except (ValueError, KeyError):
        return math.nan


@functools.lru_cache(maxsize=256)
def hw_rates(gpu, clock_fraction: float = 1.0) -> HwRates:
    """Peak rates of ``gpu`` per op dtype (nan where the GPU has no such unit)."""
    peaks = np.array([_peak_or_nan(gpu, d) for d in DTYPES])
    return HwRates(gpu.key, peaks, float(gpu.peak_flops("fp32")), float(gpu.hbm_bandwidth),
                   int(gpu.sm_count), clock_fraction, _exp_rate(gpu))


def _exp_rate(gpu) -> float:
    try:
        return float(gpu.mufu_ex2_rate)
    except (ValueError, KeyError):
        return math.inf


def efficiency(gpu) -> Efficiency:
    return efficiency_for(gpu.key, gpu.arch)


@functools.lru_cache(maxsize=256)
def calibrated_stack(gpu, st: Stack) -> Stack:
    """``st`` with the launch costs calibrated for this GPU's machine, if any
    (efficiency entries ``stack.<key>.<field>``; host speed belongs to the machine), on the
    fields that still hold the library stack's value: a Stack object keeps the calibration,
    and a field its caller set differently wins."""
    prefix = f"stack.{st.key}."
    eff = efficiency(gpu)
    vals: dict[str, Any] = {n[len(prefix):]: float(eff.get(n)) for n in eff.params if n.startswith(prefix)}
    base = library_stack(st.key)
    vals = {f: v for f, v in vals.items() if base is None or getattr(st, f) == getattr(base, f)}
    return dataclasses.replace(st, **vals) if vals else st


def library_stack(key: str) -> Stack | None:
    """The library's stack of that key (sim/data/stacks.toml), None for a caller's own key."""
    try:
        return get_stack(key)
    except ValueError:
        return None


def resolve_stack(stack: str | Stack | None, gpu, workload) -> Stack:
    """The named (default: the workload's) stack, or a Stack object, calibrated for ``gpu``."""
    return calibrated_stack(gpu, get_stack(stack or workload.stack))


def step_peak(t: OpTable, gpu) -> tuple[str, float]:
    """(dtype, dense datasheet FLOP/s per GPU) MFU is measured against: the fastest tensor dtype
    the step's compute is timed at (an fp8 step against the fp8 peak, so MFU <= 1), at the boost
    clock (a sustained-clock what-if slows the step, not the peak). Matmuls count in their own
    dtype, attention as bf16: sim/kernels.py times every attention kernel at the bf16 peak."""
    mm = (t.kind == MATMUL) & (t.flops > 0)
    names = {DTYPES[i] for i in t.dtype[mm].tolist()} | ({"bf16"} if ((t.kind == ATTENTION) & (t.flops > 0)).any()
                                                            else set()) or {"bf16"}
    peaks = {d: _peak_or_nan(gpu, d) for d in names}
    best = max(peaks, key=lambda d: -1.0 if math.isnan(peaks[d]) else peaks[d])
    return best, peaks[best]


@functools.cache
def split_below() -> int:
    """SMs below which op lists count the split-K reduce / split-KV combine kernel
    (model/ops_common.Ctx.split_below). The op table is built once per workload, not per GPU, so
    every GPU gets the count of the GPU whose decode and train-step traces fixed those kernel
    counts: the H200's SM count (hwdb h200_sxm sm_count, source measured_h200_20261130; H100 SXM
    has the same 132). Per-GPU split kernels (A100 108 SMs, B200 148) need the table keyed by GPU."""
    return int(hwdb.get_gpu("h200_sxm").sm_count)


@functools.lru_cache(maxsize=1024)
def op_table(workload, fused: frozenset[str]) -> OpTable:
    return build_table(tuple(build_ops(workload, fused=fused, split_below=split_below())))


@dataclass(frozen=True)
class Prepared:
    """Everything about a (workload, stack fusion) pair that no GPU changes."""

    table: OpTable
    summary: str
    mode: str
    tokens: int
    model_flops: float
    hardware_flops: float
    memory: dict[str, float]


_BY_ID: dict[tuple[int, frozenset[str]], tuple[Any, Prepared]] = {}


def prepare(workload, fused: frozenset[str]) -> Prepared:
    """The Prepared of (workload, fused), cached by value (prepared) and, in front of that, by the
    workload object's identity (an entry holds the object): hashing a workload record walks all
    its fields, which a repeated estimate need not pay."""
    key = (id(workload), fused)
    hit = _BY_ID.get(key)
    if hit is not None and hit[0] is workload:
        return hit[1]
    p = prepared(workload, fused)
    if len(_BY_ID) >= 1024:
        evict_oldest(_BY_ID)
    _BY_ID[key] = (workload, p)
    return p


@functools.lru_cache(maxsize=1024)
def prepared(workload, fused: frozenset[str]) -> Prepared:
    summary, mode, tokens = describe_workload(workload)
    return Prepared(op_table(workload, fused), summary, mode, tokens, float(model_flops_per_step(workload)),
                    float(hardware_flops_per_step(workload, fused=fused, split_below=split_below())),   # op_table's list
                    memory_components(workload, fused))


def describe_workload(w) -> tuple[str, str, int]:
    """(summary, mode, tokens per step) of a workload."""
    name = w.model.name if hasattr(w.model, "name") else str(w.model)   # not str() of every model
    if hasattr(w, "mbs"):
        return f"train {name} mbs={w.mbs} seq={w.seq} ga={w.grad_accum} {w.precision}", "train", \
            w.mbs * w.seq * w.grad_accum
    tokens = w.batch * (w.prompt_len if w.phase == "prefill" else 1)
    ctx = w.prompt_len if w.phase == "prefill" else w.context_len
    return f"{w.phase} {name} batch={w.batch} len={ctx}", w.phase, tokens


def at_compute_speed(t: OpTable, k: KernelTimes, speed: float, attention_speed: float = 1.0) -> KernelTimes:
    """Kernel times at the compute speeds of a power state (sim/power.py): gpu_s = max(compute /
    speed, memory) + fixed for GEMMs (speed over their calibrated sustained rate); every other op
    (attention, and the element-rate and vector work of the rest, all calibrated on
    microbenchmarks at the boost clock) runs its compute at attention_speed = f / f_boost."""
    mm = t.kind == MATMUL
    compute = np.where(mm, k.compute_s / speed, k.compute_s / attention_speed)
    gpu = np.maximum(compute, k.memory_s) + k.fixed_s
    return KernelTimes(compute, k.memory_s, k.fixed_s, gpu, k.efficiency)   # hot path: no dataclasses.replace


def categories(t: OpTable, k: KernelTimes) -> np.ndarray:
    """Index into CATEGORIES for each op: matmuls split by their binding side."""
    cat = np.full(len(t.ops), CATEGORIES.index("memory_bound"))
    mm = t.kind == MATMUL
    cat[mm & (k.compute_s >= k.memory_s)] = CATEGORIES.index("matmul_compute")
    cat[mm & (k.compute_s < k.memory_s)] = CATEGORIES.index("matmul_memory")
    cat[t.kind == ATTENTION] = CATEGORIES.index("attention")
    cat[t.kind == KINDS.index("collective")] = CATEGORIES.index("communication")
    return cat


def _bound(compute: float, memory: float, fixed: float) -> str:
    if fixed > max(compute, memory):
        return "latency"
    return "compute" if compute >= memory else "memory"


def op_estimates(t: OpTable, k: KernelTimes, lt: LaunchTimes) -> tuple[OpEstimate, ...]:
    """Per-op records (totals over each op's count)."""
    cats = categories(t, k)
    out = []
    for i, op in enumerate(t.ops):
        c, m, n = float(k.compute_s[i]), float(k.memory_s[i]), float(t.count[i])
        f = float(lt.gpu_s[i]) - max(c, m)
        out.append(OpEstimate(
            op.name, op.kind, op.phase, op.count, op.kernels, op.flops * n, float(t.bytes[i]) * n,
            float(lt.gpu_s[i]) * n, c * n, m * n, f * n, _bound(c, m, f), float(k.efficiency[i]),
            op.arithmetic_intensity, CATEGORIES[cats[i]]))
    return tuple(out)


def step_sums(t: OpTable, k: KernelTimes, per_op_total: np.ndarray, idle: float) -> tuple[dict, dict]:
    """(seconds by category, seconds by phase) of per-op totals; ``idle`` is the launch overhead."""
    by_cat = np.bincount(categories(t, k), weights=per_op_total, minlength=len(CATEGORIES))
    by_cat[CATEGORIES.index("launch_overhead")] = idle
    by_phase = np.bincount(t.phase, weights=per_op_total, minlength=len(PHASES))
    return dict(zip(CATEGORIES, by_cat.tolist())), dict(zip(PHASES, by_phase.tolist()))


def gemm_power_weight(t: OpTable, k: KernelTimes, gpu) -> float:
    """Dynamic power per second of the step's compute-bound GEMMs over that of the 8192^3 GEMM
    the cap clock was measured with: the time-weighted mean of gemm_power_weights over them."""
    rows = compute_bound_gemms(t, k)
    g = (k.gpu_s * t.count)[rows]
    if g.sum() <= 0:
        return 1.0
    return float(np.dot(g, gemm_power_weights(t, k, gpu, rows)) / g.sum())


def gemm_power_weights(t: OpTable, k: KernelTimes, gpu, rows: np.ndarray) -> np.ndarray:
    """Of the GEMM rows ``rows`` (a mask): dynamic power per tensor-busy second over the 8192^3
    reference GEMM's, the efficiency (tensor-core utilisation) over the reference's, at most 1
    (measured: shapes at 0.68-0.86 of the per-clock peak hold the cap at 1,650-1,470 MHz, record
    20261130T2320Z_gemm_shape_clocks_h200). The part of a weak GEMM's draw that does not follow
    the clock: gemm_floor_s."""
    return np.minimum(k.efficiency[rows] / reference_gemm_efficiency(gpu)[t.dtype[rows]], 1.0)


def gemm_floor_s(t: OpTable, k: KernelTimes, gpu, rows: np.ndarray) -> np.ndarray:
    """Of the GEMM rows ``rows`` (a mask): memory-bound-power seconds (over the count) that lift each
    tensor-busy second b (the whole time t of a compute-bound GEMM, c t / m of a memory-bound one)
    to at least a memory-bound second at the GEMM cap clock:

        b max(0, 1 - w / w_mem)        so a tensor-busy second draws   w G(f)/G(f_gemm) + max(0, w_mem - w)

    w the row's gemm_power_weights, w_mem the memory-bound activity weight (power.toml
    [activity], sim/power.clock_params); 0 where w >= w_mem (every GEMM of the validation's
    training steps) and for GPUs without a clock model. At f_gemm the draw is max(w, w_mem): a
    GEMM second also streams its operands through L2 and HBM and never draws less than a
    memory-bound second (component powers add, tensor work only adds to them: activity-based GPU
    power, Hong & Kim, "An integrated GPU power and performance model", ISCA 2010); above f_gemm
    only its tensor work, w, follows the clock.

    Why: a memory-bound GEMM drew w G(f)/G(f_gemm) over its tensor-busy share c' and w_mem over
    the HBM stall t - c', so its draw moved with c' at w G(f)/G(f_gemm) / speed(f) - w_mem per
    second (power_states divides GEMM power by the speed): negative for weak GEMMs (mixtral decode
    b64 on grand_teton_h100, experts e / e_ref 0.06-0.13), where more FLOP peak (smaller c', the
    same t) raised the step's power: 1,839 -> 1,834 MHz and 1.2 ppm slower at +30 % (validation LOG
    2026-12-03). With the floor it moves at w (G(f)/G(f_gemm) / speed(f) - 1) >= 0 for w < w_mem
    (G(f)/G(f_gemm) >= speed(f) on f_gemm..f_boost for every clock-modelled GPU:
    tests/sim/test_power_monotone.py), and a kernel choice that stretches c' at the same FLOPs
    (c' w fixed) leaves it unchanged, where a floor on w itself (max(w, w_mem)) raised it. The
    weights are continuous in w, so the draw is continuous in the kernel times."""
    params = clock_params(gpu.key)
    if params is None or not rows.any():
        return np.zeros(int(np.count_nonzero(rows)))
    w = gemm_power_weights(t, k, gpu, rows)
    busy = (k.compute_s * k.gpu_s / np.maximum(np.maximum(k.compute_s, k.memory_s), 1e-300) * t.count)[rows]
    return busy * np.maximum(0.0, 1.0 - w / params[1])


def memory_bound_gemms(t: OpTable, k: KernelTimes) -> np.ndarray:
    """Mask of the GEMM rows whose compute time is below their memory time."""
    return (t.kind == MATMUL) & (k.compute_s < k.memory_s)


def tensor_busy_s(t: OpTable, k: KernelTimes, rows: np.ndarray) -> np.ndarray:
    """Of the memory-bound GEMM rows ``rows`` (a mask): the seconds (over the count) each keeps its
    tensor cores busy, the busy fraction c / m of its whole time with fixed costs (as a
    compute-bound GEMM's power counts its gpu_s): c (m + fixed) / m, = a compute-bound GEMM's
    gpu_s at the ridge."""
    return (k.compute_s * k.gpu_s / np.maximum(k.memory_s, 1e-300) * t.count)[rows]


def add_tensor_power(gemm_power, memory, c, cw):
    """(GEMM power seconds, memory-bound seconds) with the memory-bound GEMMs' tensor-core time c
    (a sum of tensor_busy_s) taken from memory-bound into GEMM power, weighted: cw (the same sum
    weighted by gemm_power_weights). Floats or arrays (one value per step)."""
    has = c > 0
    return np.where(has, gemm_power + cw, gemm_power), np.where(has, np.maximum(0.0, memory - c), memory)


def with_tensor_power(cats: dict[str, float], t: OpTable, k: KernelTimes, gpu, memory_key: str) -> dict[str, float]:
    """Power shares (sim/power.py power_state) with the tensor-core work of the memory-bound GEMMs:
    such a GEMM keeps its tensor cores busy for its compute time c of its HBM-bound time m, so
    it draws GEMM power over c (weighted as gemm_power_weight weights a compute-bound GEMM) and
    memory-bound power over the stall m - c, not memory-bound power over all of m. At the ridge
    (c = m) this is the compute-bound GEMM's draw, so a GEMM crossing it moves the clock
    continuously (counting it as memory-bound below the ridge made a few % more HBM bandwidth
    flip GEMMs to full power at once and slow a throttled step). Weak GEMMs (weight below w_mem)
    draw at least memory-bound power at the GEMM cap clock: gemm_floor_s seconds are added to
    ``memory_key``, the category the caller counts memory-bound GEMM time in."""
    rows = memory_bound_gemms(t, k)
    c = tensor_busy_s(t, k, rows)
    floor = float(gemm_floor_s(t, k, gpu, t.kind == MATMUL).sum())
    if c.sum() <= 0 and floor <= 0:
        return cats
    out = dict(cats)
    gp, mem = add_tensor_power(out.get("matmul_power", out.get("matmul_compute", 0.0)), out.get(memory_key, 0.0),
                               float(c.sum()), float(np.dot(c, gemm_power_weights(t, k, gpu, rows))))
    out["matmul_power"], out[memory_key] = float(gp), float(mem) + floor
    return out


def compute_bound_gemms(t: OpTable, k: KernelTimes) -> np.ndarray:
    """Mask of the GEMM rows whose compute time is at least their memory time."""
    return (t.kind == MATMUL) & (k.compute_s >= k.memory_s)


def reference_gemm_efficiency(gpu) -> np.ndarray:
    """Efficiency of an aligned 8192^3 GEMM per dtype index (optable.DTYPES) on ``gpu``."""
    eff, n = efficiency(gpu), len(DTYPES)
    ref = GemmColumns(np.full(n, 8192.0), np.full(n, 8192.0), np.full(n, 8192.0), np.ones(n))
    return eff.cached("gemm.reference_8192", lambda: gemm_efficiency(ref, np.arange(n), gpu.sm_count, eff,
                                                                    np.full(n, 16)))


def boost_speedup(eff) -> float:
    """gemm.boost_speedup of the efficiency data: compute speed at boost over the sustained rate
    (1 where the data has none: no clock model for that GPU)."""
    return float(eff.get("gemm.boost_speedup")) if "gemm.boost_speedup" in eff.params else 1.0
