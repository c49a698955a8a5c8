"""What is live at the peak of a steady-state llama_ref train step (torch + stdlib only).

Not part of the suite: a one-off probe for mechsim's peak-memory model. In a FRESH
process (nothing else allocated), for each case built exactly as cases_e2e.run_train:
3 warm-up steps, then
  - "step_peak": max_memory_allocated over one plain step after reset_peak_memory_stats
    (what cases_e2e records), minus the bytes allocated before the model was built;
  - "phases": the same step split into forward+loss / backward / optimizer step /
    zero_grad, allocated bytes after each phase and the peak inside each;
  - "at_peak": one step under torch.cuda.memory._record_memory_history: the trace is
    replayed from the allocated bytes at the step's start; the allocations made during the
    step that are live at its peak, grouped by (size, python frame) and largest first.
Then "cublas_workspace": allocated-bytes growth from a GEMM on the default stream of the
main thread, on a new thread, and on 40 torch.cuda.Stream() streams one after another
(torch keeps one cuBLAS workspace per (handle, stream) pair in the caching allocator and
never frees it; the stream pool has 32 streams per priority).

Usage: python validation/runners/memory_probe.py OUT.json
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import defaultdict

import torch

from llama_ref import loss_fn
from models import make_train_step, n_params_actual, train_setup

CASES = [("125m", 1, 512, False), ("125m", 8, 1024, False), ("1b", 1, 2048, False),
         ("8b_l8", 1, 4096, False), ("125m", 8, 1024, True)]


def _alloc() -> int:
    return torch.cuda.memory_allocated()


def _phases(model, opt, idx, tgt) -> dict:
    out = {}
    torch.cuda.synchronize()
    out["start"] = _alloc()
    torch.cuda.reset_peak_memory_stats()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(idx), tgt)
    torch.cuda.synchronize()
    out["after_fwd_loss"], out["peak_fwd_loss"] = _alloc(), torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss.backward()
    torch.cuda.synchronize()
    out["after_bwd"], out["peak_bwd"] = _alloc(), torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    opt.step()
    torch.cuda.synchronize()
    out["after_opt"], out["peak_opt"] = _alloc(), torch.cuda.max_memory_allocated()
    opt.zero_grad(set_to_none=True)
    del loss
    torch.cuda.synchronize()
    out["after_zero_grad"] = _alloc()
    return out


def _frame(frames: list) -> str:
    keep = [f for f in frames if any(k in f.get("filename", "") for k in
                                     ("llama_ref", "models.py", "memory_probe", "torch/optim", "torchinductor",
                                      "torch/nn/functional", "torch/_tensor", "torch/autograd"))]
    f = (keep or frames or [{}])[0]
    return f"{f.get('filename', '?').split('/')[-1]}:{f.get('line', '?')}:{f.get('name', '?')}" if f else "?"


def _at_peak(step, start_bytes: int) -> dict:
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=400000, context="alloc", stacks="python")
    step(0)
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = [e for tr in snap.get("device_traces", []) for e in tr]
    cur, peak, peak_i = start_bytes, start_bytes, -1
    live: dict = {}
    for i, e in enumerate(trace):
        a = e["action"]
        if a == "alloc":
            cur += e["size"]
            live[e["addr"]] = (i, e)
        elif a == "free_requested":
            cur -= e["size"]
            live.pop(e["addr"], None)
        if cur > peak:
            peak, peak_i = cur, i
    # replay to the peak again to get the live set there
    live = {}
    for e in trace[:peak_i + 1]:
        if e["action"] == "alloc":
            live[e["addr"]] = e
        elif e["action"] == "free_requested":
            live.pop(e["addr"], None)
    groups: dict = defaultdict(lambda: [0, 0])
    for e in live.values():
        g = groups[(e["size"], _frame(e.get("frames", [])))]
        g[0] += 1
        g[1] += e["size"]
    rows = sorted(({"size": k[0], "frame": k[1], "count": v[0], "bytes": v[1]} for k, v in groups.items()),
                  key=lambda r: -r["bytes"])
    by_frame: dict = defaultdict(int)
    for r in rows:
        by_frame[r["frame"]] += r["bytes"]
    last = trace[peak_i] if peak_i >= 0 else {}
    return {"trace_events": len(trace), "peak_index": peak_i, "replayed_peak": peak,
            "peak_event": {"action": last.get("action"), "size": last.get("size"), "frame": _frame(last.get("frames", []))},
            "live_step_bytes": sum(e["size"] for e in live.values()), "live_step_count": len(live),
            "top_groups": rows[:60], "by_frame": sorted(by_frame.items(), key=lambda kv: -kv[1])[:40]}


def run_case(name: str, mbs: int, seq: int, compile_: bool) -> dict:
    torch.cuda.synchronize()
    base = _alloc()
    _, model, fwd, opt, impl, idx, tgt = train_setup(name, mbs, seq, compile_)
    step = make_train_step(fwd, opt, idx, tgt, "cuda")
    t0 = time.perf_counter()
    for i in range(3):
        step(i)
    torch.cuda.synchronize()
    rec = {"case": f"{name}/{'compile' if compile_ else 'eager'}/mbs{mbs}_seq{seq}", "optimizer": impl,
           "n_params": n_params_actual(model), "base_before_build": base, "warmup_s": time.perf_counter() - t0}
    rec["steady_start"] = _alloc()
    torch.cuda.reset_peak_memory_stats()
    step(0)
    torch.cuda.synchronize()
    rec["step_peak"] = torch.cuda.max_memory_allocated()
    rec["step_peak_reserved"] = torch.cuda.max_memory_reserved()
    if not compile_:
        rec["phases"] = _phases(model, opt, idx, tgt)
    try:
        rec["at_peak"] = _at_peak(step, _alloc())
    except Exception as e:  # noqa: BLE001
        rec["at_peak_error"] = repr(e)[:500]
    del step, fwd, model, opt, idx, tgt
    if compile_:
        torch._dynamo.reset()
    import gc
    gc.collect()
    torch.cuda.synchronize()
    rec["after_delete"] = _alloc()
    torch.cuda.empty_cache()
    rec["after_empty_cache"] = _alloc()
    return rec


def cublas_workspace() -> dict:
    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    out: dict = {"start": _alloc()}
    c = a @ a
    torch.cuda.synchronize()
    out["after_default_stream_mm"] = _alloc() - c.numel() * 2
    del c
    res = {}

    def worker():
        d = a @ a
        torch.cuda.synchronize()
        res["v"] = _alloc()
        del d
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    out["after_new_thread_mm_minus_output"] = res["v"] - a.numel() * 2
    steps = []
    keep = []
    for _i in range(40):
        s = torch.cuda.Stream()
        keep.append(s)
        with torch.cuda.stream(s):
            d = a @ a
        torch.cuda.synchronize()
        del d
        torch.cuda.synchronize()
        steps.append(_alloc())
    out["after_each_new_stream"] = steps
    torch.cuda.empty_cache()
    out["after_empty_cache"] = _alloc()
    return out


def main(path: str) -> None:
    torch.cuda.init()
    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(),
           "cases": []}
    for c in CASES:
        t0 = time.perf_counter()
        try:
            r = run_case(*c)
        except Exception as e:  # noqa: BLE001
            r = {"case": str(c), "error": repr(e)[:500]}
        r["wall_s"] = time.perf_counter() - t0
        out["cases"].append(r)
        print(r["case"], {k: r.get(k) for k in ("base_before_build", "steady_start", "step_peak", "wall_s")},
              r.get("phases"), flush=True)
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
    try:
        out["cublas_workspace"] = cublas_workspace()
    except Exception as e:  # noqa: BLE001
        out["cublas_workspace_error"] = repr(e)[:500]
    print(out.get("cublas_workspace"), flush=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
