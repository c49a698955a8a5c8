"""The one timing helper every runner case uses (torch + stdlib only).

Short ops are timed the way they run inside a model (operands from HBM, not a warm L2):
`inner` calls back to back over ROTATING input sets whose total size exceeds
2x L2 (so each call reads from HBM, not L2), captured in one CUDA graph that is
replayed `reps` times between CUDA events; per-call time = replay time / inner.
Where capture fails the same burst runs eagerly between events ("events").
Ops under FLUSH_BELOW_S also get a second timing, one call per sample after
writing a 2x L2 buffer (`extra.timing_flush`, what triton's do_bench does) -
kept apart because the flush's dirty write-back lands inside the timed call.
On CPU every method degrades to time.perf_counter ("wall").

While a case is measured, a background `nvidia-smi -lms 50` (or, without -lms, 100 ms
polling) samples SM/memory clock, board power and temperature; the samples inside the
timed region are summarized into `extra.power_state` (PowerSampler). Nothing is started
or recorded on CPU or without nvidia-smi.

Contract for `call`: call(i) runs the op once on input set i % n_rot and may
return its output (dropped at once). It must not synchronize (graph capture).
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import subprocess
import threading
import time
from datetime import datetime
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


# ---------------------------------------------------------------- power state sampler

POWER_FIELDS = ["timestamp", "clocks.sm", "clocks.mem", "power.draw", "temperature.gpu"]
# Read too where this nvidia-smi knows them (--help-query-gpu): instantaneous power (power.draw
# is a 1 s average on Ampere and newer) and the active clock-event (throttle) reason bitmask.
POWER_OPTIONAL = [("power.draw.instant", "clocks_event_reasons.active"),
                  ("power.draw.instant", "clocks_throttle_reasons.active")]
LMS_MS = 50
POLL_S = 0.1
_PROBE: dict = {}  # nvidia-smi capabilities, probed once per process


def _smi_run(args: list[str], timeout: float = 10.0) -> str | None:
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None


def _gpu_ids(device: str) -> list[str]:
    """nvidia-smi -i candidates for a CUDA device: its UUID (independent of
    CUDA_VISIBLE_DEVICES / ordering), then the bare CUDA index (what env.py uses)."""
    d = torch.device(device)
    idx = d.index if d.index is not None else torch.cuda.current_device()
    ids = []
    try:
        uuid = str(torch.cuda.get_device_properties(idx).uuid)
        if uuid:
            ids.append(uuid if uuid.startswith(("GPU-", "MIG-")) else "GPU-" + uuid)
    except Exception:  # noqa: BLE001 - older torch: no uuid
        pass
    return ids + [str(idx)]


def probe_smi(device: str, smi: str | None = None) -> dict | None:
    """What the sampler needs to know, once per (process, device): the nvidia-smi path, a
    working -i id, the fields it accepts, whether it has -lms. None where it cannot run."""
    if device in _PROBE:
        return _PROBE[device]
    info = None
    smi = smi or shutil.which("nvidia-smi")
    if smi is not None:
        helpq = _smi_run([smi, "--help-query-gpu"]) or ""
        fields = list(POWER_FIELDS)
        for opt in POWER_OPTIONAL:
            if all(f in helpq for f in opt):
                fields += list(opt)
                break
        for gid in _gpu_ids(device):
            out = _smi_run([smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", "-i", gid])
            if out and len(out.splitlines()[0].split(",")) == len(fields):
                helptxt = (_smi_run([smi, "-h"]) or "")
                info = {"smi": smi, "gpu_id": gid, "fields": fields,
                        "lms": "-lms" in helptxt or "--loop-ms" in helptxt,
                        "stdbuf": shutil.which("stdbuf")}
                break
    _PROBE[device] = info
    return info


def _num(v: str) -> float | None:
    try:
        return float(v)
    except ValueError:
        return None


def _stamp(v: str) -> float | None:
    """nvidia-smi's timestamp ('2026/11/30 12:34:56.789', local time) -> epoch seconds."""
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S"):
        try:
            return datetime.strptime(v.strip(), fmt).timestamp()
        except ValueError:
            continue
    return None


def _stats(vals: list[float], keys=("median", "min", "max")) -> dict:
    fn = {"median": statistics.median, "min": min, "max": max}
    return {k: round(fn[k](vals), 1) for k in keys} if vals else {k: None for k in keys}


class PowerSampler:
    """nvidia-smi in the background for one case: start() before the warm-up (its start-up
    overlaps work that is not timed), begin()/end() around the timed region, stop() ->
    the summary of the samples inside [begin, end] (all samples if none fell inside)."""

    def __init__(self, info: dict):
        self.info = info
        self.fields = info["fields"]
        self.rows: list[tuple[float, list[str]]] = []   # (arrival epoch s, values)
        self.proc: subprocess.Popen | None = None
        self.thread: threading.Thread | None = None
        self.halt = threading.Event()
        self.t_begin: float | None = None
        self.t_end: float | None = None
        self.source = "lms" if info["lms"] else "poll"
        self.t_start_s = 0.0

    def _query(self) -> list[str]:
        return [self.info["smi"], f"--query-gpu={','.join(self.fields)}", "--format=csv,noheader,nounits",
                "-i", self.info["gpu_id"]]

    def start(self) -> "PowerSampler":
        t0 = time.perf_counter()
        try:
            if self.source == "lms":
                cmd = self._query() + ["-lms", str(LMS_MS)]
                if self.info.get("stdbuf"):  # line-buffered through the pipe
                    cmd = [self.info["stdbuf"], "-oL"] + cmd
                self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                             stdin=subprocess.DEVNULL, text=True, bufsize=1)
                self.thread = threading.Thread(target=self._read, daemon=True)
            else:
                self.thread = threading.Thread(target=self._poll, daemon=True)
            self.thread.start()
        except OSError:
            self.proc = self.thread = None
        self.t_start_s = time.perf_counter() - t0
        return self

    def _add(self, line: str, t: float) -> None:
        vals = [v.strip() for v in line.split(",")]
        if len(vals) == len(self.fields):
            self.rows.append((t, vals))

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._add(line, time.time())

    def _poll(self) -> None:
        while not self.halt.is_set():
            t0 = time.time()
            out = _smi_run(self._query(), timeout=5.0)
            if out:
                self._add(out.splitlines()[0], 0.5 * (t0 + time.time()))
            self.halt.wait(max(0.0, POLL_S - (time.time() - t0)))

    def begin(self) -> None:
        self.t_begin = time.time()

    def end(self) -> None:
        self.t_end = time.time()

    def stop(self, wait: bool = False) -> dict | None:
        """Summary of the samples read so far; the process is signalled and reaped in the
        background (waiting for nvidia-smi to exit cost 30-60 ms of idle GPU per case on the
        H200, enough to lower the power state of the next case: LOG 2026-11-30)."""
        t0 = time.perf_counter()
        self.halt.set()
        if self.proc is not None:
            self.proc.terminate()
        if wait:
            self._reap()
        else:
            threading.Thread(target=self._reap, daemon=True).start()
        out = self.summary()
        if out is not None:
            out["overhead_s"] = round(self.t_start_s + time.perf_counter() - t0, 4)
        return out

    def _reap(self) -> None:
        if self.proc is not None:
            try:
                self.proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.thread is not None:
            self.thread.join(timeout=5.0)

    def _times(self) -> list[float]:
        """Sample times: nvidia-smi's own timestamps (right even if its output reached the
        pipe late, in blocks) unless they cannot be read or sit more than 1 s after / 30 s
        before their arrival (another time zone): then the arrival times."""
        arrival = [t for t, _ in self.rows]
        if "timestamp" not in self.fields:
            return arrival
        i = self.fields.index("timestamp")
        stamps = [_stamp(v[i]) for _, v in self.rows]
        if stamps and all(s is not None for s in stamps) and \
                -1.0 < statistics.median(a - s for a, s in zip(arrival, stamps)) < 30.0:
            return stamps
        return arrival

    def summary(self) -> dict | None:
        if not self.rows:
            return {"samples": 0, "source": self.source, "window": None}
        times = self._times()
        lo = self.t_begin if self.t_begin is not None else -math.inf
        hi = self.t_end if self.t_end is not None else math.inf
        rows = [v for t, (_, v) in zip(times, self.rows) if lo <= t <= hi]
        window = "timed"
        if not rows:
            rows, window = [v for _, v in self.rows], "measure"

        def col(name: str) -> list[float]:
            if name not in self.fields:
                return []
            i = self.fields.index(name)
            return [x for x in (_num(v[i]) for v in rows) if x is not None]

        out = {"sm_clock_mhz": _stats(col("clocks.sm")),
               "mem_clock_mhz": _stats(col("clocks.mem"), ("median",)),
               "power_w": _stats(col("power.draw"), ("median", "max")),
               "temp_c": _stats(col("temperature.gpu"), ("median",)),
               "samples": len(rows), "source": self.source, "window": window,
               "timed_s": round(self.t_end - self.t_begin, 3) if self.t_begin and self.t_end else None}
        if "power.draw.instant" in self.fields:
            out["power_instant_w"] = _stats(col("power.draw.instant"), ("median", "max"))
        reasons = [f for f in self.fields if f.endswith("reasons.active")]
        if reasons:
            i = self.fields.index(reasons[0])
            counts: dict[str, int] = {}
            for v in rows:
                counts[v[i]] = counts.get(v[i], 0) + 1
            out["clock_event_reasons"] = counts  # bitmask -> samples (0x4 SW power cap, 0x20 SW thermal, ...)
        return out


def power_sampler(device: str) -> PowerSampler | None:
    """A started sampler for a CUDA device, or None (CPU, no nvidia-smi, MECHSIM_NO_POWER=1)."""
    if not device.startswith("cuda") or os.environ.get("MECHSIM_NO_POWER") == "1":
        return None
    try:
        info = probe_smi(device)
    except Exception:  # noqa: BLE001 - instrumentation never breaks a case
        info = None
    return PowerSampler(info).start() if info else None


class _Watch:
    """begin()/end() on an optional sampler."""

    def __init__(self, sampler: PowerSampler | None):
        self.s = sampler

    def __enter__(self):
        if self.s is not None:
            self.s.begin()
        return self

    def __exit__(self, *exc):
        if self.s is not None:
            self.s.end()
        return False


def _finish(sampler: PowerSampler | None, extra: dict) -> None:
    if sampler is None:
        return
    try:
        state = sampler.stop()
    except Exception as e:  # noqa: BLE001
        state = {"samples": 0, "error": short_error(e, 200)}
    if state is not None:
        extra["power_state"] = state


def graph_timing(call, clock: Clock, inner: int, n_rot: int, reps: int | None,
                 adapt: bool = True, power: PowerSampler | None = None) -> tuple[dict, int]:
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
    with _Watch(power):
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
            warmup: int = 3, flush: bool = True,
            before_sample: Callable[[], object] | None = None) -> tuple[dict, dict]:
    """Warm up, pick `inner`, time (graph if possible, else eager events / wall).

    Returns (timing, extra). `inner`/`reps` may be fixed by the caller (collectives:
    every rank must issue the same calls). `l2` (bytes) enables the flush timing.
    `before_sample` runs on the host before each eager sample's first mark (outside it):
    eager inference cases read the host's speed there (paired host probes).
    """
    clock = Clock(device)
    extra: dict = {"n_rot": n_rot}
    power = power_sampler(device)  # started before the warm-up: its start-up is not timed
    try:
        timing = _measure(call, clock, extra, power, device, n_rot=n_rot, l2=l2, graph=graph,
                          inner=inner, reps=reps, warmup=warmup, flush=flush, before_sample=before_sample)
    finally:
        _finish(power, extra)
    return timing, extra


def _measure(call, clock: Clock, extra: dict, power: PowerSampler | None, device: str, *, n_rot: int,
             l2: int, graph: bool, inner: int | None, reps: int | None, warmup: int, flush: bool,
             before_sample: Callable[[], object] | None = None) -> dict:
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
            timing, inner = graph_timing(call, clock, inner, n_rot, reps, power=power)
        except Exception as e:  # noqa: BLE001 - some ops cannot be captured: fall back
            extra["graph_error"] = short_error(e)
            _recover_cuda()
    if timing is None:
        n = reps or reps_for(inner * (t_call or TARGET_S))
        with _Watch(power):
            timing = summarize(sample(clock, _burst(call, inner), n, before=before_sample), clock.eager_method, inner)
    if flush and l2 and timing["median_s"] < FLUSH_BELOW_S:
        extra["timing_flush"] = flush_timing(call, clock, l2, device)
    return timing


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
    power = power_sampler(device)  # after the first (compiling) step, before the other warm-ups
    try:
        for i in range(1, warmup):
            step(i)
        clock.sync()
        if clock.cuda:
            torch.cuda.reset_peak_memory_stats()
        with _Watch(power):
            timing = summarize(sample(clock, step, reps), clock.eager_method, 1)
    finally:
        _finish(power, extra)
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
    for _r in range(reps):
        clock.sync()
        t0 = time.perf_counter()
        for i in range(inner):
            call(i)
        per.append(time.perf_counter() - t0)
    clock.sync()
    return summarize(per, "wall", inner)


def host_probe_s(device: str, launches: int = 300, reps: int = 5) -> float | None:
    """Host seconds per eager launch of a 1-element in-place add, right now: the host's
    speed at the moment of a case (a shared VM's CPU speed drifts by tens of percent
    between minutes), recorded next to every host-bound measurement so the comparison
    can scale host launch costs to it. Median of ``reps`` bursts. None on CPU."""
    if not device.startswith("cuda"):
        return None
    import torch
    x = torch.zeros(1, device=device)
    return host_time_per_call(lambda i: x.add_(1.0), device, launches, reps)["median_s"]


def add_host_probe(extra: dict, before: float | None, after: float | None) -> None:
    """extra["host_probe_s"] = the host speed around a timing: before, after, mean."""
    if before is not None and after is not None:
        extra["host_probe_s"] = {"before": before, "after": after, "mean": (before + after) / 2,
                                 "unit": "s per launch"}
