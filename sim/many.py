"""estimate_many(): the step estimates of many points at once, as one table.

A point is (workload, hw, stack, overrides, price). Its estimate is what `mechsim.estimate` gives
(the first pass on the host the facade assumes: sim/host.py), less the per-op records and the
error band. Points are evaluated together:

    dedupe       points that time the same (workload, hw, stack, overrides) share one timing
                 (a price axis costs nothing)
    group        timings on one GPU (what-ifs applied), clock and attention kernel form a group;
                 each timing's op table (sim/prepare.py, built once per workload and fusion)
                 contributes its rows, and the group's rows are concatenated into one table
    kernels      kernel_times on the group's table: every law there is row-wise, so the rows of
                 a point get exactly the times its own table would (sim/kernels.py)
    power        the power state of every timing at once (the fixed point of sim/power.py on
                 arrays), then at_compute_speed row-wise
    compose      the tandem queue of sim/launch.py per point on its blocks (segmented cumsums)
                 and the category / phase sums (bincounts over point x category)

Only the one-GPU sustained composition is vectorised. A point on several GPUs (a plan or a
Cluster), with a run pattern, CPU offload, a host profile or host syncs (Op.syncs) is estimated by `estimate` one at a
time (column ``path`` = "loop"), as is a point whose inputs the vector path refuses, so the
table always holds every point; its error text goes in ``error``.

Figures agree with `estimate` to float64 rounding (tests/sim/test_many.py: 1e-9 relative): sums
over a point's rows are taken as segment sums instead of numpy's pairwise sums, which moves the
last bits only.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .clock import RunPattern
from .distributed import is_multi_gpu
from .host import estimate as estimate_facade, gpu_of, host_for, stack_on_host
from .kernels import ATTENTION, MATMUL, check_recipe, kernel_times
from .launch import host_times, op_syncs
from .optable import KINDS, PHASES, AttnColumns, GemmColumns, OpTable
from .power import power_states
from .overrides import apply_overrides
from .prepare import (Prepared, add_tensor_power, at_compute_speed, boost_speedup, calibrated_stack, categories,
                      compute_bound_gemms, efficiency, gemm_floor_s, gemm_power_weights, hw_rates, memory_bound_gemms, prepare,
                      resolve_gpu, resolve_stack, step_peak, tensor_busy_s)
from .calibration import on_clear_caches
from .results import CATEGORIES, evict_oldest
from .stacks import Stack, get_stack

COLLECTIVE = KINDS.index("collective")
COLUMNS = tuple(dict.fromkeys(
    ("workload", "mode", "gpu", "stack", "gpus", "step_time_s", "tokens", "tokens_per_s", "mfu", "hfu",
     "gpu_busy_s", "launch_overhead_s", "model_flops", "hardware_flops", "peak_flops", "peak_dtype",
     "memory_total", "memory_capacity", "memory_fits", "sm_clock_hz")
    + tuple(f"{c}_s" for c in CATEGORIES) + tuple(f"{p}_s" for p in PHASES)
    + ("usd_per_gpu_hour", "usd_per_step", "tokens_per_usd", "path", "error")))


# ---- inputs -----------------------------------------------------------------------------------

def _is_seq(v: Any) -> bool:
    return isinstance(v, Sequence) and not isinstance(v, (str, Mapping))


def _points(workloads, hw, stack, overrides, usd_per_gpu_hour) -> tuple[list, list, list, list, list, list[bool]]:
    """The inputs as one list per argument, all of the points' length (scalars broadcast), and
    for the first four whether they vary by point (a sequence of more than one value)."""
    given = {"workloads": workloads, "hw": hw, "stack": stack, "overrides": overrides,
             "usd_per_gpu_hour": usd_per_gpu_hour}
    lens = {k: len(v) for k, v in given.items() if _is_seq(v)}
    sizes = set(lens.values()) - {1}
    if len(sizes) > 1:
        raise ValueError("estimate_many: the per-point arguments differ in length ("
                         + ", ".join(f"{k} {v}" for k, v in lens.items()) + "); give one value or one per point")
    n = sizes.pop() if sizes else 1
    out = [list(v) * (n if len(v) == 1 else 1) if _is_seq(v) else [v] * n for v in given.values()]
    varies = [lens.get(k, 1) > 1 for k in list(given)[:4]]
    return out[0], out[1], out[2], out[3], out[4], varies


def _ov_key(ov: Mapping | None) -> tuple:
    return () if not ov else tuple(sorted((str(k), type(v).__name__, v) for k, v in ov.items()))


# ---- one timing of the vector path ------------------------------------------------------------

@dataclass
class Timing:
    """One distinct (workload, hw, stack, overrides) of the vector path and its resolved inputs."""

    workload: Any
    p: Prepared
    gpu: Any
    clock: float
    st: Stack            # calibrated, on the facade's host
    group: tuple
    u: int = 0           # its index among the timings


def _hw_side(hw, stack, ov) -> tuple[Any, float, Stack, Any]:
    """(GPU with the what-ifs, clock, stack, rates) of a one-GPU point, resolved as the facade
    resolves them (sim/host.py estimate: the stack on the host it assumes, then
    sim/estimate.steps: overrides, the stack calibrated for the GPU). ``stack``: a name or Stack
    (the workload's own already filled in)."""
    gpu0 = gpu_of(hw)
    explicit = isinstance(stack, Stack)
    host = host_for(hw, gpu0, None, explicit)
    on = stack_on_host(stack if explicit else calibrated_stack(gpu0, get_stack(stack)), host.scale)
    gpu, clock = apply_overrides(resolve_gpu(hw), ov or {})
    return gpu, clock, resolve_stack(on, gpu, None), hw_rates(gpu, clock)


class Resolver:
    """Timings of points, the hardware side resolved once per (hw, stack, overrides) and the op
    table once per (workload, fusion), within one estimate_many call."""

    def __init__(self) -> None:
        self.hw: dict[tuple, tuple] = {}
        self.tables: dict[tuple, tuple[Any, Prepared]] = {}
        self.solo: dict[int, tuple[Any, bool]] = {}
        self.rates_ok: dict[tuple, bool] = {}

    def timing(self, w, hw, stack, ov, ov_key: tuple) -> Timing | None:
        """The Timing of a point, or None when the vector path does not cover it."""
        if hw.__class__ is not str and is_multi_gpu(w, hw):
            return None
        solo = self.solo.get(id(w))
        if solo is None:
            solo = self.solo[id(w)] = (w, not is_multi_gpu(w, "") and getattr(w, "offload", "none") == "none")
        if not solo[1]:
            return None   # several GPUs, or CPU offload: sim/estimate.steps takes another target
        s = stack if stack is not None else w.stack
        hkey = (hw if isinstance(hw, str) else id(hw), s if isinstance(s, str) else id(s), ov_key)
        side = self.hw.get(hkey)
        if side is None:
            side = self.hw[hkey] = (hw, s) + _hw_side(hw, s, ov)
        gpu, clock, st, rates = side[2:]
        check_recipe(w, gpu)
        tkey = (id(w), st.fused)
        hit = self.tables.get(tkey)
        if hit is None:
            hit = self.tables[tkey] = (w, prepare(w, st.fused))
        p = hit[1]
        ok = self.rates_ok.get((id(p), id(rates)))
        if ok is None:
            ok = self.rates_ok[(id(p), id(rates))] = not bool(
                ((p.table.kind == MATMUL) & np.isnan(rates.tensor_peak[p.table.dtype])).any())
        if not ok:
            return None   # estimate() raises the error naming the op
        if op_syncs(p.table).any():
            return None   # host syncs (an eager MoE loop): launch.synced_step_time, one point at a time
        return Timing(w, p, gpu, clock, st, (id(rates), st.attention))


# ---- tables of many points --------------------------------------------------------------------

_NUMERIC = ("kind", "phase", "dtype", "flops", "bytes", "bytes_written", "count", "kernels", "align_bytes", "rows",
            "cols", "strided_elems", "strided_class")
_INTS = ("kind", "phase", "dtype")
_PACKED: dict[int, tuple[OpTable, np.ndarray]] = {}


def packed(t: OpTable) -> np.ndarray:
    """The numeric columns of ``t`` (_NUMERIC, then the GEMM and attention columns) as rows of one
    float64 matrix, so that a group's tables concatenate in one call (memoised per table)."""
    hit = _PACKED.get(id(t))
    if hit is not None and hit[0] is t:
        return hit[1]
    cols = [getattr(t, f) for f in _NUMERIC] + [getattr(t.gemm, f) for f in GemmColumns.__slots__] + \
        [getattr(t.attn, f) for f in AttnColumns.__slots__]
    m = np.array(cols, dtype=float).reshape(len(cols), len(t.count))
    if len(_PACKED) > 8192:
        _PACKED.clear()
    _PACKED[id(t)] = (t, m)
    return m


def concat_tables(tables: Sequence[OpTable]) -> OpTable:
    """One OpTable of the rows of ``tables`` in order (block_starts offset to the new rows). The
    integer columns (kind, phase, dtype) hold small integers, exact in float64 and back."""
    m = np.concatenate([packed(t) for t in tables], axis=1)
    lens = np.array([len(t.count) for t in tables])
    offs = np.concatenate([[0], np.cumsum(lens)[:-1]])
    col = dict(zip(_NUMERIC, m[:len(_NUMERIC)]))
    for f in _INTS:
        col[f] = col[f].astype(np.int64)
    ng = len(GemmColumns.__slots__)
    g = GemmColumns(*m[len(_NUMERIC):len(_NUMERIC) + ng])
    a = AttnColumns(*m[len(_NUMERIC) + ng:])
    ops = tuple(itertools.chain.from_iterable(t.ops for t in tables))
    starts = np.concatenate([t.block_starts + o for t, o in zip(tables, offs)])
    return OpTable(ops, col["kind"], col["phase"], col["dtype"], col["flops"], col["bytes"], col["bytes_written"],
                   col["count"], col["kernels"], g, a, starts, col["align_bytes"], col["rows"], col["cols"],
                   col["strided_elems"], col["strided_class"])


def segment_sum(x: np.ndarray, point: np.ndarray, n: int) -> np.ndarray:
    """Sum of x over the rows of each point (rows in order: a sequential sum per point)."""
    return np.bincount(point, weights=x, minlength=n)


# ---- one group: a GPU, clock and attention kernel ----------------------------------------------

# the category launch_overhead is the Estimate's launch_overhead_s
FIGURES = ("step_time_s", "gpu_busy_s", "sm_clock_hz") + tuple(f"{c}_s" for c in CATEGORIES) + \
    tuple(f"{p}_s" for p in PHASES)


def _evaluate_group(ts: list[Timing], out: np.ndarray) -> None:
    """Figures (FIGURES) of the Timings of one group into rows x.u of ``out`` (module docstring)."""
    t0 = ts[0]
    gpu, eff, rates, impl = t0.gpu, efficiency(t0.gpu), hw_rates(t0.gpu, t0.clock), t0.st.attention
    tables = [x.p.table for x in ts]
    t = concat_tables(tables)
    n = len(ts)
    lens = np.array([len(x.count) for x in tables])
    point = np.repeat(np.arange(n), lens)
    k = kernel_times(t, rates, eff, impl)
    g = k.gpu_s * t.count
    # the power shares of OneGpu.power_inputs, per point (the same row formulas, sim/prepare.py)
    cb = compute_bound_gemms(t, k)
    busy, gemm = segment_sum(g, point, n), segment_sum(np.where(cb, g, 0.0), point, n)
    att = segment_sum(np.where(t.kind == ATTENTION, g, 0.0), point, n)
    gw = np.bincount(point[cb], weights=g[cb] * gemm_power_weights(t, k, gpu, cb), minlength=n)
    gemm_power = gemm * np.where(gemm > 0, gw / np.where(gemm > 0, gemm, 1.0), 1.0)
    mb = memory_bound_gemms(t, k)
    c = tensor_busy_s(t, k, mb)
    gemm_power, mem = add_tensor_power(gemm_power, busy - gemm - att, np.bincount(point[mb], weights=c, minlength=n),
                                       np.bincount(point[mb], weights=c * gemm_power_weights(t, k, gpu, mb),
                                                   minlength=n))
    mm = t.kind == MATMUL
    mem = mem + np.bincount(point[mm], weights=gemm_floor_s(t, k, gpu, mm), minlength=n)
    launch = [_launch_rows(x.p.table, x.st) for x in ts]
    host_row = np.concatenate([h for h, _ in launch])
    window = np.maximum(busy, segment_sum(host_row * t.count, point, n))
    ps = None
    r = boost_speedup(eff)
    if r != 1.0:
        ps = power_states(gemm, att, gemm_power, mem, window, gpu.key, gpu.boost_clock_hz, r, impl)
    if ps is not None:
        k = at_compute_speed(t, k, ps.speed[point], ps.attention_speed[point])
    gpu_row = k.gpu_s + np.concatenate([g for _, g in launch])   # the queue's GPU side: kernels + graph gaps
    step, queued = _tandem(host_row, gpu_row, t.count, t.block_starts, point, lens, n)
    per_op = k.gpu_s * t.count
    busy_l = segment_sum(per_op, point, n)
    step = np.maximum(step, queued)
    idle = step - busy_l
    nc, nph = len(CATEGORIES), len(PHASES)
    by_cat = np.bincount(point * nc + categories(t, k), weights=per_op, minlength=n * nc).reshape(n, nc)
    by_cat[:, CATEGORIES.index("launch_overhead")] = idle
    by_phase = np.bincount(point * nph + t.phase, weights=per_op, minlength=n * nph).reshape(n, nph)
    clock = ps.clock_hz if ps is not None else np.zeros(n)
    out[[x.u for x in ts]] = np.column_stack([step, busy_l, clock, by_cat, by_phase])


_LAUNCH: dict[tuple, tuple[Any, Any, tuple[np.ndarray, np.ndarray]]] = {}


def _launch_rows(t: OpTable, st: Stack) -> tuple[np.ndarray, np.ndarray]:
    """(host seconds, CUDA-graph gap seconds) per instance of each op of ``t`` on ``st``
    (launch.host_times; launch.launch_times' gap), memoised per table and stack object."""
    hit = _LAUNCH.get((id(t), id(st)))
    if hit is not None and hit[0] is t and hit[1] is st:
        return hit[2]
    rows = (host_times(t, st), t.kernels * st.launch_graph_s if st.graphs else np.zeros(len(t.count)))
    if len(_LAUNCH) > 8192:
        _LAUNCH.clear()
    _LAUNCH[(id(t), id(st))] = (t, st, rows)
    return rows


def _tandem(host, gpu, count, starts, point, lens, n) -> tuple[np.ndarray, np.ndarray]:
    """launch.tandem_step_time and the busy time (sum of gpu x count) of every point: the blocks
    of all points laid out as rows of a matrix (zero-padded), so each point's cumulative sums
    run over its own blocks only, in its own order."""
    H = np.add.reduceat(host * count, starts)
    G = np.add.reduceat(gpu * count, starts)
    bp = point[starts]                                  # the point of each block
    first = np.flatnonzero(np.r_[True, bp[1:] != bp[:-1]])
    nb = np.diff(np.r_[first, len(bp)])
    col = np.arange(len(bp)) - np.repeat(first, nb)
    Hm, Gm, Fm = (np.zeros((n, int(nb.max()))) for _ in range(3))
    Hm[bp, col], Gm[bp, col], Fm[bp, col] = H, G, host[starts]
    h_before = np.cumsum(Hm, axis=1) - Hm
    g_after = np.cumsum(Gm[:, ::-1], axis=1)[:, ::-1]
    lead = np.where(col_mask(nb, Hm.shape[1]), h_before + Fm + g_after, -np.inf).max(axis=1)
    last = np.cumsum(lens) - 1
    return np.maximum(lead, Hm.sum(axis=1) + gpu[last]), segment_sum(gpu * count, point, n)


def col_mask(nb: np.ndarray, width: int) -> np.ndarray:
    """[points, width] mask of the columns that hold a block."""
    return np.arange(width)[None, :] < nb[:, None]


# ---- the table ------------------------------------------------------------------------------

_PEAKS: dict[tuple, tuple[Any, Any, tuple[str, float]]] = {}


def _peak(t: OpTable, gpu) -> tuple[str, float]:
    """prepare.step_peak, memoised per table and GPU object (the entry holds both)."""
    hit = _PEAKS.get((id(t), id(gpu)))
    if hit is None or hit[0] is not t or hit[1] is not gpu:
        if len(_PEAKS) > 4096:
            _PEAKS.clear()
        hit = _PEAKS[(id(t), id(gpu))] = (t, gpu, step_peak(t, gpu))
    return hit[2]


def row_of(e) -> dict:
    """The table row of an Estimate (sim/results.py)."""
    row = {"workload": e.workload, "mode": e.mode, "gpu": e.gpu, "stack": e.stack, "gpus": e.gpus,
           "step_time_s": e.step_time_s, "tokens": e.tokens, "model_flops": e.model_flops,
           "hardware_flops": e.hardware_flops, "peak_flops": e.peak_flops, "peak_dtype": e.peak_dtype,
           "gpu_busy_s": e.gpu_busy_s, "launch_overhead_s": e.launch_overhead_s, "memory_total": e.memory.total,
           "memory_capacity": e.memory.capacity, "memory_fits": e.memory.fits, "sm_clock_hz": e.sm_clock_hz}
    row.update({f"{c}_s": float(e.by_category.get(c, 0.0)) for c in CATEGORIES})
    row.update({f"{c}_s": float(e.by_phase.get(c, 0.0)) for c in PHASES})
    return row


def estimate_many(workloads, hw: Any = "h100_sxm", stack: Any = None, overrides: Any = None, *,
                  usd_per_gpu_hour: Any = None, run: RunPattern | None = None, profile: Any = None):
    """Step estimates of many points as a pandas DataFrame, one row per point, in order.

    workloads: a workload (TrainingWorkload / InferenceWorkload) or a sequence of them; hw, stack,
    overrides, usd_per_gpu_hour: one value for every point or a sequence with one per point (as
    `mechsim.estimate` takes them: hw a GPU / system name or object or a Cluster; stack a name, a
    Stack or None for the workload's own; overrides a what-if mapping). run / profile: as
    `estimate`'s, for every point (such points are estimated one at a time).

    Columns (COLUMNS): the Estimate's figures (step_time_s, tokens_per_s, mfu, hfu, memory, the
    categories as <category>_s, the phases as <phase>_s, sm_clock_hz, ...), the price's
    usd_per_step (step x GPUs x price / 3600) and tokens_per_usd, ``path`` ("vector": the
    batched path; "loop": estimated one at a time, module docstring) and ``error`` (the one-line
    message of a point that cannot be estimated, "" otherwise; its numbers are NaN).
    """
    import pandas as pd   # pandas loads only when a table is asked for
    ws, hws, sts, ovs, prices, varies = _points(workloads, hw, stack, overrides, usd_per_gpu_hour)
    inv, first = _distinct([v for v, by_point in zip((ws, hws, sts, ovs), varies) if by_point], len(ws))
    combos = [(ws[i], hws[i], sts[i], ovs[i]) for i in first.tolist()]
    rows = _combo_rows(combos, run is not None or profile is not None, run, profile)
    return _frame(pd, rows, inv, prices)


def _distinct(cols: Sequence[list], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(the combination of each point, the first point of each combination) over the arguments
    that vary by point: points whose arguments are the very same objects share one (numpy over
    the object ids: no per-point Python beyond reading them). Equal values in distinct objects
    may get two combinations; the timings memo (by value where a value is the key) joins them."""
    code = np.zeros(n, np.int64)
    span = 1
    for vals in cols if n else ():
        _, ci = np.unique(np.fromiter(map(id, vals), np.int64, n), return_inverse=True)
        k = int(ci.max()) + 1
        if span * k >= 2**62:   # keep the combined code in int64
            _, code = np.unique(code, return_inverse=True)
            span = int(code.max()) + 1
        code, span = code * k + ci.reshape(n), span * k
    _, first, inv = np.unique(code, return_index=True, return_inverse=True)
    return inv.reshape(n), first


# timing key -> (workload, hw, stack, Row): the figures of a one-GPU timing of the vector path,
# memoised per immutable input (as sim/step.py memoises a step): a sweep asked again, or with
# another price axis, finds them. The entry holds its objects, so no id is reused while it lives.
_MEMO: dict[tuple, tuple[Any, Any, Any, "Row"]] = {}
MEMO_SIZE = 65536


@on_clear_caches
def clear_memo() -> None:
    """Forget the memoised timings (the data files changed)."""
    _MEMO.clear()


@dataclass(frozen=True)
class Row:
    """The figures of one combination: STATIC values, FIGURES values, its path and error text."""

    static: tuple | None
    figures: np.ndarray | None
    path: int            # 0 vector, 1 loop
    error: str = ""


def _timing_key(w, h, s, ov) -> tuple:
    return (id(w), h if h.__class__ is str else id(h), s if s is None or s.__class__ is str else id(s),
            _ov_key(ov) if ov else ())


def _memo_get(key: tuple, w, h, s) -> "Row | None":
    hit = _MEMO.get(key)
    if hit is None or hit[0] is not w or (h.__class__ is not str and hit[1] is not h) or \
            (s is not None and s.__class__ is not str and hit[2] is not s):
        return None
    return hit[3]


def _combo_rows(combos: list[tuple], loop: bool, run, profile) -> list[Row]:
    """The Row of each (workload, hw, stack, overrides) combination: memoised, batched over the
    new one-GPU timings (groups of _evaluate_group), or estimated one at a time (``loop``: a run
    pattern or host profile for every point)."""
    rows: list[Row | None] = [None] * len(combos)
    keys = [_timing_key(*c) for c in combos]
    if not loop:
        for j, (key, c) in enumerate(zip(keys, combos)):
            rows[j] = _memo_get(key, c[0], c[1], c[2])
    res = Resolver()
    timings: dict[tuple, Timing | None] = {}
    of: dict[int, Timing] = {}
    for j, (key, (w, h, s, ov)) in enumerate(zip(keys, combos)):
        if rows[j] is not None:
            continue
        if key not in timings:
            try:
                timings[key] = None if loop else res.timing(w, h, s, ov, key[3])
            except (ValueError, TypeError, KeyError, ArithmeticError):
                timings[key] = None   # the loop path reports the error
        x = timings[key]
        if x is not None:
            of[j] = x
    live = list({id(x): x for x in of.values()}.values())
    for u, x in enumerate(live):
        x.u = u
    figs = np.full((len(live), len(FIGURES)), np.nan)
    groups: dict[tuple, list[Timing]] = {}
    for x in live:
        groups.setdefault(x.group, []).append(x)
    for ts in groups.values():
        _evaluate_group(ts, figs)
    done: dict[int, Row] = {}
    for j, (key, (w, h, s, ov)) in enumerate(zip(keys, combos)):
        if rows[j] is not None:
            continue
        x = of.get(j)
        if x is None:
            rows[j] = _loop_row(w, h, s, ov, run, profile)
            continue
        row = done.get(x.u)
        if row is None:
            row = done[x.u] = Row(_static(x), figs[x.u].copy(), 0)
        rows[j] = row
        if len(_MEMO) >= MEMO_SIZE:
            evict_oldest(_MEMO)
        _MEMO[key] = (w, h, s, row)
    return [r for r in rows if r is not None]


def _loop_row(w, h, s, ov, run, profile) -> Row:
    """The Row of one point estimated by `estimate` (its error text where it raises)."""
    try:
        r = row_of(estimate_facade(w, h, s, ov, profile=profile, run=run))
    except (ValueError, TypeError, KeyError, ArithmeticError) as err:
        return Row(None, None, 1, " ".join(str(err.args[0] if isinstance(err, KeyError) and err.args else err).split()))
    return Row(tuple(r[c] for c in STATIC), np.array([r[c] for c in FIGURES], dtype=float), 1)


STATIC = ("workload", "mode", "gpu", "stack", "gpus", "tokens", "model_flops", "hardware_flops", "peak_flops",
          "peak_dtype", "memory_total", "memory_capacity", "memory_fits")
_TOTALS: dict[int, tuple[Prepared, float]] = {}
_CAPACITY: dict[int, tuple[Any, float]] = {}


def _static(x: Timing) -> tuple:
    """The STATIC figures of a Timing (those that no kernel time changes)."""
    p, gpu = x.p, x.gpu
    hit = _TOTALS.get(id(p))
    if hit is None or hit[0] is not p:
        if len(_TOTALS) > 4096:
            _TOTALS.clear()
        hit = _TOTALS[id(p)] = (p, sum(p.memory.values()))
    peak_dtype, peak = _peak(p.table, gpu)
    c = _CAPACITY.get(id(gpu))
    if c is None or c[0] is not gpu:
        if len(_CAPACITY) > 4096:
            _CAPACITY.clear()
        c = _CAPACITY[id(gpu)] = (gpu, float(gpu.hbm_capacity))
    cap = c[1]
    return (p.summary, p.mode, gpu.key, x.st.key, 1, p.tokens, p.model_flops, p.hardware_flops, peak, peak_dtype,
            hit[1], cap, hit[1] <= cap)


STRINGS = ("workload", "mode", "gpu", "stack", "peak_dtype")


_DTYPES: dict[tuple, Any] = {}


def _categorical(pd, vals: Sequence, inv: np.ndarray):
    """A pandas Categorical of the points from one value per combination (None: missing); its
    dtype is kept per category list (pandas checks a new one's categories, ~0.2 ms)."""
    cats = tuple(sorted({v for v in vals if v is not None}))
    at = {v: i for i, v in enumerate(cats)}
    codes = np.array([-1 if v is None else at[v] for v in vals], dtype=np.int64)
    dtype = _DTYPES.get(cats)
    if dtype is None:
        if len(_DTYPES) > 256:
            _DTYPES.clear()
        dtype = _DTYPES[cats] = pd.CategoricalDtype(list(cats))
    return pd.Categorical.from_codes(codes[inv], dtype=dtype)


def _frame(pd, rows: list[Row], inv: np.ndarray, prices: list):
    """The DataFrame (COLUMNS) of the points: point i shows the Row of its combination inv[i]
    (NaN / None where it raised)."""
    data: dict[str, Any] = {}
    missing = (None,) * len(STATIC)
    cols = list(zip(*(r.static if r.static is not None else missing for r in rows))) or [()] * len(STATIC)
    fits_ok = all(r.static is not None for r in rows)
    for c, vals in zip(STATIC, cols):
        if c in STRINGS:
            data[c] = _categorical(pd, vals, inv)
        else:   # numbers: None (a point that raised) is NaN; memory_fits: None there
            data[c] = np.array(vals, dtype=bool if fits_ok else object)[inv] if c == "memory_fits" else \
                np.array(vals, dtype=float)[inv]
    nan = np.full(len(FIGURES), np.nan)
    figs = np.array([r.figures if r.figures is not None else nan for r in rows]).reshape(len(rows), len(FIGURES)).T
    for j, c in enumerate(FIGURES):
        data[c] = figs[j][inv]
    step, gpus, tokens, peak = (data[c] for c in ("step_time_s", "gpus", "tokens", "peak_flops"))
    price = np.array(prices, dtype=float)   # None: NaN
    with np.errstate(divide="ignore", invalid="ignore"):
        data["tokens_per_s"] = tokens / step
        data["mfu"] = data["model_flops"] / (step * peak)
        data["hfu"] = data["hardware_flops"] / (step * peak)
        data["usd_per_gpu_hour"] = price
        data["usd_per_step"] = step * gpus * price / 3600.0
        data["tokens_per_usd"] = tokens / data["usd_per_step"]
    data["path"] = pd.Categorical.from_codes(np.array([r.path for r in rows], dtype=np.int64)[inv],
                                             categories=["vector", "loop"])
    data["error"] = np.array([r.error for r in rows], dtype=object)[inv]
    return pd.DataFrame({c: data[c] for c in COLUMNS})


__all__ = ["COLUMNS", "concat_tables", "estimate_many", "row_of"]
