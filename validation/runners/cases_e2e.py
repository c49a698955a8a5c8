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

import random
import time

import torch

from common import Case, Ctx, Group, clean_baseline, free_memory, result
from models import (SHAPES, batch, build_model, host_phase_times, kernel_summary, make_optimizer, make_train_step,
                    model_params, n_params_actual, ref_config, sustained_lead_calls)
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
        extra["host_issue_s"] = host_issue_step_s(step, ctx)
    if p["profile"]:
        extra.update(kernel_summary(step, ctx.device, lead_calls=sustained_lead_calls(timing["median_s"])))
    if not p["compile"]:
        extra["host_phase_s"] = host_phase_times(fwd_model, opt, idx, tgt, ctx.device_type)
    extra["tokens_per_s"] = p["mbs"] * p["seq"] / timing["median_s"]
    del step, fwd_model, model, opt
    if p["compile"]:
        torch._dynamo.reset()
    free_memory()
    return result(timing, extra)


def host_issue_step_s(step, ctx: Ctx, reps: int = 3) -> float | None:
    """Median host seconds to issue one whole step (synchronised before, not inside): the host's
    share of a step, to set beside the step's kernel count. None on CPU."""
    if not ctx.is_cuda:
        return None
    times = []
    for i in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(i)
        times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return sorted(times)[len(times) // 2]


# Seeded random Llama-style decoders for compiled training (tag "stepval"): Qwen2.5-0.5B- to
# Llama-3.2-3B-class widths as 2-6 layer slices, head_dim 64/128, GQA, vocabularies of released
# tokenizers; mbs x seq drawn from 2048-8192 tokens. No constant was chosen on these shapes;
# validation/splits.toml [stepval] puts half of them (seeded hash of the case id) in held-out.
STEP_SEED = 20261202
WIDTHS = (896, 1024, 1536, 2048, 2560, 3072)
VOCABS = (32000, 50304, 128256, 151936)
BATCHES = ((1, 2048), (2, 1024), (4, 512), (1, 4096), (2, 2048), (4, 1024), (8, 1024))


def random_llama_shapes(seed: int = STEP_SEED, n: int = 4) -> dict[str, dict]:
    """{name: shape and (mbs, seq)} of ``n`` seeded random Llama-style decoders."""
    rng = random.Random(seed)
    out = {}
    for i in range(n):
        d = rng.choice(WIDTHS)
        hd = rng.choice((64, 128))
        h = d // hd
        kv = rng.choice([x for x in (1, 2, 4, 8) if h % x == 0])
        mbs, seq = rng.choice(BATCHES)
        out[f"r{seed}_{i}"] = dict(vocab=rng.choice(VOCABS), d_model=d, n_layers=rng.choice((2, 3, 4, 6)),
                                   n_heads=h, n_kv_heads=kv, ffn=round(d * rng.uniform(2.5, 4.0) / 256) * 256,
                                   tie_embeddings=rng.choice((True, False)), mbs=mbs, seq=seq)
    return out


RANDOM = random_llama_shapes()
SHAPES.update({k: {f: v for f, v in s.items() if f not in ("mbs", "seq")} for k, s in RANDOM.items()})


def _est(p: dict) -> float:
    tokens = p["mbs"] * p["seq"]
    step = max(8 * p["n_params"] * tokens / (0.45 * PEAK_BF16), 0.02)
    est = 2.0 + 9 * step + (3.0 if p["profile"] else 0.0)
    if p["compile"]:
        est += 30 + 4 * SHAPE_LAYERS.get(p["model"], 12)
    return est


SHAPE_LAYERS = {"125m": 12, "1b": 16, "3b": 28, "8b_l4": 4, "8b_l8": 8, "tiny": 2,
                **{k: s["n_layers"] for k, s in RANDOM.items()}}


def train_case(model: str, mbs: int, seq: int, compile_: bool = False, profile: bool = False,
               backend: str = "inductor", reps: int = 5, tags: tuple[str, ...] = ()) -> Case:
    cfg = ref_config(model, seq)
    p = {**model_params(model, cfg), "mbs": mbs, "seq": seq, "tokens": mbs * seq,
         "stack": "compile" if compile_ else "eager", "compile": compile_,
         "compile_backend": backend if compile_ else None, "compile_mode": None,
         "precision": "amp_bf16 (fp32 params, autocast bf16)", "optimizer": "AdamW(fused=True)",
         "profile": profile, "reps": reps, "warmup": 3, **({"tags": list(tags)} if tags else {})}
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
    return eager + compiled + stepval_cases()


def stepval_cases() -> list[Case]:
    """Compiled training steps of the seeded random shapes (every other one profiled)."""
    return [train_case(k, r["mbs"], r["seq"], compile_=True, profile=j % 2 == 0, tags=("stepval",))
            for j, (k, r) in enumerate(RANDOM.items())]


def groups(suite: str) -> list[Group]:
    cases = {"smoke": _smoke, "quick": _quick, "full": _full}[suite]()
    return [Group(f"train_step/{c.params['model']}/{c.params['stack']}/mbs{c.params['mbs']}_seq{c.params['seq']}", [c])
            for c in cases]
