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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .kernels import BWD
from .optable import OpTable
from .stacks import Stack


@dataclass(frozen=True)
class LaunchTimes:
    host_s: np.ndarray       # per-instance host issue time of each op
    gpu_s: np.ndarray        # per-instance GPU time incl. graph gaps
    step_s: float            # wall time of the step (tandem-queue bound)
    gpu_busy_s: float        # sum of GPU time
    idle_s: float            # step_s - gpu_busy_s: GPU waiting for the host


def host_times(t: OpTable, stack: Stack) -> np.ndarray:
    """Host time to issue one instance of each op: kernels x per-kernel launch cost."""
    if stack.graphs:
        return np.zeros(len(t.ops))
    per_kernel = np.where(t.phase == BWD, stack.launch_host_bwd_s, stack.launch_host_s)
    return t.kernels * per_kernel


def block_bounds(count: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) index ranges of consecutive ops with equal count."""
    if len(count) == 0:
        return []
    cuts = np.flatnonzero(np.diff(count)) + 1
    edges = np.concatenate(([0], cuts, [len(count)]))
    return list(zip(edges[:-1].tolist(), edges[1:].tolist()))


def tandem_step_time(host: np.ndarray, gpu: np.ndarray, count: np.ndarray) -> float:
    """max_j (host time before j + GPU time from j on), evaluated at block ends."""
    bounds = block_bounds(count)
    H = np.array([count[a] * host[a:b].sum() for a, b in bounds])
    G = np.array([count[a] * gpu[a:b].sum() for a, b in bounds])
    h_before = np.concatenate(([0.0], np.cumsum(H)))          # at each boundary
    g_after = np.concatenate((np.cumsum(G[::-1])[::-1], [0.0]))
    last_gpu = gpu[-1] if len(gpu) else 0.0
    return float(max(np.max(h_before[:-1] + host_first(host, bounds) + g_after[:-1]),
                     h_before[-1] + last_gpu))


def host_first(host: np.ndarray, bounds: list[tuple[int, int]]) -> np.ndarray:
    """Host time of the first launch of each block (the GPU cannot start before it)."""
    return np.array([host[a] for a, _ in bounds])


def launch_times(t: OpTable, gpu_s: np.ndarray, stack: Stack) -> LaunchTimes:
    host = host_times(t, stack)
    gpu = gpu_s + (t.kernels * stack.launch_graph_s if stack.graphs else 0.0)
    step = tandem_step_time(host, gpu, t.count)
    busy = float(np.dot(gpu, t.count))
    step = max(step, busy)
    return LaunchTimes(host, gpu, step, busy, step - busy)
