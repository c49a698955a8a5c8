"""The host/GPU probe behind `mechsim probe`: torch and the standard library only.

Runs in ~10 s on the GPU machine a user wants estimates for and writes a versioned JSON
profile (format ``mechsim.host_profile/1``, docs/host.md):

- host: CPU model (/proc/cpuinfo), physical and usable cores, boot id, OS, Python;
- software: torch, CUDA, cuDNN versions; gpu: name, SMs, memory;
- measurements (SI units, unit in the name): host seconds per eager kernel launch (a
  1-element ``add_``), GPU seconds per kernel inside a CUDA graph, eager decode steps of a
  tiny Llama-style decoder at 2 and DEEP_LAYERS layers and the forward (with the loss) and the
  backward of its TRAIN_LAYERS-deep amp_bf16 training step (host issue time, interleaved over a
  2.5 s window; wall time), bf16 GEMM
  rates at 1024^3 and 8192^3, and device-to-device copy bandwidth; the host state over the window
  (steal, run-queue delay, thread CPU time).

``HostSampler`` reads the same deep forward and training forward / backward between a job's own steps and writes a
profile of the host states that job ran in (``window``): on a VM host that switches speed within
seconds, a probe taken apart from the steps samples another mix of states (docs/host.md).

The tiny model is validation/runners/llama_ref.py's decoder (the code mechsim's eager stack
is counted on), loaded by path. Usable without mechsim installed::

    python3 mechsim/probe_runner.py --out profile.json

Importing this module needs neither torch nor pydantic; torch is imported when a probe runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

FORMAT = "mechsim.host_profile/1"
TINY = {"vocab": 512, "d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "ffn": 128,
        "tie_embeddings": False, "max_seq": 64, "batch": 1, "ctx": 16}
DEEP_LAYERS = 16    # the deep probe decoder: per-layer host cost of a model as deep as the ones it prices
TRAIN_LAYERS = 8    # the backward probe's decoder (its head is ~2 % of the backward's kernels)
SERIES_S, WARMUP_S = 2.5, 0.3   # cut from 3.5 / 0.5 s: a cold probe took 15.0 s (LOG "The training forward")
GEMM_SIZES = (1024, 8192)
COPY_BYTES = 1 << 30


def default_profile_path() -> Path:
    """<user data dir>/mechsim/host_profile.json (platformdirs where installed, else XDG)."""
    try:
        import platformdirs
        base = Path(platformdirs.user_data_dir("mechsim", appauthor=False))
    except ImportError:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "mechsim"
    return base / "host_profile.json"


def write_json_atomic(path: Path, obj: dict) -> None:
    """Write ``obj`` as JSON to ``path``: temp file in the same folder, fsync, os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---- the host -------------------------------------------------------------------------

def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def cpu_info(text: str | None = None) -> dict:
    """CPU model and core counts from /proc/cpuinfo text (physical cores: distinct
    (physical id, core id) pairs; None where the file does not say)."""
    text = _read("/proc/cpuinfo") if text is None else text
    model, cores, cur = None, set(), {}
    for line in (text or "").splitlines() + [""]:
        if not line.strip():
            if "core id" in cur:
                cores.add((cur.get("physical id", "0"), cur["core id"]))
            cur = {}
            continue
        key, _, val = line.partition(":")
        cur[key.strip()] = val.strip()
        if key.strip() == "model name" and model is None:
            model = val.strip()
    return {"cpu_model": model or platform.processor() or platform.machine(),
            "physical_cores": len(cores) or None, "logical_cpus": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None}


def host_info() -> dict:
    boot = _read("/proc/sys/kernel/random/boot_id")
    return {**cpu_info(), "boot_id": boot.strip() if boot else None, "machine": platform.machine(),
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version()}


def software_info(torch: Any) -> dict:
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": cudnn}


def gpu_info(torch: Any) -> dict:
    p = torch.cuda.get_device_properties(0)
    return {"name": p.name, "count": torch.cuda.device_count(), "sm_count": p.multi_processor_count,
            "memory_bytes": p.total_memory}


# ---- timings --------------------------------------------------------------------------

def median(xs: list[float]) -> float:
    s = sorted(xs)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2


def host_per_call_s(torch: Any, call: Callable[[], object], inner: int, reps: int) -> float:
    """Median over ``reps`` bursts of host seconds per call (``inner`` calls, no sync inside
    a burst; the GPU queue is drained before each burst)."""
    per = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(inner):
            call()
        per.append((time.perf_counter() - t0) / inner)
    torch.cuda.synchronize()
    return median(per)


def gpu_per_call_s(torch: Any, call: Callable[[], object], inner: int, reps: int) -> float:
    """Median over ``reps`` of CUDA-event seconds per call, ``inner`` calls per sample."""
    per = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            call()
        b.record()
        b.synchronize()
        per.append(a.elapsed_time(b) * 1e-3 / inner)
    return median(per)


def launch_probe(torch: Any, kernels: int = 200) -> dict:
    """Host seconds per eager launch of a 1-element add_, and GPU seconds per kernel when the
    same 200 launches replay from a CUDA graph (graph launch gap included)."""
    x = torch.zeros(1, device="cuda")
    eager = host_per_call_s(torch, lambda: x.add_(1.0), 300, 7)
    graph = graph_per_call_s(torch, lambda: x.add_(1.0), kernels, 7)
    return {"launch_eager_host_s": eager, "launch_graph_gpu_s": graph}


def _llama_ref() -> Any:
    """validation/runners/llama_ref.py, found beside this package (repo or installed)."""
    here = Path(__file__).resolve().parent
    for cand in (here.parent / "validation" / "runners", here / "validation" / "runners"):
        path = cand / "llama_ref.py"
        if path.exists():
            spec = importlib.util.spec_from_file_location("_mechsim_llama_ref", path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = mod   # dataclasses look their module up there
            spec.loader.exec_module(mod)
            return mod
    raise FileNotFoundError("validation/runners/llama_ref.py not found beside the mechsim package")


def interleaved_series(torch: Any, calls: dict[str, tuple[Callable[[], Any], int]],
                       seconds: float) -> dict[str, list[float]]:
    """Round-robin over ``calls`` (name -> (call, burst size)) for ``seconds``: each round one
    burst of each, host seconds per call (GPU queue drained before each burst), so every series
    samples the same host states (a VM host switches speed within a few hundred ms: LOG "The
    probe's 3 s series"). Burst size 0: the call times itself and returns its seconds (a float,
    or a tuple of them for a call that times several parts)."""
    out: dict[str, list[Any]] = {k: [] for k in calls}
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for name, (call, inner) in calls.items():
            out[name].append(call() if inner == 0 else host_per_call_s(torch, call, inner, 1))
    return out


def _proc_stat_cpu() -> list[int] | None:
    """The aggregate 'cpu' line of /proc/stat in jiffies (user nice system idle iowait irq softirq steal ...)."""
    text = _read("/proc/stat")
    line = next((ln for ln in (text or "").splitlines() if ln.startswith("cpu ")), None)
    return [int(x) for x in line.split()[1:]] if line else None


def _run_delay_ns() -> int | None:
    """This thread's time waiting on a run queue (ns, /proc/thread-self/schedstat field 2)."""
    text = _read("/proc/thread-self/schedstat")
    try:
        return int(text.split()[1]) if text else None
    except (IndexError, ValueError):
        return None


class HostState:
    """Where the host's time went over a window: the machine's steal fraction (/proc/stat:
    time the hypervisor ran something else on our vCPUs), this thread's run-queue delay and CPU
    time over wall time. A slow host state with steal ~0 and CPU time ~ wall is a slower CPU
    (clock, a busy SMT sibling, caches), not the vCPU being descheduled."""

    def __init__(self) -> None:
        self.stat, self.delay = _proc_stat_cpu(), _run_delay_ns()
        self.wall, self.cpu = time.perf_counter(), time.thread_time()

    def read(self) -> dict:
        stat, delay = _proc_stat_cpu(), _run_delay_ns()
        wall = time.perf_counter() - self.wall
        out = {"wall_s": wall, "thread_cpu_fraction": (time.thread_time() - self.cpu) / wall if wall > 0 else None}
        if stat and self.stat and len(stat) >= 8:
            d = [a - b for a, b in zip(stat, self.stat)]
            out["steal_fraction"] = d[7] / sum(d) if sum(d) > 0 else 0.0
            out["busy_fraction"] = 1 - (d[3] + d[4]) / sum(d) if sum(d) > 0 else None
        if delay is not None and self.delay is not None and wall > 0:
            out["run_delay_fraction"] = (delay - self.delay) * 1e-9 / wall
        return out


def probe_decoder(torch: Any, ref: Any, n_layers: int) -> Callable[[], object]:
    """One eager decode step (TINY's dims, ``n_layers`` layers, bf16, inference mode) as a call."""
    cfg = ref.RefConfig(**{**{k: TINY[k] for k in ("vocab", "d_model", "n_heads", "n_kv_heads", "ffn",
                                                  "tie_embeddings", "max_seq")}, "n_layers": n_layers})
    torch.manual_seed(0)
    with torch.device("cuda"):
        m = ref.Llama(cfg).to(torch.bfloat16).eval()
        shape = (TINY["batch"], cfg.n_kv_heads, cfg.max_seq, cfg.head_dim)
        caches = [(torch.randn(shape, dtype=torch.bfloat16), torch.randn(shape, dtype=torch.bfloat16))
                  for _ in range(cfg.n_layers)]
        idx = torch.randint(0, cfg.vocab, (TINY["batch"], 1))

    def step() -> object:
        with torch.inference_mode():
            return m(idx, caches, TINY["ctx"])
    return step


def probe_train(torch: Any, ref: Any, n_layers: int = TRAIN_LAYERS) -> Callable[[], tuple[float, float]]:
    """One amp_bf16 training step's forward + loss and backward (fp32 parameters, autocast bf16
    forward + cross-entropy, as runners/models.make_train_step) of TINY's decoder ``n_layers`` deep,
    batch 1, TINY["ctx"] tokens, as a call returning (host seconds of the forward with the loss,
    host seconds of ``loss.backward()``), the GPU queue drained before each, gradients dropped after.
    The forward records the autograd graph under autocast: it costs ~1.5x an inference-mode forward
    per kernel (LOG "The training forward"), which the decode probe does not see. Eager autograd
    runs a CUDA backward on its device thread, not the caller's: on a VM whose vCPUs switch speed
    each on its own, the backward's host speed is not the forward's (LOG "A probe of the steps'
    own window")."""
    cfg = ref.RefConfig(**{**{k: TINY[k] for k in ("vocab", "d_model", "n_heads", "n_kv_heads", "ffn",
                                                  "tie_embeddings", "max_seq")}, "n_layers": n_layers})
    torch.manual_seed(0)
    with torch.device("cuda"):
        m = ref.Llama(cfg)
        idx = torch.randint(0, cfg.vocab, (TINY["batch"], TINY["ctx"]))
        tgt = torch.randint(0, cfg.vocab, (TINY["batch"], TINY["ctx"]))

    def step() -> tuple[float, float]:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = ref.loss_fn(m(idx), tgt)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        loss.backward()
        dt = time.perf_counter() - t2
        m.zero_grad(set_to_none=True)
        return t1 - t0, dt
    return step


def _quantiles(prefix: str, series: list[float]) -> dict:
    s = sorted(series)
    return {f"{prefix}_s": median(series), f"{prefix}_p10_s": s[len(s) // 10],
            f"{prefix}_p90_s": s[(9 * len(s)) // 10], f"{prefix}_series_s": series}


def tiny_step_probe(torch: Any, seconds: float = SERIES_S, warmup_s: float = WARMUP_S) -> dict:
    """Eager decode steps of the tiny decoder (TINY, 2 layers) and of the same decoder
    DEEP_LAYERS deep, and the forward and backward of a TRAIN_LAYERS-deep training step
    (probe_train), interleaved round by round (bursts of 10 and 2 forwards, no sync inside a
    burst; one training step) for ``seconds`` after ``warmup_s`` of discarded rounds (a series
    opens slow: LOG "The probe's 3 s series"): host seconds per forward / backward, median, 10th /
    90th percentile and the series of each; wall seconds per synced tiny forward; and the host
    state over the window."""
    ref = _llama_ref()
    tiny, deep = probe_decoder(torch, ref, TINY["n_layers"]), probe_decoder(torch, ref, DEEP_LAYERS)
    calls: dict[str, tuple[Callable[[], Any], int]] = {"tiny": (tiny, 10), "deep": (deep, 2)}
    out: dict = {}
    try:
        train = probe_train(torch, ref)
        train()
        calls["train"] = (train, 0)
    except RuntimeError as e:   # e.g. no bf16 autocast on this GPU: the profile keeps the decode probes
        out["errors"] = {"deep_bwd_host_s": f"{type(e).__name__}: {e}"}
    for _ in range(3):
        for call, _n in calls.values():
            call()
    warm = interleaved_series(torch, calls, warmup_s)
    state = HostState()
    series = interleaved_series(torch, calls, seconds)
    host = state.read()
    wall = host_per_call_s(torch, lambda: (tiny(), torch.cuda.synchronize()), 5, 5)
    if "train" in series:
        out.update(_quantiles("train_fwd_host", [f for f, _b in series["train"]]))
        out.update(_quantiles("deep_bwd_host", [b for _f, b in series["train"]]))
    return {**_quantiles("tiny_step_host", series["tiny"]), **_quantiles("deep_step_host", series["deep"]), **out,
            "tiny_step_wall_s": wall, "warmup_tiny_step_host_series_s": warm["tiny"], "host_state": host}


def model_fields(n_layers: int) -> dict:
    """A probe decoder's dims as a profile records them (``tiny_model``, ``deep_model``, ``train_model``)."""
    return {**TINY, "n_layers": n_layers}


class HostSampler:
    """The probe read between a job's own steps: each ``read()`` is one DEEP_LAYERS-deep decoder
    forward and one probe training step's forward and backward (host seconds, the GPU queue
    drained first), so the reads see the host states the job's steps run in. ``profile(base)`` is
    ``base`` (a profile of this machine, run_probe's) with its deep forward, training forward and
    backward measurements taken from these reads and ``window`` saying so: a profile of the job's
    window, not of a moment before it."""

    def __init__(self, torch: Any) -> None:
        ref = _llama_ref()
        self.torch = torch
        self.fwd, self.train = probe_decoder(torch, ref, DEEP_LAYERS), probe_train(torch, ref)
        for _ in range(3):
            self.fwd(), self.train()
        self.deep: list[float] = []
        self.train_fwd: list[float] = []
        self.back: list[float] = []
        self.t: list[float] = []

    def read(self) -> tuple[float, float, float]:
        """One read: (deep decode forward host s, training forward host s, backward host s)."""
        self.torch.cuda.synchronize()
        t0 = time.perf_counter()
        self.fwd()
        self.deep.append(time.perf_counter() - t0)
        f, b = self.train()
        self.train_fwd.append(f)
        self.back.append(b)
        self.t.append(t0)
        return self.deep[-1], f, b

    def profile(self, base: dict) -> dict:
        if not self.deep:
            raise RuntimeError("HostSampler.profile: no reads yet; call read() between the job's steps")
        meas = {**base["measurements"], **_quantiles("deep_step_host", self.deep),
                **_quantiles("train_fwd_host", self.train_fwd), **_quantiles("deep_bwd_host", self.back)}
        return {**base, "measurements": meas, "deep_model": model_fields(DEEP_LAYERS),
                "train_model": model_fields(TRAIN_LAYERS),
                "window": {"reads": len(self.deep), "span_s": self.t[-1] - self.t[0],
                           "t_s": [t - self.t[0] for t in self.t],
                           "what": "deep forward, training forward and backward probe read between the job's own steps"}}


def graph_per_call_s(torch: Any, call: Callable[[], object], inner: int, reps: int) -> float:
    """GPU seconds per call, ``inner`` calls captured in one CUDA graph (no host launch gaps
    between them), median of ``reps`` timed replays after one untimed."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            call()
    g.replay()
    return gpu_per_call_s(torch, g.replay, 1, reps) / inner


def gemm_rate(torch: Any, n: int) -> float:
    """bf16 n x n x n matmul rate (FLOP/s): ~40 GFLOP of back-to-back products per graph replay."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    inner = max(2, int(4e10 // (2 * n**3)))
    return 2 * n**3 / graph_per_call_s(torch, lambda: torch.mm(a, b, out=c), inner, 7)


def gemm_probe(torch: Any) -> dict:
    return {f"gemm_{n}_bf16_flop_per_s": gemm_rate(torch, n) for n in GEMM_SIZES}


def copy_probe(torch: Any) -> dict:
    """Device-to-device copy of COPY_BYTES: bytes read + written per second."""
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    return {"hbm_copy_bytes_per_s": 2 * COPY_BYTES / gpu_per_call_s(torch, lambda: dst.copy_(src), 3, 7)}


def run_probe() -> dict:
    """Every probe on GPU 0 of this machine, as a profile dict (FORMAT)."""
    t0 = time.perf_counter()
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("the probe needs an NVIDIA GPU: torch.cuda.is_available() is False")
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    stages = {"start_s": time.perf_counter() - t0}   # import torch + CUDA context: most of a cold probe
    meas: dict = {}
    for probe in (launch_probe, tiny_step_probe, gemm_probe, copy_probe):
        t1 = time.perf_counter()
        meas.update(probe(torch))
        stages[probe.__name__.removesuffix("_probe") + "_s"] = time.perf_counter() - t1
    state, errors = meas.pop("host_state"), meas.pop("errors", None)
    out = {"format": FORMAT, "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "host": {**host_info(), "state": state}, "software": software_info(torch), "gpu": gpu_info(torch),
           "tiny_model": dict(TINY), "deep_model": model_fields(DEEP_LAYERS), "measurements": meas}
    if "deep_bwd_host_s" in meas:
        out["train_model"] = model_fields(TRAIN_LAYERS)
    if errors:
        out["errors"] = errors
    return {**out, "probe_s": time.perf_counter() - t0, "probe_stages_s": stages}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Probe this machine's host and GPU for mechsim (torch only).")
    ap.add_argument("--out", default=None, help=f"profile path (default {default_profile_path()})")
    args = ap.parse_args(argv)
    try:
        prof = run_probe()
    except (RuntimeError, FileNotFoundError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    path = Path(args.out) if args.out else default_profile_path()
    write_json_atomic(path, prof)
    m = prof["measurements"]
    print(f"wrote {path}: {prof['host']['cpu_model']}, eager launch {m['launch_eager_host_s'] * 1e6:.2f} us, "
          f"tiny eager step {m['tiny_step_host_s'] * 1e6:.0f} us, {DEEP_LAYERS}-layer {m['deep_step_host_s'] * 1e6:.0f} us, "
          + (f"{TRAIN_LAYERS}-layer training forward {m['train_fwd_host_s'] * 1e6:.0f} us, backward "
             f"{m['deep_bwd_host_s'] * 1e6:.0f} us, " if "deep_bwd_host_s" in m else "") +
          f"probe {prof['probe_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
