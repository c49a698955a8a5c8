"""The one timing helper every runner case uses (torch + stdlib only).

Short ops are timed the way they run inside a model (shared/reference/traps.md):
`inner` calls back to back over ROTATING input sets whose total size exceeds
2x L2 (so each call reads from HBM, not L2), captured in one CUDA graph that is
replayed `reps` times between CUDA events; per-call time = replay time / inner.
Where capture fails the same burst runs eagerly between events ("events").
Ops under FLUSH_BELOW_S also get a second timing, one call per sample after
writing a 2x L2 buffer (`extra.timing_flush`, what triton's do_bench does) -
kept apart because the flush's dirty write-back lands inside the timed call.
On CPU every method degrades to time.perf_counter ("wall").

Contract for `call`: call(i) runs the op once on input set i % n_rot and may
return its output (dropped at once). It must not synchronize (graph capture).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable

import torch

TARGET_S = 1e-3          # one sample (graph replay or eager burst) lasts at least this
FLUSH_BELOW_S = 50e-6    # ops faster than this also get an L2-flush timing
SAMPLE_BUDGET_S = 0.25   # timed work per method per case; reps adapt to it
MIN_REPS, MAX_REPS = 5, 30
MAX_INNER = 2000
FLUSH_REPS = 30


def rotation_count(set_bytes: int, l2_bytes: int, max_sets: int = 4096) -> int:
    """Input sets needed so that their total size exceeds 2x L2 (1 if one set already does)."""
    if set_bytes <= 0 or l2_bytes <= 0:
        return 1
    return max(1, min(max_sets, (2 * l2_bytes) // set_bytes + 1))


def choose_inner(t_call: float, n_rot: int, target_s: float = TARGET_S, max_inner: int = MAX_INNER) -> int:
    """Calls per sample: >= target_s of work, >= n_rot, a multiple of n_rot (so every
    replay walks all sets in order and the next replay starts on the least recently used)."""
    want = max(1, math.ceil(target_s / max(t_call, 1e-7)), n_rot)
    inner = math.ceil(want / n_rot) * n_rot
    if inner > max_inner:
        inner = max(n_rot, (max_inner // n_rot) * n_rot)
    return inner


def reps_for(t_sample: float, budget_s: float = SAMPLE_BUDGET_S) -> int:
    return max(MIN_REPS, min(MAX_REPS, math.ceil(budget_s / max(t_sample, 1e-7))))


class Clock:
    """CUDA events on a GPU, perf_counter on CPU; same interface for the sample loop."""

    def __init__(self, device: str):
        self.cuda = torch.device(device).type == "cuda"

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def seconds(self, a, b) -> float:
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a

    @property
    def eager_method(self) -> str:
        return "events" if self.cuda else "wall"


def sample(clock: Clock, fn: Callable[[int], object], reps: int,
           before: Callable[[], object] | None = None) -> list[float]:
    """Seconds of fn(r) for r in range(reps), marks enqueued back to back, one sync at the end."""
    pairs = []
    for r in range(reps):
        if before is not None:
            before()
        a = clock.mark()
        fn(r)
        b = clock.mark()
        pairs.append((a, b))
    clock.sync()
    return [clock.seconds(a, b) for a, b in pairs]


def summarize(samples: list[float], method: str, inner: int) -> dict:
    per = [s / inner for s in samples]
    return {"method": method, "median_s": statistics.median(per), "min_s": min(per),
            "max_s": max(per), "n": len(per), "inner": inner, "samples_s": per}


def _burst(call: Callable[[int], object], inner: int) -> Callable[[int], None]:
    def run(r: int) -> None:
        for i in range(inner):
            call(r * inner + i)
    return run


def estimate_call_s(call, clock: Clock, n_rot: int) -> float:
    """Rough seconds per call from an eager burst (after warm-up)."""
    t1 = sample(clock, _burst(call, 1), 1)[0]
    if t1 > 2 * TARGET_S:
        return t1
    k = max(n_rot, min(64, math.ceil(2 * TARGET_S / max(t1, 1e-6))))
    return sample(clock, _burst(call, k), 1)[0] / k


def _capture(call, inner: int):
    """Warm up on a side stream (as torch.cuda.graphs requires), then capture `inner` calls."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(min(inner, 2)):
            call(i)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(inner):
            call(i)
    graph.replay()
    torch.cuda.synchronize()
    return graph


def graph_timing(call, clock: Clock, inner: int, n_rot: int, reps: int | None,
                 adapt: bool = True) -> tuple[dict, int]:
    """Time graph replays of `inner` calls; if a replay is far below TARGET_S (the eager
    estimate was launch-bound), recapture once with more calls. Returns (timing, inner)."""
    graphs = [_capture(call, inner)]
    t_rep = sample(clock, lambda r: graphs[-1].replay(), 1)[0]
    if adapt and t_rep < 0.5 * TARGET_S and inner < MAX_INNER:
        new_inner = choose_inner(t_rep / inner, n_rot)
        if new_inner > inner:
            graphs.clear()  # free the first graph's pool before capturing the larger one
            inner = new_inner
            graphs.append(_capture(call, inner))
            t_rep = sample(clock, lambda r: graphs[-1].replay(), 1)[0]
    samples = sample(clock, lambda r: graphs[-1].replay(), reps or reps_for(t_rep))
    graphs.clear()
    return summarize(samples, "graph_rotating", inner), inner


def flush_timing(call, clock: Clock, l2: int, device: str, reps: int = FLUSH_REPS) -> dict:
    """One call per sample, each after writing a 2x L2 buffer (do_bench style)."""
    buf = torch.empty(max(1, 2 * l2 // 4), dtype=torch.float32, device=device)
    try:
        return summarize(sample(clock, call, reps, before=buf.zero_), "flush", 1)
    finally:
        del buf


def short_error(e: BaseException, limit: int = 500) -> str:
    return f"{type(e).__name__}: {str(e)[:limit]}"


def _recover_cuda() -> None:
    try:
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - best effort after a failed capture
        pass
    torch.cuda.empty_cache()


def measure(call: Callable[[int], object], device: str, *, n_rot: int = 1, l2: int = 0,
            graph: bool = True, inner: int | None = None, reps: int | None = None,
            warmup: int = 3, flush: bool = True) -> tuple[dict, dict]:
    """Warm up, pick `inner`, time (graph if possible, else eager events / wall).

    Returns (timing, extra). `inner`/`reps` may be fixed by the caller (collectives:
    every rank must issue the same calls). `l2` (bytes) enables the flush timing.
    """
    clock = Clock(device)
    extra: dict = {"n_rot": n_rot}
    for i in range(warmup):
        call(i)
    clock.sync()
    t_call = None
    if inner is None:
        t_call = estimate_call_s(call, clock, n_rot)
        inner = choose_inner(t_call, n_rot)
        extra["t_estimate_s"] = t_call
    timing = None
    if graph and clock.cuda:
        try:
            timing, inner = graph_timing(call, clock, inner, n_rot, reps)
        except Exception as e:  # noqa: BLE001 - some ops cannot be captured: fall back
            extra["graph_error"] = short_error(e)
            _recover_cuda()
    if timing is None:
        n = reps or reps_for(inner * (t_call or TARGET_S))
        timing = summarize(sample(clock, _burst(call, inner), n), clock.eager_method, inner)
    if flush and l2 and timing["median_s"] < FLUSH_BELOW_S:
        extra["timing_flush"] = flush_timing(call, clock, l2, device)
    return timing, extra


def measure_steps(step: Callable[[int], object], device: str, warmup: int = 3,
                  reps: int = 5) -> tuple[dict, dict]:
    """Whole-step timing (train/prefill steps): events around each step, median.

    The first warm-up step is timed on the host (it includes torch.compile when the
    model is compiled); peak memory is reset after warm-up so it is the steady state."""
    clock = Clock(device)
    t0 = time.perf_counter()
    step(0)
    clock.sync()
    extra: dict = {"first_step_s": time.perf_counter() - t0}
    for i in range(1, warmup):
        step(i)
    clock.sync()
    if clock.cuda:
        torch.cuda.reset_peak_memory_stats()
    timing = summarize(sample(clock, step, reps), clock.eager_method, 1)
    if clock.cuda:
        extra["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
        extra["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    return timing, extra


def host_time_per_call(call: Callable[[int], object], device: str, inner: int,
                       reps: int = 10) -> dict:
    """Host (CPU) seconds to issue one call, measured over `inner` calls without sync;
    the device queue is drained before each sample (method "wall")."""
    clock = Clock(device)
    per = []
    for r in range(reps):
        clock.sync()
        t0 = time.perf_counter()
        for i in range(inner):
            call(i)
        per.append(time.perf_counter() - t0)
    clock.sync()
    return summarize(per, "wall", inner)
