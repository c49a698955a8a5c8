"""Host launch overhead: when the CPU, not the GPU, sets the pace.

The CPU issues kernels one after another (``host_s`` each); the GPU runs them in
order as they arrive. With an unbounded launch queue, the step finishes at

    T = max_j ( H_<j + G_>=j )        (tandem queue; H = host time, G = GPU time)

over the launch boundaries j: either the GPU never starves (T = sum G), or at some
point it waits for the host and everything after runs from there. Ops come in
execution order; consecutive ops with the same ``count`` are one repeating block
(a transformer layer), timed as ``count`` copies of the block, for which the max
sits at the block's ends. CUDA graphs remove host time and add a small GPU gap
per kernel instead.

Host syncs (Op.syncs: ``.tolist()``, ``.item()``, ``nonzero``) cut the queue: after issuing a
syncing op the host waits until the GPU has drained everything issued so far, pays
HOST_SYNC_S, and only then issues the next kernel, so host and GPU time no longer overlap across
the sync: the step is the sum of the tandem times of the segments between syncs plus
HOST_SYNC_S per sync (synced_step_time). s syncs on one op count as s x HOST_SYNC_S at that
point: splitting a segment into s equal pieces leaves its tandem time unchanged (the bound is
homogeneous in host and GPU time), up to the pieces' last kernels.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ._toml import load_toml
from .calibration import DATA
from .kernels import ATTENTION, BWD, MATMUL
from .optable import OpTable, block_starts
from .stacks import Stack


@dataclass(frozen=True)
class LaunchTimes:
    host_s: np.ndarray       # per-instance host issue time of each op
    gpu_s: np.ndarray        # per-instance GPU (kernel) time
    step_s: float            # wall time of the step (tandem-queue bound)
    gpu_busy_s: float        # sum of GPU time
    idle_s: float            # step_s - gpu_busy_s: GPU waiting for the host or between graphed kernels


def on_host(stack: Stack, scale: float, bwd_scale: float | None = None) -> Stack:
    """``stack`` on a host ``scale`` x as slow as the one its launch costs were calibrated on (a
    CPU record's launch_scale or a probe's measured ratio, sim/host.py): both host costs scale,
    the backward's by ``bwd_scale`` where given (eager autograd issues a CUDA backward from its
    own device thread, which a VM may run at another speed than the caller's: a probe backward
    measures it); a CUDA-graph replay issues no per-kernel host work, so graphed steps do not move."""
    bwd = scale if bwd_scale is None else bwd_scale
    if scale == 1.0 and bwd == 1.0:
        return stack
    return dataclasses.replace(stack, launch_host_s=stack.launch_host_s * scale,
                               launch_host_bwd_s=stack.launch_host_bwd_s * bwd)


def launch_costs(stacks: list[Stack], scale: float) -> dict[str, tuple[float, float]]:
    """Host seconds per kernel (forward, backward) of each stack on a host of ``scale``; 0 for
    stacks that replay CUDA graphs."""
    return {st.key: (0.0, 0.0) if st.graphs else (st.launch_host_s * scale, st.launch_host_bwd_s * scale)
            for st in stacks}


LIBRARY_KERNEL_FRACTION = float(load_toml(DATA / "host_ops.toml")["library_kernel_fraction"]["value"])
HOST_SYNC_S = float(load_toml(DATA / "host_sync.toml")["host_sync_s"]["value"])


def host_dispatches(t: OpTable, grouped_gemm: bool = False) -> np.ndarray:
    """Eager kernels' host cost per op instance in units of one kernel's launch cost: a matmul or
    attention op's kernels after its calls' first (split-K reduce, split-KV combine) are launched
    inside the library call and cost LIBRARY_KERNEL_FRACTION of one (sim/data/host_ops.toml); every
    other kernel is its own aten call. A per-expert GEMM op (kernels = batch > 1: one GEMM per
    expert) is ``batch`` calls when Python loops over the experts (the eager MoE loops, a
    SequentialMLP: ``xe @ w[e]`` per expert, launch/moe_loop records), one library call when the
    stack's ``grouped_gemm`` launches them from C++ (TE GroupedLinear's multi-stream GEMMs)."""
    key = (id(t), grouped_gemm)
    hit = _DISPATCHES.get(key)
    if hit is not None and hit[0] is t:
        return hit[1]
    mm = t.kind == MATMUL
    calls = np.ones(len(t.kernels))
    if not grouped_gemm:
        b = t.gemm.batch
        calls = np.where(mm & (b > 1) & (t.kernels >= b), b, 1.0)
    lib = np.maximum(t.kernels - calls, 0.0) * (mm | (t.kind == ATTENTION))
    out = t.kernels - lib * (1.0 - LIBRARY_KERNEL_FRACTION)
    out.flags.writeable = False
    if len(_DISPATCHES) > 4096:
        _DISPATCHES.clear()
    _DISPATCHES[key] = (t, out)
    return out


# host_dispatches per (op table, grouped_gemm), each entry holding its table (no id reused while it
# lives): the host band's other hosts and the power inputs ask it again for the same table
_DISPATCHES: dict[tuple[int, bool], tuple[OpTable, np.ndarray]] = {}


def host_times(t: OpTable, stack: Stack) -> np.ndarray:
    """Host time to issue one instance of each op: its dispatches x the per-kernel launch cost."""
    if stack.graphs:
        return np.zeros(len(t.ops))
    per_kernel = np.where(t.phase == BWD, stack.launch_host_bwd_s, stack.launch_host_s)
    return host_dispatches(t, "grouped_gemm" in stack.fused) * per_kernel


def block_bounds(count: np.ndarray, starts: np.ndarray | None = None) -> list[tuple[int, int]]:
    """[start, end) index ranges of the repeated blocks (optable.block_starts)."""
    starts = (block_starts(count) if starts is None else starts).tolist()
    return list(zip(starts, starts[1:] + [len(count)]))


def tandem_step_time(host: np.ndarray, gpu: np.ndarray, count: np.ndarray,
                     starts: np.ndarray | None = None) -> float:
    """max over block boundaries j of (host time before j + first launch of j
    + GPU time from j on), and (all host time + the last kernel). A block repeats its
    smallest count times, each repetition issuing every op count/repeats times, so its
    host and GPU totals are the count-weighted sums."""
    if len(host) == 0:
        return 0.0
    starts = block_starts(count) if starts is None else starts
    H = np.add.reduceat(host * count, starts)
    G = np.add.reduceat(gpu * count, starts)
    h_before = np.cumsum(H) - H
    g_after = np.cumsum(G[::-1])[::-1]
    return float(max(np.max(h_before + host[starts] + g_after), H.sum() + gpu[-1]))


def phase_end_times(host: np.ndarray, gpu: np.ndarray, count: np.ndarray, phase: np.ndarray,
                    n_phases: int, starts: np.ndarray | None = None) -> np.ndarray:
    """When the GPU finishes each phase's last kernel in the tandem queue (phase indices 0..n-1,
    ops in execution order, blocks phase-pure: optable.block_starts): at the end of block j,

        C_j = max( max_{i<=j} (H_<i + first launch of i + G_i..j),  H_<=j + last kernel of j )

    (the first term as tandem_step_time's, the second the host-bound end of a block), running
    max over j, capped at the step; a phase with no ops ends where the one before it does. The
    last phase ends at tandem_step_time."""
    ends = np.zeros(n_phases)
    if len(host) == 0:
        return ends
    starts = block_starts(count) if starts is None else starts
    H = np.add.reduceat(host * count, starts)
    G = np.add.reduceat(gpu * count, starts)
    h_cum, g_cum = np.cumsum(H), np.cumsum(G)
    first = host[starts]
    lead = np.maximum.accumulate(h_cum - H + first - (g_cum - G)) + g_cum
    last = np.append(starts[1:], len(host)) - 1
    c = np.maximum.accumulate(np.maximum(lead, h_cum + gpu[last]))
    # tandem_step_time(host, gpu, count, starts) on the same block sums
    tandem = float(max(np.max(h_cum - H + first + np.cumsum(G[::-1])[::-1]), H.sum() + gpu[-1]))
    c = np.minimum(c, tandem).tolist()
    at = -1    # the last block of a phase <= p (blocks are in phase order within a step, but need not be)
    block_phase = phase[starts].tolist()
    for p in range(n_phases):
        for j in range(at + 1, len(block_phase)):
            if block_phase[j] <= p:
                at = j
        ends[p] = c[at] if at >= 0 else 0.0
    return np.maximum.accumulate(ends)


_SYNCS: dict[int, tuple[tuple, np.ndarray]] = {}


def op_syncs(t: OpTable) -> np.ndarray:
    """Host syncs per instance of each op (Op.syncs), memoised per op tuple (an estimate's
    budget is ~0.2 ms: reading the field of every op costs ~10 us)."""
    hit = _SYNCS.get(id(t.ops))
    if hit is not None and hit[0] is t.ops:
        return hit[1]
    out = np.fromiter((o.syncs for o in t.ops), dtype=float, count=len(t.ops))
    if len(_SYNCS) > 4096:
        _SYNCS.clear()
    _SYNCS[id(t.ops)] = (t.ops, out)
    return out


class _Segment:
    """Running tandem bound of the work issued since the last sync: units (H, G, first host,
    last GPU) in order; time = max(max_j (H_<j + h_first_j - G_<j) + G, H + g_last)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.h = self.g = self.g_last = 0.0
        self.lead = -np.inf

    def add(self, h: float, g: float, h_first: float, g_last: float) -> None:
        self.lead = max(self.lead, self.h + h_first - self.g)
        self.h, self.g, self.g_last = self.h + h, self.g + g, g_last

    def close(self) -> float:
        t = 0.0 if self.lead == -np.inf else max(self.lead + self.g, self.h + self.g_last)
        self.reset()
        return t


def synced_step_time(host: np.ndarray, gpu: np.ndarray, count: np.ndarray, syncs: np.ndarray,
                     starts: np.ndarray | None = None, sync_s: float = HOST_SYNC_S) -> float:
    """tandem_step_time with host syncs (module docstring): blocks without a sync are one unit
    each, as there; a block with syncs is walked op by op for its first two repetitions, and the
    time its second one added (every later one is the same: each starts after the same sync)
    counts for the rest."""
    seg, total = _Segment(), 0.0
    for s, e in block_bounds(count, block_starts(count) if starts is None else starts):
        if not syncs[s:e].any():
            seg.add(float(np.dot(host[s:e], count[s:e])), float(np.dot(gpu[s:e], count[s:e])), host[s], gpu[e - 1])
            continue
        reps = int(count[s:e].min())
        mult = count[s:e] / reps
        for _ in range(min(reps, 2)):
            before = total
            for i in range(s, e):
                m = mult[i - s]
                seg.add(host[i] * m, gpu[i] * m, host[i], gpu[i])
                if syncs[i]:
                    total += seg.close() + syncs[i] * m * sync_s
        if reps > 2:
            total += (reps - 2) * (total - before)
    return total + seg.close()


def queue_step_time(t: OpTable, host: np.ndarray, gpu: np.ndarray) -> float:
    """The host/GPU queue's step time of ``t``: synced_step_time where an op syncs the host,
    else tandem_step_time."""
    syncs = op_syncs(t)
    if syncs.any():
        return synced_step_time(host, gpu, t.count, syncs, t.block_starts)
    return tandem_step_time(host, gpu, t.count, t.block_starts)


def launch_times(t: OpTable, gpu_s: np.ndarray, stack: Stack) -> LaunchTimes:
    """The tandem queue of ``t`` on ``stack``. A replayed CUDA graph leaves the GPU idle
    stack.launch_graph_s between its kernels: the queue's GPU side carries it, the kernels'
    busy time does not, so it shows as idle (launch overhead), not in a category."""
    host = host_times(t, stack)
    queued = gpu_s + (t.kernels * stack.launch_graph_s if stack.graphs else 0.0)
    step = max(queue_step_time(t, host, queued), float(np.dot(queued, t.count)))
    busy = float(np.dot(gpu_s, t.count))
    return LaunchTimes(host, gpu_s, step, busy, step - busy)
