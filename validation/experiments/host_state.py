"""What sets an eager step's host time on a lent GPU VM: host state over time, per CPU, per op class.

torch + standard library only; ~15 s on an H200 after start-up. Writes one JSON (--out):

- ``state_series``: 4 s of bursts of 10 eager forwards of the probe's tiny decoder, each with
  its wall time, this thread's CPU time and run-queue delay (/proc/thread-self/schedstat), the CPU
  it ran on (/proc/thread-self/stat field 39) and the machine's steal jiffies (/proc/stat): is a
  slow spell the vCPU being descheduled (steal, run delay) or a slower CPU (CPU time = wall)?
- ``pinned``: the same series 0.6 s on each of a few CPUs with the thread pinned there.
- ``op_classes``: host seconds per call of single aten ops (a view, in-place and out-of-place
  elementwise, F.linear at a non-split and at split-K shapes, SDPA decode at the probe's and at
  0.5B / 8B shapes) and of the probe decoder at 2, 8 and 24 layers, interleaved round by round
  for 4 s (every class sees the same host states); and the kernels one call launches
  (torch.profiler): the host price of a second kernel inside one aten op (split-K reduce,
  split-KV combine) against that of an op.
- ``train_modes``: where a training step's host time goes, for the probe's 8-layer training
  decoder (ctx 16) and the 0.5B shape (seq 256): the forward in inference mode (bf16 weights, as
  a decode step), under no_grad + autocast, with autograd recording (bf16 weights, no autocast),
  with autograd recording under autocast (fp32 weights: the training forward), the same with the
  loss, the backward, and the fused AdamW step, interleaved round by round for 3 s, each with its
  kernels per call (torch.profiler): the host price per kernel of recording the autograd graph,
  of autocast, of the optimizer step (LOG "The training forward").

    python3 validation/experiments/host_state.py --out host_state.json
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


PR = _load("_mechsim_probe_runner", ROOT / "mechsim" / "probe_runner.py")


def _cpu_now() -> int | None:
    text = PR._read("/proc/thread-self/stat")
    try:
        return int(text.rsplit(")", 1)[1].split()[36]) if text else None
    except (IndexError, ValueError):
        return None


def state_series(step, seconds: float) -> list[dict]:
    out, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        torch.cuda.synchronize()
        st, dl, cpu0 = PR._proc_stat_cpu(), PR._run_delay_ns(), time.thread_time()
        t0 = time.perf_counter()
        for _ in range(10):
            step()
        wall = time.perf_counter() - t0
        st1, dl1 = PR._proc_stat_cpu(), PR._run_delay_ns()
        out.append({"t": t0, "per_call_s": wall / 10, "cpu_fraction": (time.thread_time() - cpu0) / wall,
                    "run_delay_s": (dl1 - dl) * 1e-9 if dl is not None and dl1 is not None else None,
                    "steal_jiffies": st1[7] - st[7] if st and st1 else None, "cpu": _cpu_now()})
    torch.cuda.synchronize()
    return out


def pinned(step, cpus: list[int], seconds: float) -> dict:
    old = os.sched_getaffinity(0)
    out = {}
    try:
        for c in cpus:
            os.sched_setaffinity(0, {c})
            s = PR.interleaved_series(torch, {"tiny": (step, 10)}, seconds)["tiny"]
            out[str(c)] = {"median_s": PR.median(s), "series_s": s}
    finally:
        os.sched_setaffinity(0, old)
    return out


def op_calls() -> dict:
    """name -> (call, burst size) of single aten ops on the GPU (bf16)."""
    d = "cuda"
    b = torch.bfloat16
    x1, a896 = torch.zeros(1, device=d), torch.randn(1, 896, device=d, dtype=b)
    w896 = torch.randn(896, 896, device=d, dtype=b)
    x3072, w3072 = torch.randn(1, 3072, device=d, dtype=b), torch.randn(3072, 3072, device=d, dtype=b)
    x4096, w4096 = torch.randn(1, 4096, device=d, dtype=b), torch.randn(4096, 4096, device=d, dtype=b)
    x64 = torch.randn(64, 4096, device=d, dtype=b)

    def sdpa(bsz, hq, hkv, ctx, hd):
        q = torch.randn(bsz, hq, 1, hd, device=d, dtype=b)
        k = torch.randn(bsz, hkv, ctx, hd, device=d, dtype=b)
        v = torch.randn(bsz, hkv, ctx, hd, device=d, dtype=b)
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=False, enable_gqa=hkv != hq)

    return {
        "view": (lambda: a896.view(-1), 200),
        "add_inplace_1elem": (lambda: x1.add_(1.0), 100),
        "mul_outofplace_896": (lambda: a896 * a896, 100),
        "linear_1x896x896": (lambda: F.linear(a896, w896), 50),
        "linear_1x3072x3072": (lambda: F.linear(x3072, w3072), 50),
        "linear_1x4096x4096": (lambda: F.linear(x4096, w4096), 50),
        "linear_64x4096x4096": (lambda: F.linear(x64, w4096), 50),
        "sdpa_tiny_b1": (sdpa(1, 4, 2, 17, 16), 50),
        "sdpa_0p5b_b1_ctx2048": (sdpa(1, 14, 2, 2049, 64), 50),
        "sdpa_8b_b1_ctx2048": (sdpa(1, 32, 8, 2049, 128), 50),
        "sdpa_8b_b64_ctx2048": (sdpa(64, 32, 8, 2049, 128), 20),
    }


def kernels_per_call(calls: dict) -> dict:
    """CUDA kernels one call launches (torch.profiler, one call after warm-up), with their names."""
    from torch.profiler import ProfilerActivity, profile
    out = {}
    for name, (call, _n) in calls.items():
        call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        out[name] = {"kernels": len(names), "names": names[:8]}
    return out


def train_modes(ref, name: str, dims: dict, seq: int) -> dict:
    """name/mode -> (call, burst size) of one model's training-step parts (module docstring)."""
    cfg = ref.RefConfig(**dims, max_seq=max(seq, 64))
    torch.manual_seed(0)
    with torch.device("cuda"):
        m32 = ref.Llama(cfg)
        m16 = ref.Llama(cfg).to(torch.bfloat16)
        idx = torch.randint(0, cfg.vocab, (1, seq))
        tgt = torch.randint(0, cfg.vocab, (1, seq))
    amp = lambda: torch.autocast("cuda", dtype=torch.bfloat16)  # noqa: E731

    def inf_bf16():
        with torch.inference_mode():
            m16(idx)

    def nograd_amp():
        with torch.no_grad(), amp():
            m32(idx)

    def grad_bf16():
        m16(idx)

    def grad_amp():
        with amp():
            m32(idx)

    def grad_amp_loss():
        with amp():
            ref.loss_fn(m32(idx), tgt)

    def backward() -> float:   # times itself: the forward before it is not the backward's
        with amp():
            loss = ref.loss_fn(m32(idx), tgt)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss.backward()
        return time.perf_counter() - t0

    grad_bf16()   # the models' cached RoPE tables made outside inference mode, so autograd may save them
    opt = torch.optim.AdamW(m32.parameters(), lr=1e-6, fused=True)
    backward()   # leaves the gradients the optimizer step reads

    calls = {"fwd_inference_bf16": inf_bf16, "fwd_nograd_autocast": nograd_amp, "fwd_grad_bf16": grad_bf16,
             "fwd_grad_autocast": grad_amp, "fwd_grad_autocast_loss": grad_amp_loss, "optimizer_step": opt.step}
    out = {f"{name}/{k}": (v, 1) for k, v in calls.items()}
    out[f"{name}/backward"] = (backward, 0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    ref = PR._llama_ref()
    dec = {n: PR.probe_decoder(torch, ref, n) for n in (2, 8, 24)}
    for f in dec.values():
        for _ in range(3):
            f()
    ops = op_calls()
    calls = {**{f"decoder_{n}l": (f, {2: 10, 8: 3, 24: 1}[n]) for n, f in dec.items()}, **ops}
    for call, _n in calls.values():
        call()
    torch.cuda.synchronize()
    out = {"host": PR.host_info(), "software": PR.software_info(torch), "gpu": PR.gpu_info(torch)}
    out["state_series"] = state_series(dec[2], 2.0)
    cpus = sorted(os.sched_getaffinity(0))
    out["pinned"] = pinned(dec[2], [cpus[i] for i in sorted({0, len(cpus) // 4, len(cpus) // 2,
                                                            (3 * len(cpus)) // 4, len(cpus) - 1})], 0.6)
    st = PR.HostState()
    series = PR.interleaved_series(torch, calls, 3.0)
    out["op_classes"] = {k: {"median_s": PR.median(v), "n": len(v), "series_s": v} for k, v in series.items()}
    out["op_classes_state"] = st.read()
    try:
        out["kernels_per_call"] = kernels_per_call({**ops, "decoder_2l": (dec[2], 1)})
    except Exception as e:  # noqa: BLE001 - the timings above are kept
        out["kernels_per_call"] = {"error": f"{type(e).__name__}: {e}"}
    try:
        tm = {**train_modes(ref, "probe8", {k: PR.TINY[k] for k in ("vocab", "d_model", "n_heads", "n_kv_heads", "ffn",
                                                                     "tie_embeddings")} | {"n_layers": PR.TRAIN_LAYERS},
                            PR.TINY["ctx"]),
              **train_modes(ref, "0p5b", {"vocab": 151936, "d_model": 896, "n_layers": 24, "n_heads": 14, "n_kv_heads": 2,
                                          "ffn": 4864, "tie_embeddings": True}, 256)}   # runners/models.SHAPES["0p5b"]
        for call, _n in tm.values():
            call()
        st = PR.HostState()
        ts = PR.interleaved_series(torch, tm, 3.0)
        out["train_modes"] = {k: {"median_s": PR.median(v), "n": len(v), "series_s": v} for k, v in ts.items()}
        out["train_modes_state"] = st.read()
        kern = kernels_per_call({k: v for k, v in tm.items() if v[1]})
        for k, v in kern.items():
            out["train_modes"][k]["kernels"] = v["kernels"]
        del tm
    except Exception as e:  # noqa: BLE001 - the timings above are kept
        out["train_modes"] = {"error": f"{type(e).__name__}: {e}"}
    out["wall_s"] = time.perf_counter() - t0
    PR.write_json_atomic(Path(args.out), out)
    med = {k: f"{v['median_s'] * 1e6:.1f}" for k, v in out["op_classes"].items()}
    tmed = {k: f"{v['median_s'] * 1e6:.0f} us/{v.get('kernels', '?')} kernels" for k, v in out["train_modes"].items()
            if isinstance(v, dict)}
    print(f"wrote {args.out} in {out['wall_s']:.1f} s; host us per call: {med}; training parts: {tmed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
