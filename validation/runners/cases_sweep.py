"""Random-shape sweeps (suite "sweep"): kernel shapes drawn at random, seeded (torch + stdlib).

Each family draws its shapes from its own ``random.Random(f"{seed}/{family}")``, so a case list
is a pure function of (seed, scale) and another seed gives another set of shapes:

  gemm        m, n, k log-uniform in 1..65,536 for bf16, fp16, fp8_e4m3, tf32, fp32; a third of
              the non-fp8 draws have N made odd (not a multiple of 8) and some N = 50,257 (GPT-2's
              vocabulary); fp8 (torch._scaled_mm) needs K and N multiples of 16, so fp8 is aligned.
              Shapes whose operands exceed 12 GiB or whose call would exceed ~10 ms are redrawn.
  attention   F.scaled_dot_product_attention, bf16, Sq = Sk log-uniform in 128..131,072, head dim
              64 / 128 / 256, Hq 4..64, Hkv | Hq, causal or not, fwd or fwd+bwd, FLASH backend or
              torch's default (cuDNN on Hopper); batch and heads shrunk until a call is <= ~15 ms.
  norm        F.layer_norm (weight + bias), F.rms_norm, the HF-style RMSNorm module (6 kernels),
              fp32 or bf16, d log-uniform in 256..32,768, T x d log-uniform in 2^16..2^28.
  elementwise F.silu and F.gelu(approximate="tanh"), bf16 or fp32, 2^16..2^29 elements.
  softmax     F.softmax over the last dim, bf16 or fp32, cols log-uniform in 64..65,536 (a quarter
              odd), rows so that rows x cols is 2^18..2^28.
  cross_entropy  F.cross_entropy over fp32 or bf16 logits, vocab log-uniform in 32,000..152,064,
              T tokens 256..16,384, fwd or fwd+bwd.

Every case is timed by timing.measure (CUDA graph over rotating inputs, the clock sampled by
nvidia-smi inside the timed region into extra.power_state). Params carry the family and the seed;
ids are "<kind>/sweep/<seed>/<family>/<i>/<shape>".
"""

from __future__ import annotations

import math
import random

import cases_attention
import cases_gemm
import torch
import torch.nn.functional as F
from common import ELT_BYTES, Case, Ctx, Group, randn, result
from llama_ref import RMSNorm
from timing import measure, rotation_count

GEMM_DTYPES = ("bf16", "fp16", "fp8_e4m3", "tf32", "fp32")
RATE = {"bf16": 6.5e14, "fp16": 6.5e14, "fp8_e4m3": 1.2e15, "tf32": 3.2e14, "fp32": 5.0e13}
GEMM_MAX_S, ATTN_MAX_S = 10e-3, 15e-3
MAX_SET_BYTES = 12 << 30
ELT = {"fp32": 4, "bf16": 2}
COUNTS = {"gemm": 140, "attention": 60, "norm": 42, "elementwise": 24, "softmax": 32, "cross_entropy": 20}


def log_uniform(rng: random.Random, lo: float, hi: float) -> int:
    """An integer log-uniform in [lo, hi]."""
    return max(int(lo), min(int(hi), round(math.exp(rng.uniform(math.log(lo), math.log(hi))))))


def gemm_call_s(dtype: str, m: int, n: int, k: int) -> float:
    return max(2 * m * n * k / RATE[dtype], cases_gemm.gemm_bytes(dtype, m, n, k) / 3.5e12)


def draw_gemm(rng: random.Random, dtype: str) -> tuple[int, int, int, str]:
    """(m, n, k, alignment) within memory and call time; alignment 'aligned' | 'odd_n' | 'vocab'."""
    while True:
        m, n, k = (log_uniform(rng, 1, 65536) for _ in range(3))
        align = "aligned"
        if dtype == "fp8_e4m3":
            n, k = max(16, n // 16 * 16), max(16, k // 16 * 16)
        else:
            u = rng.random()
            if u < 0.08:
                n, align = 50257, "vocab"
            elif u < 0.33:
                n, align = n | 1, "odd_n"
        if (m * k + n * k) * ELT_BYTES[dtype] + m * n * 4 <= MAX_SET_BYTES and gemm_call_s(dtype, m, n, k) <= GEMM_MAX_S:
            return m, n, k, align


def gemm_cases(seed: int, count: int) -> list[Case]:
    rng = random.Random(f"{seed}/gemm")
    out = []
    for i in range(count):
        dt = GEMM_DTYPES[i % len(GEMM_DTYPES)]
        m, n, k, align = draw_gemm(rng, dt)
        c = cases_gemm.gemm_case(dt, m, n, k, "sweep")
        params = {**c.params, "family": "gemm", "seed": seed, "alignment": align}
        out.append(Case(f"gemm/sweep/{seed}/gemm/{i:03d}/{dt}_m{m}_n{n}_k{k}", "gemm", params, c.run, c.est_s))
    return out


def attn_call_s(p: dict) -> float:
    return p["flops"] / (2.5e14 if p["bwd"] else 3.5e14)


def draw_attention(rng: random.Random) -> dict:
    s = log_uniform(rng, 128, 131072)
    hd = rng.choice((64, 128, 256))
    hq = rng.choice((4, 8, 16, 32, 64))
    hkv = rng.choice([h for h in (1, 2, 4, 8, hq) if hq % h == 0])
    causal, bwd = rng.random() < 0.6, rng.random() < 0.4
    backend = "flash" if rng.random() < 0.65 else "default"
    b = max(1, log_uniform(rng, 1, 64) if s <= 8192 else 1)
    while True:
        p = cases_attention.attn_case(b, hq, hkv, s, s, hd, causal, bwd, backend, "sweep").params
        if attn_call_s(p) <= ATTN_MAX_S or (b == 1 and hq == hkv == 1):
            return p
        if b > 1:
            b //= 2
        elif hq > hkv:
            hq //= 2
        else:
            hq, hkv = max(1, hq // 2), max(1, hkv // 2)


def attention_cases(seed: int, count: int) -> list[Case]:
    rng = random.Random(f"{seed}/attention")
    out = []
    for i in range(count):
        p = draw_attention(rng)
        c = cases_attention.attn_case(p["b"], p["hq"], p["hkv"], p["sq"], p["sk"], p["hd"], p["causal"], p["bwd"],
                                      p["backend"], "sweep")
        params = {**c.params, "family": "attention", "seed": seed}
        tail = c.case_id.split("/", 2)[2]
        out.append(Case(f"attention/sweep/{seed}/attention/{i:03d}/{tail}", "attention", params,
                        lambda ctx, q=params: cases_attention.run_attn(ctx, q), c.est_s))
    return out


# ---- memory-bound families: (make, fn) builders over rotating sets ----

def _norm_fn(p: dict, dev: str):
    d, dt = p["d"], p["dtype"]
    if p["op"] == "layer_norm":
        w, b = randn((d,), dt, dev), randn((d,), dt, dev)
        return lambda x: F.layer_norm(x, (d,), w, b, 1e-5)
    if p["op"] == "rms_norm_f":
        w = randn((d,), dt, dev)
        return lambda x: F.rms_norm(x, (d,), w, 1e-5)
    mod = RMSNorm(d, 1e-5).to(dev)
    return mod.to(torch.bfloat16) if dt == "bf16" else mod


def _unary_fn(p: dict, dev: str):
    if p["op"] == "silu":
        return F.silu
    if p["op"] == "gelu_tanh":
        return lambda x: F.gelu(x, approximate="tanh")
    return lambda x: F.softmax(x, dim=-1)


def run_rows(ctx: Ctx, p: dict) -> dict:
    """One input tensor [rows, cols] per set; the op's forward."""
    rows, cols = p["t"], p.get("d") or p.get("cols") or p.get("f")
    fn = _norm_fn(p, ctx.device) if p["family"] == "norm" else _unary_fn(p, ctx.device)
    n_rot = rotation_count(rows * cols * ELT[p["dtype"]], ctx.l2_bytes)
    sets = [randn((rows, cols), p["dtype"], ctx.device) for _ in range(n_rot)]
    with torch.no_grad():
        timing, extra = measure(lambda i: fn(sets[i % n_rot]), ctx.device, n_rot=n_rot, l2=ctx.l2_bytes)
    return result(timing, extra)


def run_ce(ctx: Ctx, p: dict) -> dict:
    t, v, bwd, dt = p["t"], p["vocab"], p["bwd"], p["dtype"]
    n_rot = rotation_count(t * v * ELT[dt], ctx.l2_bytes)
    sets = [(randn((t, v), dt, ctx.device).requires_grad_(bwd), torch.randint(0, v, (t,), device=ctx.device))
            for _ in range(n_rot)]

    def call(i):
        x, y = sets[i % n_rot]
        loss = F.cross_entropy(x, y)
        return torch.autograd.grad(loss, (x,)) if bwd else loss
    with torch.set_grad_enabled(bwd):
        timing, extra = measure(call, ctx.device, n_rot=n_rot, l2=ctx.l2_bytes)
    return result(timing, extra)


def _rows_case(kind: str, family: str, seed: int, i: int, p: dict, run) -> Case:
    p = {**p, "family": family, "seed": seed, "pass": "fwd+bwd" if p.get("bwd") else "fwd",
         "bwd": bool(p.get("bwd")), "tags": ["sweep"]}
    shape = "_".join(f"{k}{v}" for k, v in p.items() if k in ("t", "d", "cols", "f", "vocab"))
    est = 0.3 + 12 * p["bytes_min"] / 3e12
    return Case(f"{kind}/sweep/{seed}/{family}/{i:03d}/{p['op']}/{p['pass']}/{p['dtype']}_{shape}", kind, p,
                lambda ctx: run(ctx, p), est)


def _rows_by_elems(rng: random.Random, cols: int, lo: float, hi: float) -> int:
    return max(1, log_uniform(rng, lo, hi) // cols)


def norm_cases(seed: int, count: int) -> list[Case]:
    rng = random.Random(f"{seed}/norm")
    ops = ("layer_norm", "rms_norm_f", "rmsnorm_hf")
    out = []
    for i in range(count):
        op, dt = ops[i % 3], rng.choice(("fp32", "bf16"))
        d = log_uniform(rng, 256, 32768)
        t = _rows_by_elems(rng, d, 2 ** 16, 2 ** 28 // (2 if dt == "fp32" else 1))
        out.append(_rows_case("norm", "norm", seed, i, {"op": op, "t": t, "d": d, "dtype": dt,
                                                         "bytes_min": 2 * t * d * ELT[dt]}, run_rows))
    return out


def activation_cases(seed: int, count: int) -> list[Case]:
    rng = random.Random(f"{seed}/elementwise")
    out = []
    for i in range(count):
        op, dt = ("silu", "gelu_tanh")[i % 2], rng.choice(("fp32", "bf16"))
        f = log_uniform(rng, 512, 32768)
        t = _rows_by_elems(rng, f, 2 ** 16, 2 ** 29 // (2 if dt == "fp32" else 1))
        out.append(_rows_case("elementwise", "activation", seed, i, {"op": op, "t": t, "f": f, "dtype": dt,
                                                                     "bytes_min": 2 * t * f * ELT[dt]}, run_rows))
    return out


def softmax_cases(seed: int, count: int) -> list[Case]:
    rng = random.Random(f"{seed}/softmax")
    out = []
    for i in range(count):
        dt = ("bf16", "fp32")[i % 2]
        cols = log_uniform(rng, 64, 65536)
        cols = cols | 1 if rng.random() < 0.25 else cols
        t = _rows_by_elems(rng, cols, 2 ** 18, 2 ** 28 // (2 if dt == "fp32" else 1))
        out.append(_rows_case("softmax", "softmax", seed, i, {"op": "softmax", "t": t, "cols": cols, "dtype": dt,
                                                               "bytes_min": 2 * t * cols * ELT[dt]}, run_rows))
    return out


def ce_cases(seed: int, count: int) -> list[Case]:
    rng = random.Random(f"{seed}/cross_entropy")
    out = []
    for i in range(count):
        dt, bwd = rng.choice(("fp32", "bf16")), i % 2 == 1
        v = log_uniform(rng, 32000, 152064)
        t = min(log_uniform(rng, 256, 16384), max(256, (6 << 30) // (v * ELT[dt] * (3 if bwd else 1))))
        p = {"op": "cross_entropy", "t": t, "vocab": v, "dtype": dt, "bwd": bwd, "bytes_min": t * v * ELT[dt]}
        out.append(_rows_case("cross_entropy", "cross_entropy", seed, i, p, run_ce))
    return out


BUILDERS = {"gemm": gemm_cases, "attention": attention_cases, "norm": norm_cases, "elementwise": activation_cases,
            "softmax": softmax_cases, "cross_entropy": ce_cases}


def groups(seed: int, scale: float = 1.0) -> list[Group]:
    """One group per family (GEMMs first and back to back: the power history of
    validation's GEMM predictions follows the run's GEMM cases in order)."""
    out = []
    for fam, build in BUILDERS.items():
        cases = build(seed, max(1, round(COUNTS[fam] * scale)))
        if fam == "gemm":
            random.Random(f"{seed}/order").shuffle(cases)
        out.append(Group(f"sweep/{fam}", cases))
    return out

