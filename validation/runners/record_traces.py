"""Record small torch.profiler traces of llama_ref workloads (torch + standard library only).

The traces are test fixtures for ``mechsim trace import`` (validation/trace): a user's own
job profiled the way a performance engineer would (torch.profiler, Chrome-trace JSON,
record_shapes=True, record_function ranges, ProfilerStep# ranges from ``prof.step()``).

    python3 validation/runners/record_traces.py --out DIR

Writes, per workload, ``<name>.pt.trace.json.gz`` (gzip, a few MB at most) and one
``traces_<utc>.json`` record with the environment and each workload's parameters (so the
matching mechsim workload can be stated: model shapes, mbs, seq, stack). Workloads are the
configurations of validation/data's train_step / decode records:
  train_125m_eager    train_step/125m/eager/mbs8_seq1024
  train_125m_compile  train_step/125m/compile/mbs8_seq1024 (inductor)
  decode_1b_graph     decode/1b/graph/b64_ctx512 (one decode step captured in a CUDA graph)
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

from llama_ref import loss_fn  # this folder is on sys.path: the script is run by its path
from models import build_model, model_params, ref_config, train_setup

ACTIVE_STEPS = 3


def _profile(step: Callable[[], None], name: str, out: Path, warmup: int = 3) -> dict:
    """Warm up, then profile ``ACTIVE_STEPS`` steps (one profiler warm-up step first)."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    sched = torch.profiler.schedule(wait=0, warmup=1, active=ACTIVE_STEPS, repeat=1)
    tmp = Path(tempfile.mkdtemp()) / f"{name}.json"
    with torch.profiler.profile(activities=acts, schedule=sched, record_shapes=True,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(tmp))) as prof:
        for _ in range(1 + ACTIVE_STEPS):
            step()
            torch.cuda.synchronize()
            prof.step()
    return _gzip(tmp, out / f"{name}.pt.trace.json.gz")


def _gzip(src: Path, dst: Path) -> dict:
    raw = src.read_bytes()
    tmp = dst.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(gzip.compress(raw, 9))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, dst)
    return {"file": dst.name, "json_bytes": len(raw), "gz_bytes": dst.stat().st_size}


def train_step_fn(model: torch.nn.Module, opt: torch.optim.Optimizer, idx: torch.Tensor,
                  tgt: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        with torch.profiler.record_function("forward"):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(model(idx), tgt)
        with torch.profiler.record_function("backward"):
            loss.backward()
        with torch.profiler.record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
    return step


def record_train(name: str, shape: str, mbs: int, seq: int, compile_: bool, out: Path) -> dict:
    cfg, model, fwd, opt, impl, idx, tgt = train_setup(shape, mbs, seq, compile_)
    t0 = time.perf_counter()
    info = _profile(train_step_fn(fwd, opt, idx, tgt), name, out)
    params = {**model_params(shape, cfg), "mbs": mbs, "seq": seq, "mode": "train", "precision": "amp_bf16",
              "optimizer": impl, "stack": "compile" if compile_ else "eager"}
    del fwd, model, opt
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    return {**info, "params": params, "wall_s": time.perf_counter() - t0}


def record_decode(name: str, shape: str, b: int, ctx: int, smax: int, out: Path) -> dict:
    cfg = ref_config(shape, 8320)
    model = build_model(cfg, "cuda", torch.bfloat16).eval()
    kv = (b, cfg.n_kv_heads, smax, cfg.head_dim)
    caches = [(torch.randn(kv, dtype=torch.bfloat16, device="cuda"),
               torch.randn(kv, dtype=torch.bfloat16, device="cuda")) for _ in range(cfg.n_layers)]
    t0 = time.perf_counter()
    with torch.inference_mode():
        idx = torch.randint(0, cfg.vocab, (b, 1), device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model(idx, caches, ctx)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model(idx, caches, ctx)

        def step() -> None:
            with torch.profiler.record_function("decode"):
                graph.replay()
        info = _profile(step, name, out)
    params = {**model_params(shape, cfg), "batch": b, "context": ctx, "mode": "decode", "dtype": "bf16",
              "stack": "graph"}
    del caches, model
    torch.cuda.empty_cache()
    return {**info, "params": params, "wall_s": time.perf_counter() - t0}


def environment() -> dict:
    p = torch.cuda.get_device_properties(0)
    return {"gpu_name": p.name, "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "git_commit": os.environ.get("MECHSIM_GIT_COMMIT", ""), "command": " ".join(sys.argv)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated workload names")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = {"train_125m_eager": lambda: record_train("train_125m_eager", "125m", 8, 1024, False, out),
            "decode_1b_graph": lambda: record_decode("decode_1b_graph", "1b", 64, 512, 8193, out),
            "train_125m_compile": lambda: record_train("train_125m_compile", "125m", 8, 1024, True, out)}
    keep = set(a.only.split(",")) if a.only else set(jobs)
    rec = {"environment": environment(), "traces": {}}
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for name, job in jobs.items():
        if name in keep:
            rec["traces"][name] = job()
            print(name, rec["traces"][name], flush=True)
            (out / f"traces_{stamp}.json").write_text(json.dumps(rec, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
