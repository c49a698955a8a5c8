"""Eager MoE decoders: llama_ref with each MLP replaced by a routed-expert block (kind "moe_step").

Two implementations of the same block (router, softmax fp32, top-k, renormalise, experts, weighted sum):
- loop_stacked: the plain way. One stacked parameter per projection ([E, d, F], [E, d, F], [E, F, d]);
  argsort of the flat expert ids, ``bincount(minlength=E).tolist()`` (a device-to-host copy: the host
  waits until the GPU drains), one gather of the sorted token rows, a Python loop over the experts
  slicing the sorted rows by the host counts and indexing the stacked weights with ``w[e]``
  (aten::select, a view; its backward, select_backward, is zeros of the full stacked weight plus a
  copy of the expert's slice, and autograd sums the E full-size gradients), one cat, one gather of
  the routing weights, a mul, and an index_add_ into zeros.
- loop_modules: HF transformers' MixtralSparseMoeBlock (transformers 4.4x): nn.ModuleList experts
  (per-expert nn.Linear weights), one_hot(...).permute(2, 1, 0) expert mask, per expert
  ``torch.where(expert_mask[e])`` (a nonzero: a host sync per expert), gather, expert MLP, mul by the
  routing weight, index_add_.
Both cast the (fp32, autocast) norm output to bf16 once (``hb``), as a bf16 model holds it.

Cases: training steps (amp_bf16, fp32 params, AdamW(fused=True), timed like cases_e2e's train_step),
forward-only prefill in bf16 weights (timed like cases_inference's prefill), one kernel profile of
each, and the host cost of one ``.item()`` round trip on an idle GPU (sync_roundtrip_s).
"""

from __future__ import annotations

import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from cases_inference import PairedProbe, _tokens, add_model_probe, kv_caches, model_probe_s
from common import Case, Ctx, Group, free_memory, result
from llama_ref import RefConfig
from models import batch, build_model, kernel_summary, make_optimizer, make_train_step, n_params_actual, sustained_lead_calls
from timing import add_host_probe, host_probe_s, measure, measure_steps

# Mixtral-like, scaled to one GPU (Mixtral-8x7B: d 4096, expert ffn 14336, 32 heads / 8 kv, 8 experts top-2)
MOE_SHAPES = {
    "mix_s": dict(vocab=32000, d_model=1024, n_layers=4, n_heads=16, n_kv_heads=8, ffn=3584, n_experts=8, top_k=2),
    "mix_m": dict(vocab=32000, d_model=2048, n_layers=4, n_heads=16, n_kv_heads=8, ffn=5632, n_experts=8, top_k=2),
    "tiny": dict(vocab=512, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn=128, n_experts=4, top_k=2),
}
IMPLS = ("loop_stacked", "loop_modules")


def random_shapes(seed: int = 19, n: int = 3) -> dict[str, dict]:
    """Seeded random MoE decoders (held-out shapes no constant was chosen on): d from 768 to 2048,
    expert ffn 1.5-3.5 d (multiple of 128), 4/8/16 experts, top-1/2, 2-4 layers, head_dim 128."""
    rng = random.Random(seed)
    out = {}
    for i in range(n):
        d = rng.choice((768, 1024, 1536, 2048))
        h = d // 128
        out[f"rand{seed}_{i}"] = dict(vocab=32000, d_model=d, n_layers=rng.choice((2, 3, 4)), n_heads=h,
                                      n_kv_heads=h // 2 if h % 2 == 0 else h,
                                      ffn=round(d * rng.uniform(1.5, 3.5) / 128) * 128,
                                      n_experts=rng.choice((4, 8, 16)), top_k=rng.choice((1, 2)),
                                      mbs=rng.choice((1, 2)), seq=rng.choice((512, 1024, 2048)))
    return out


RANDOM = random_shapes()
# a second seeded draw for a later machine start (tag "stepval": split by validation/splits.toml [stepval])
RANDOM_STEPVAL = random_shapes(seed=23, n=2)
MOE_SHAPES.update({k: {f: v for f, v in s.items() if f not in ("mbs", "seq")}
                   for k, s in {**RANDOM, **RANDOM_STEPVAL}.items()})


class StackedMoE(nn.Module):
    def __init__(self, d: int, f: int, e: int, k: int):
        super().__init__()
        self.e, self.k = e, k
        self.router = nn.Linear(d, e, bias=False)
        self.w_gate = nn.Parameter(torch.randn(e, d, f) * d ** -0.5)
        self.w_up = nn.Parameter(torch.randn(e, d, f) * d ** -0.5)
        self.w_down = nn.Parameter(torch.randn(e, f, d) * f ** -0.5)

    def forward(self, x):
        shape = x.shape
        hb = x.reshape(-1, shape[-1]).to(torch.bfloat16)
        probs = torch.softmax(self.router(hb), dim=-1, dtype=torch.float32)
        topw, topi = torch.topk(probs, self.k, dim=-1)
        topw = topw / topw.sum(dim=-1, keepdim=True)
        flat = topi.reshape(-1)
        order = torch.argsort(flat)
        counts = torch.bincount(flat, minlength=self.e).tolist()   # host sync
        tok = order // self.k
        xs = hb[tok]
        outs, start = [], 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            xe = xs[start:start + n]
            y = (F.silu(xe @ self.w_gate[e]) * (xe @ self.w_up[e])) @ self.w_down[e]
            outs.append(y)
            start += n
        ys = torch.cat(outs)
        ys = ys * topw.reshape(-1)[order].to(ys.dtype)[:, None]
        out = hb.new_zeros(hb.shape).index_add_(0, tok, ys)
        return out.reshape(shape)


class Expert(nn.Module):
    def __init__(self, d: int, f: int):
        super().__init__()
        self.w1 = nn.Linear(d, f, bias=False)
        self.w2 = nn.Linear(f, d, bias=False)
        self.w3 = nn.Linear(d, f, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class ModulesMoE(nn.Module):
    """transformers' MixtralSparseMoeBlock.forward (4.4x), without jitter and router logits output."""

    def __init__(self, d: int, f: int, e: int, k: int):
        super().__init__()
        self.e, self.k = e, k
        self.gate = nn.Linear(d, e, bias=False)
        self.experts = nn.ModuleList(Expert(d, f) for _ in range(e))

    def forward(self, x):
        shape = x.shape
        hb = x.reshape(-1, shape[-1]).to(torch.bfloat16)
        rw = F.softmax(self.gate(hb), dim=1, dtype=torch.float)
        rw, sel = torch.topk(rw, self.k, dim=-1)
        rw = rw / rw.sum(dim=-1, keepdim=True)
        rw = rw.to(hb.dtype)
        final = torch.zeros_like(hb)
        mask = F.one_hot(sel, num_classes=self.e).permute(2, 1, 0)
        for e in range(self.e):
            idx, top_x = torch.where(mask[e])     # host sync
            cur = hb[None, top_x].reshape(-1, shape[-1])
            y = self.experts[e](cur) * rw[top_x, idx, None]
            final.index_add_(0, top_x, y.to(hb.dtype))
        return final.reshape(shape)


def build_moe_model(name: str, impl: str, max_seq: int, device: str, dtype: torch.dtype):
    s = dict(MOE_SHAPES[name])
    e, k = s.pop("n_experts"), s.pop("top_k")
    cfg = RefConfig(max_seq=max(max_seq, 64), **s)
    model = build_model(cfg, device, dtype)
    block = StackedMoE if impl == "loop_stacked" else ModulesMoE
    torch.manual_seed(0)
    with torch.device(device):
        for layer in model.layers:
            layer.mlp = block(cfg.d_model, cfg.ffn, e, k).to(dtype=dtype)
    return cfg, model


def sync_roundtrip_s(device: str, reps: int = 200) -> float | None:
    """Host seconds of one tiny kernel + ``.item()`` on an idle GPU (the D2H copy and stream sync)."""
    if not device.startswith("cuda"):
        return None
    x = torch.zeros(8, device=device)
    for _ in range(10):
        x.sum().item()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        x.sum().item()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def run_train(ctx: Ctx, p: dict) -> dict:
    cfg, model = build_moe_model(p["model"], p["impl"], p["seq"], ctx.device, torch.float32)
    opt, opt_impl = make_optimizer(model)
    idx, tgt = batch(cfg, p["mbs"], p["seq"], ctx.device)
    step = make_train_step(model, opt, idx, tgt, ctx.device_type)
    extra: dict = {"optimizer": opt_impl, "n_params_actual": n_params_actual(model)}
    before, mprobe = host_probe_s(ctx.device), model_probe_s(ctx)
    timing, ext = measure_steps(step, ctx.device, warmup=3, reps=p["reps"])
    extra.update(ext)
    add_host_probe(extra, before, host_probe_s(ctx.device))
    add_model_probe(extra, mprobe, model_probe_s(ctx))
    extra["sync_roundtrip_s"] = sync_roundtrip_s(ctx.device)
    if p["profile"]:
        extra.update(kernel_summary(step, ctx.device, top=200, lead_calls=sustained_lead_calls(timing["median_s"])))
    del step, model, opt
    free_memory()
    return result(timing, extra)


def run_prefill(ctx: Ctx, p: dict) -> dict:
    cfg, model = build_moe_model(p["model"], p["impl"], p["prompt"], ctx.device, torch.bfloat16)
    model.eval()
    with torch.inference_mode():
        caches = kv_caches(cfg, p["batch"], p["prompt"], ctx.device)
        idx = _tokens(cfg, p["batch"], p["prompt"], ctx.device)
        call = lambda i: model(idx, caches, 0)  # noqa: E731
        probe, mprobe = host_probe_s(ctx.device), model_probe_s(ctx)
        paired = PairedProbe(ctx) if ctx.is_cuda else None
        timing, extra = measure(call, ctx.device, graph=False, flush=False, warmup=2, before_sample=paired)
        add_host_probe(extra, probe, host_probe_s(ctx.device))
        add_model_probe(extra, mprobe, model_probe_s(ctx))
        if paired is not None and len(paired.values) == timing["n"]:
            extra["host_model_probe_s"]["samples"] = paired.values
        extra["sync_roundtrip_s"] = sync_roundtrip_s(ctx.device)
        if p["profile"]:
            extra.update(kernel_summary(call, ctx.device, top=200, lead_calls=sustained_lead_calls(timing["median_s"])))
    model = caches = None   # drop them before free_memory (the lambda holds the cells)
    free_memory()
    return result(timing, extra)


# ---- host cost of the loops without GPU work (kind "launch", mode "moe_loop") ----------------------
# One MoE block at tiny width (d 64, F 128, 256 tokens, top-2): the same Python, aten calls, views,
# module calls and autograd nodes per expert as the measured decoders, with kernels of ~2-5 us, so
# the wall time of a forward (or forward + backward) is the host's issue time plus the syncs' round
# trips. Three expert counts give the per-expert slope; the profiler counts the kernels of each pass.
LOOP_D, LOOP_F, LOOP_T, LOOP_K = 64, 128, 256, 2
LOOP_EXPERTS = (4, 8, 16)


def _wall_median(fn, device: str, reps: int) -> float:
    times = []
    for _ in range(reps):
        torch.cuda.synchronize() if device.startswith("cuda") else None
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    torch.cuda.synchronize() if device.startswith("cuda") else None
    return sorted(times)[len(times) // 2]


def _kernels_of(fn, device: str) -> int | None:
    if not device.startswith("cuda"):
        return None
    return kernel_summary(lambda _i: fn(), device, top=0)["kernel_launches"]


def run_loop_host(ctx: Ctx, p: dict) -> dict:
    block = (StackedMoE if p["impl"] == "loop_stacked" else ModulesMoE)(LOOP_D, LOOP_F, p["n_experts"], LOOP_K)
    block = block.to(ctx.device)
    x = torch.randn(LOOP_T, LOOP_D, device=ctx.device, requires_grad=True)

    def fwd():
        with torch.autocast(ctx.device_type, dtype=torch.bfloat16):
            return block(x)

    def fwd_bwd():
        fwd().float().sum().backward()

    for _ in range(5):
        fwd_bwd()
    before = host_probe_s(ctx.device)
    reps = 7 if ctx.smoke else 41
    extra = {"fwd_s": _wall_median(fwd, ctx.device, reps), "fwd_bwd_s": _wall_median(fwd_bwd, ctx.device, reps),
             "sync_roundtrip_s": sync_roundtrip_s(ctx.device),
             "fwd_kernels": _kernels_of(fwd, ctx.device), "fwd_bwd_kernels": _kernels_of(fwd_bwd, ctx.device)}
    add_host_probe(extra, before, host_probe_s(ctx.device))
    ib = block.to(torch.bfloat16).eval()
    xb = torch.randn(LOOP_T, LOOP_D, device=ctx.device, dtype=torch.bfloat16)
    with torch.inference_mode():
        extra["infer_fwd_s"] = _wall_median(lambda: ib(xb), ctx.device, reps)
        extra["infer_fwd_kernels"] = _kernels_of(lambda: ib(xb), ctx.device)
    timing = {"method": "wall", "median_s": extra["fwd_bwd_s"], "min_s": extra["fwd_bwd_s"],
              "max_s": extra["fwd_bwd_s"], "n": 1, "inner": 1, "samples_s": [extra["fwd_bwd_s"]]}
    return result(timing, extra)   # a tiny block: its memory goes with the frame


def loop_host_case(impl: str, e: int) -> Case:
    p = {"mode": "moe_loop", "impl": impl, "n_experts": e, "top_k": LOOP_K, "d_model": LOOP_D, "expert_ffn": LOOP_F,
         "tokens": LOOP_T, "precision": "amp_bf16 (fp32 params, autocast bf16); inference: bf16", "tags": ["moeloop"]}
    return Case(f"launch/moe_loop/{impl}/e{e}", "launch", p, lambda ctx: run_loop_host(ctx, p), 2.5)


def _params(name: str, impl: str) -> dict:
    s = MOE_SHAPES[name]
    return {"model": name, **s, "tie_embeddings": False, "head_dim": s["d_model"] // s["n_heads"], "impl": impl,
            "expert_ffn": s["ffn"]}


def train_case(name: str, impl: str, mbs: int, seq: int, profile: bool = False, reps: int = 5,
               tags: tuple[str, ...] = ()) -> Case:
    p = {**_params(name, impl), "mode": "train", "mbs": mbs, "seq": seq, "tokens": mbs * seq,
         "stack": "eager", "precision": "amp_bf16 (fp32 params, autocast bf16)", "optimizer": "AdamW(fused=True)",
         "profile": profile, "reps": reps, "warmup": 3, **({"tags": list(tags)} if tags else {})}
    return Case(f"moe_step/{name}/{impl}/train_mbs{mbs}_seq{seq}", "moe_step", p,
                lambda ctx: run_train(ctx, p), 6.0 + (3.0 if profile else 0.0))


def prefill_case(name: str, impl: str, b: int, s: int, profile: bool = False) -> Case:
    p = {**_params(name, impl), "mode": "prefill", "batch": b, "prompt": s, "tokens": b * s,
         "max_seq": s, "dtype": "bf16", "stack": "eager", "profile": profile}
    return Case(f"moe_step/{name}/{impl}/prefill_b{b}_s{s}", "moe_step", p,
                lambda ctx: run_prefill(ctx, p), 4.0 + (3.0 if profile else 0.0))


def _cases(suite: str) -> list[Case]:
    if suite == "smoke":
        return [c for i in IMPLS for c in (train_case("tiny", i, 2, 32, profile=True, reps=2),
                                           prefill_case("tiny", i, 1, 32, profile=True), loop_host_case(i, 4))]
    out = [loop_host_case(i, e) for i in IMPLS for e in LOOP_EXPERTS]
    for impl in IMPLS:
        out += [train_case("mix_s", impl, 1, 1024, profile=True), train_case("mix_s", impl, 2, 2048),
                train_case("mix_m", impl, 1, 2048, profile=True),
                prefill_case("mix_s", impl, 1, 2048, profile=True), prefill_case("mix_m", impl, 2, 2048)]
        out += [train_case(k, impl, r["mbs"], r["seq"]) for k, r in RANDOM.items()]
        out += [train_case(k, impl, r["mbs"], r["seq"], tags=("stepval",)) for k, r in RANDOM_STEPVAL.items()]
    return out if suite == "full" else []   # quick: none (the full suite or --only moe_step runs them)


def groups(suite: str) -> list[Group]:
    return [Group(c.case_id, [c]) for c in _cases(suite)]
