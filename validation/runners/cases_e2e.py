"""End-to-end training steps of llama_ref models (kind "train_step").

Step = autocast(bf16) forward + loss_fn + backward + AdamW(fused=True).step() +
zero_grad(set_to_none=True), fp32 params. Events around each whole step; 3 warm-up
steps (the first includes torch.compile for compiled cases: extra.compile_s), then 5
timed; peak memory after reset_peak_memory_stats (steady state). A few configs add a
profiled step: extra.kernels (top 40 by device time) and extra.kernel_launches.

Estimated durations on an H200 (model build ~1-3 s, step time x 8-9, profiling ~3 s,
compile ~40-80 s cold for 1B, ~25-40 s for 125M):
  quick: 125m eager (profiled) + 1b eager = 2 cases, ~15 s
  full: 10 eager (3 profiled) + 2 compiled (both profiled) = 12 cases,
        eager ~70 s + compiled ~150 s worst case = ~220 s
"""

from __future__ import annotations

import time

import torch

from common import Case, Ctx, Group, clean_baseline, free_memory, result
from models import (batch, build_model, host_phase_times, kernel_summary, make_optimizer, make_train_step,
                    model_params, n_params_actual, ref_config)
from timing import add_host_probe, host_probe_s, measure_steps

PEAK_BF16 = 7e14  # for the rough duration estimate only


def run_train(ctx: Ctx, p: dict) -> dict:
    baseline = clean_baseline()
    cfg = ref_config(p["model"], p["seq"])
    model = build_model(cfg, ctx.device)
    opt, opt_impl = make_optimizer(model)
    idx, tgt = batch(cfg, p["mbs"], p["seq"], ctx.device)
    extra: dict = {"optimizer": opt_impl, "n_params_actual": n_params_actual(model),
                   "baseline_allocated_bytes": baseline}
    fwd_model = model
    if p["compile"]:
        torch._dynamo.reset()
        model._rope(ctx.device, torch.float32)  # build the rope cache eagerly: no module mutation in the trace
        fwd_model = torch.compile(model, backend=p["compile_backend"])
    step = make_train_step(fwd_model, opt, idx, tgt, ctx.device_type)
    t0 = time.perf_counter()
    before = host_probe_s(ctx.device)
    timing, ext = measure_steps(step, ctx.device, warmup=3, reps=p["reps"])
    extra.update(ext)
    add_host_probe(extra, before, host_probe_s(ctx.device))
    extra["wall_s_incl_warmup"] = time.perf_counter() - t0
    if p["compile"]:
        extra["compile_s"] = max(0.0, ext["first_step_s"] - timing["median_s"])
    if p["profile"]:
        extra.update(kernel_summary(step, ctx.device))
    if not p["compile"]:
        extra["host_phase_s"] = host_phase_times(fwd_model, opt, idx, tgt, ctx.device_type)
    extra["tokens_per_s"] = p["mbs"] * p["seq"] / timing["median_s"]
    del step, fwd_model, model, opt
    if p["compile"]:
        torch._dynamo.reset()
    free_memory()
    return result(timing, extra)


def _est(p: dict) -> float:
    tokens = p["mbs"] * p["seq"]
    step = max(8 * p["n_params"] * tokens / (0.45 * PEAK_BF16), 0.02)
    est = 2.0 + 9 * step + (3.0 if p["profile"] else 0.0)
    if p["compile"]:
        est += 30 + 4 * SHAPE_LAYERS.get(p["model"], 12)
    return est


SHAPE_LAYERS = {"125m": 12, "1b": 16, "3b": 28, "8b_l4": 4, "8b_l8": 8, "tiny": 2}


def train_case(model: str, mbs: int, seq: int, compile_: bool = False, profile: bool = False,
               backend: str = "inductor", reps: int = 5) -> Case:
    cfg = ref_config(model, seq)
    p = {**model_params(model, cfg), "mbs": mbs, "seq": seq, "tokens": mbs * seq,
         "stack": "compile" if compile_ else "eager", "compile": compile_,
         "compile_backend": backend if compile_ else None, "compile_mode": None,
         "precision": "amp_bf16 (fp32 params, autocast bf16)", "optimizer": "AdamW(fused=True)",
         "profile": profile, "reps": reps, "warmup": 3}
    cid = f"train_step/{model}/{p['stack']}/mbs{mbs}_seq{seq}"
    return Case(cid, "train_step", p, lambda ctx: run_train(ctx, p), _est(p))


def _smoke() -> list[Case]:
    return [train_case("tiny", 2, 32, profile=True, reps=3),
            train_case("tiny", 2, 32, compile_=True, backend="aot_eager", reps=3)]


def _quick() -> list[Case]:
    return [train_case("125m", 8, 1024, profile=True), train_case("1b", 2, 2048)]


def _full() -> list[Case]:
    eager = [train_case("125m", 1, 512), train_case("125m", 8, 1024, profile=True),
             train_case("1b", 1, 2048), train_case("1b", 2, 2048, profile=True), train_case("1b", 4, 4096),
             train_case("3b", 1, 4096), train_case("3b", 2, 2048),
             train_case("8b_l4", 2, 4096, profile=True), train_case("8b_l8", 1, 4096), train_case("8b_l8", 4, 2048)]
    compiled = [train_case("125m", 8, 1024, compile_=True, profile=True),
                train_case("1b", 2, 2048, compile_=True, profile=True)]
    return eager + compiled


def groups(suite: str) -> list[Group]:
    cases = {"smoke": _smoke, "quick": _quick, "full": _full}[suite]()
    return [Group(f"train_step/{c.params['model']}/{c.params['stack']}/mbs{c.params['mbs']}_seq{c.params['seq']}", [c])
            for c in cases]
