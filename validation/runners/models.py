"""llama_ref model shapes, builders, the training step, and a profiler kernel summary.

Shared by cases_e2e (single-GPU train steps), cases_inference (prefill/decode) and
cases_dist (DDP/FSDP). The training step is llama_ref's "amp_bf16" precision: fp32
params, forward under torch.autocast(bf16), loss_fn, backward, AdamW(fused=True) step,
zero_grad(set_to_none=True).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

import math
import time

import torch

from llama_ref import Llama, RefConfig, init_weights, loss_fn, param_count

SHAPES = {
    # ~125M: launch overhead dominates its step
    "125m": dict(vocab=32000, d_model=768, n_layers=12, n_heads=12, n_kv_heads=12, ffn=2048),
    # Llama-3.2-1B / 3B (tied embeddings, like the released models)
    "1b": dict(vocab=128256, d_model=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn=8192, tie_embeddings=True),
    "3b": dict(vocab=128256, d_model=3072, n_layers=28, n_heads=24, n_kv_heads=8, ffn=8192, tie_embeddings=True),
    # Qwen2.5-0.5B / 1.5B layer shapes as Llama-style decoders (no QKV bias; tied embeddings as released)
    "0p5b": dict(vocab=151936, d_model=896, n_layers=24, n_heads=14, n_kv_heads=2, ffn=4864, tie_embeddings=True),
    "1p5b": dict(vocab=151936, d_model=1536, n_layers=28, n_heads=12, n_kv_heads=2, ffn=8960, tie_embeddings=True),
    # Llama-3-8B layers, untied; fewer layers to fit a single-GPU training step
    "8b": dict(vocab=128256, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn=14336),
    "8b_l4": dict(vocab=128256, d_model=4096, n_layers=4, n_heads=32, n_kv_heads=8, ffn=14336),
    "8b_l8": dict(vocab=128256, d_model=4096, n_layers=8, n_heads=32, n_kv_heads=8, ffn=14336),
    # CPU smoke
    "tiny": dict(vocab=512, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn=128),
}
LLAMA3_ROPE_THETA = 500000.0


def ref_config(name: str, max_seq: int) -> RefConfig:
    return RefConfig(max_seq=max(max_seq, 64), rope_theta=LLAMA3_ROPE_THETA, **SHAPES[name])


def model_params(name: str, cfg: RefConfig) -> dict:
    return {"model": name, **SHAPES[name], "tie_embeddings": cfg.tie_embeddings,
            "n_params": param_count(cfg), "head_dim": cfg.head_dim}


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def build_model(cfg: RefConfig, device: str, dtype: torch.dtype = torch.float32, seed: int = 0) -> Llama:
    """Construct directly on the device in `dtype` (no fp32 CPU copy of an 8B model), random init."""
    with _default_dtype(dtype), torch.device(device):
        model = Llama(cfg)
    init_weights(model, seed)
    return model


def make_optimizer(model: torch.nn.Module) -> tuple[torch.optim.Optimizer, str]:
    """AdamW(fused=True); falls back to foreach where fused is refused (e.g. some DTensor setups)."""
    try:
        return torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True), "fused"
    except (RuntimeError, ValueError, TypeError):
        return torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True), "foreach"


def batch(cfg: RefConfig, mbs: int, seq: int, device: str, seed: int = 1):
    g = torch.Generator(device="cpu").manual_seed(seed)
    idx = torch.randint(0, cfg.vocab, (mbs, seq), generator=g).to(device)
    tgt = torch.randint(0, cfg.vocab, (mbs, seq), generator=g).to(device)
    return idx, tgt


def train_setup(name: str, mbs: int, seq: int, compile_: bool, device: str = "cuda"):
    """The reference model of shape ``name`` with its optimizer and one seeded batch, for a training
    step: (cfg, model, fwd, opt, optimizer implementation, idx, tgt). ``fwd`` is what a step calls:
    the model, or with ``compile_`` the model through torch.compile (inductor; dynamo reset first,
    the RoPE tables built before tracing)."""
    cfg = ref_config(name, seq)
    model = build_model(cfg, device)
    opt, impl = make_optimizer(model)
    idx, tgt = batch(cfg, mbs, seq, device)
    fwd = model
    if compile_:
        torch._dynamo.reset()
        model._rope(device, torch.float32)
        fwd = torch.compile(model, backend="inductor")
    return cfg, model, fwd, opt, impl, idx, tgt


def make_train_step(model, opt, idx, tgt, device_type: str, grad_accum: int = 1):
    """One full step: ``grad_accum`` x (autocast forward + loss, backward), optimizer step,
    zero_grad. A DDP model skips the gradient sync (no_sync) on all but the last micro-batch."""
    def step(_r: int = 0):
        for i in range(grad_accum):
            last = i == grad_accum - 1
            sync = contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()
            with sync:
                with torch.autocast(device_type, dtype=torch.bfloat16):
                    loss = loss_fn(model(idx), tgt)
                loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def host_phase_times(model, opt, idx, tgt, device_type: str, reps: int = 3) -> dict:
    """Host (CPU) time to issue each phase of a training step, no sync inside the step:
    forward+loss, backward, optimizer step, zero_grad; plus the step's wall time to GPU
    completion. Medians over ``reps`` steps. If the GPU falls behind far enough to fill
    the launch queue, the host blocks and these include that wait."""
    rows = []
    for _ in range(reps):
        torch.cuda.synchronize() if device_type == "cuda" else None
        t = [time.perf_counter()]
        with torch.autocast(device_type, dtype=torch.bfloat16):
            loss = loss_fn(model(idx), tgt)
        t.append(time.perf_counter())
        loss.backward()
        t.append(time.perf_counter())
        opt.step()
        t.append(time.perf_counter())
        opt.zero_grad(set_to_none=True)
        t.append(time.perf_counter())
        torch.cuda.synchronize() if device_type == "cuda" else None
        t.append(time.perf_counter())
        rows.append([t[i + 1] - t[i] for i in range(4)] + [t[5] - t[0]])
    med = [sorted(col)[len(col) // 2] for col in zip(*rows)]
    return dict(zip(("forward_s", "backward_s", "optimizer_s", "zero_grad_s", "wall_s"), med))


def n_params_actual(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() de-duplicates tied weights


# ---- profiler kernel summary ------------------------------------------------------------

_LAUNCH_APIS = ("LaunchKernel", "cudaGraphLaunch", "cuLaunch")


def _is_device_event(e) -> bool:
    return getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA


def sustained_lead_calls(step_s: float, window_s: float = 1.0) -> int:
    """Calls of a step of ``step_s`` that keep the GPU busy ~``window_s`` before a profiled one
    (kernel_summary's lead_calls): 2 to 50."""
    return max(2, min(50, math.ceil(window_s / max(step_s, 1e-6))))


def kernel_summary(fn, device: str, top: int = 40, name_chars: int = 160, lead_calls: int = 0) -> dict:
    """Profile one call of fn: device kernels by total time (name, count, total_us), the
    number of kernels / memcpys / memsets and of host launch API calls. On CPU: top ops.

    ``lead_calls``: that many calls of fn run back to back inside the profiler before the
    recorded one (torch.profiler.schedule: the first half untraced, the second half traced and
    discarded, so the tracer's own start-up pause lies half the lead before the recorded call),
    so the recorded call starts on a busy GPU near the clock of the timed loop, not one call after
    the profiler's start-up pause (a boosted, idle-cooled board); recorded as ``profile_lead_calls``."""
    cuda = device.startswith("cuda")
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    if lead_calls > 0:
        warm = max(1, lead_calls // 2)
        sched = torch.profiler.schedule(wait=lead_calls - warm, warmup=warm, active=1, repeat=1)
        with torch.profiler.profile(activities=acts, schedule=sched) as prof:
            for i in range(lead_calls + 1):
                fn(i)
                prof.step()
            if cuda:
                torch.cuda.synchronize()
    else:
        with torch.profiler.profile(activities=acts) as prof:
            fn(0)
            if cuda:
                torch.cuda.synchronize()
    events = list(prof.events())
    if not cuda:
        return _cpu_summary(prof, top)
    dev = [e for e in events if _is_device_event(e)]
    counts = {"kernel": 0, "memcpy": 0, "memset": 0}
    for e in dev:
        counts["memcpy" if e.name.startswith("Memcpy") else "memset" if e.name.startswith("Memset") else "kernel"] += 1
    span = (max(e.time_range.end for e in dev) - min(e.time_range.start for e in dev)) if dev else 0.0
    rows = device_kernels(dev, name_chars)
    return {"kernels": [{"name": n, "count": int(c), "total_us": round(t, 2)} for n, c, t in rows[:top]],
            "kernel_launches": counts["kernel"], "memcpy_count": counts["memcpy"], "memset_count": counts["memset"],
            "device_busy_us": round(sum(t for _, _, t in rows), 1), "distinct_kernels": len(rows),
            "device_span_us": round(span, 1),   # first device event's start to the last one's end (profiled call)
            "launch_api_calls": sum(1 for e in events if any(k in e.name for k in _LAUNCH_APIS)),
            "profile_lead_calls": lead_calls}


def device_kernels(device_events, name_chars: int = 160) -> list[tuple[str, int, float]]:
    """(name cut to name_chars, count, total us) of profiler device events, the longest total first."""
    agg: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in device_events:
        a = agg[e.name[:name_chars]]
        a[0] += 1
        a[1] += e.time_range.elapsed_us()
    return sorted(((n, int(c), t) for n, (c, t) in agg.items()), key=lambda r: -r[2])


def _cpu_summary(prof, top: int) -> dict:
    rows = sorted(prof.key_averages(), key=lambda r: -r.self_cpu_time_total)[:top]
    return {"kernels": [{"name": r.key, "count": int(r.count), "total_us": round(r.self_cpu_time_total, 2)}
                        for r in rows], "kernel_launches": None, "note": "cpu: top ops by self cpu time"}
