"""GEMM cases (kind "gemm"): C[M,N] = A[M,K] @ W[N,K]^T, the layout of F.linear.

A is row-major [M,K]; B is passed as W.t() of a contiguous [N,K] weight (column-major
[K,N]) for every dtype, which is what nn.Linear does and what torch._scaled_mm needs.
dtypes: bf16, fp16, tf32 (fp32 with allow_tf32=True), fp32 (allow_tf32=False),
fp8_e4m3 (torch._scaled_mm, per-tensor fp32 scales, bf16 output). flops = 2*M*N*K.

Estimated durations on an H200 (alloc + randn + 3 warm-up + estimate + capture + reps;
~0.2 s per small case, ~12x the call time for big ones):
  quick: 28 cases, ~8 s
  full: ~150 cases, ~55 s (the fp32 16384^3 is left out: 0.2 s/call)
"""

from __future__ import annotations

import time

import torch

from common import DTYPES, ELT_BYTES, Case, Ctx, Group, dedupe, fp32_matmul_mode, randn, result
from timing import measure, rotation_count

# (N, K) of Llama 3 layers: fused qkv, o, fused gate_up, down, lm_head (logits).
LLAMA_NK = {
    "8b": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096),
           "down": (4096, 14336), "logits": (128256, 4096)},
    "70b": {"qkv": (10240, 8192), "o": (8192, 8192), "gate_up": (57344, 8192),
            "down": (8192, 28672), "logits": (128256, 8192)},
}
PEAK = {"bf16": 7e14, "fp16": 7e14, "fp8_e4m3": 1.3e15, "tf32": 3.5e14, "fp32": 5e13}
DECODE_M = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def gemm_bytes(dtype: str, m: int, n: int, k: int) -> int:
    out = 2 if dtype in ("bf16", "fp16", "fp8_e4m3") else 4
    return (m * k + n * k) * ELT_BYTES[dtype] + m * n * out


def _est(dtype: str, m: int, n: int, k: int) -> float:
    t = max(2 * m * n * k / PEAK[dtype], gemm_bytes(dtype, m, n, k) / 3.5e12)
    return 0.2 + 12 * t


def _operands(ctx: Ctx, dtype: str, m: int, n: int, k: int, n_rot: int):
    sets = []
    for _ in range(n_rot):
        a = randn((m, k), dtype, ctx.device)
        w = randn((n, k), dtype, ctx.device, scale=0.05)
        sets.append((a, w.t()))
    return sets


def _call(dtype: str, sets, device: str):
    n_rot = len(sets)
    if dtype != "fp8_e4m3":
        return lambda i: torch.matmul(*sets[i % n_rot])
    one = torch.tensor(1.0, dtype=torch.float32, device=device)

    def call(i):
        a, b = sets[i % n_rot]
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return call


def run_gemm(ctx: Ctx, dtype: str, m: int, n: int, k: int, reps: int | None = None, idle_s: float = 0.0) -> dict:
    """One GEMM shape; ``reps`` fixes the number of timed graph replays (one call each) and
    ``idle_s`` idles the GPU first, so the timed window's power state is known (window cases)."""
    set_bytes = (m * k + n * k) * ELT_BYTES[dtype]
    n_rot = rotation_count(set_bytes, ctx.l2_bytes)
    sets = _operands(ctx, dtype, m, n, k, n_rot)
    if idle_s and ctx.is_cuda:
        torch.cuda.synchronize()
        time.sleep(idle_s)
    with fp32_matmul_mode(dtype == "tf32"):
        timing, extra = measure(_call(dtype, sets, ctx.device), ctx.device, n_rot=n_rot, l2=ctx.l2_bytes,
                                reps=reps, inner=1 if reps else None, flush=reps is None)
    extra["tflops"] = 2 * m * n * k / timing["median_s"] / 1e12
    return result(timing, extra)


def run_bmm(ctx: Ctx, dtype: str, batch: int, m: int, n: int, k: int) -> dict:
    """Batched GEMM (torch.bmm over equal-size expert groups): C[b] = A[b] @ W[b].T."""
    set_bytes = batch * (m * k + n * k) * ELT_BYTES[dtype]
    n_rot = rotation_count(set_bytes, ctx.l2_bytes)
    sets = [(randn((batch, m, k), dtype, ctx.device), randn((batch, n, k), dtype, ctx.device, scale=0.05).transpose(1, 2))
            for _ in range(n_rot)]
    timing, extra = measure(lambda i: torch.bmm(*sets[i % n_rot]), ctx.device, n_rot=n_rot, l2=ctx.l2_bytes)
    extra["tflops"] = 2 * batch * m * n * k / timing["median_s"] / 1e12
    return result(timing, extra)


def bmm_case(dtype: str, batch: int, m: int, n: int, k: int, tag: str) -> Case:
    """MoE expert GEMMs as one batched GEMM (equal tokens per expert: a balanced router)."""
    params = {"dtype": dtype, "batch": batch, "m": m, "n": n, "k": k, "flops": 2 * batch * m * n * k,
              "bytes_min": batch * gemm_bytes(dtype, m, n, k), "layout": "A [b,M,K], B = W[b,N,K].transpose(1,2)",
              "torch_dtype": str(DTYPES[dtype]), "tf32": False, "tags": [tag], "impl": "torch.bmm"}
    return Case(f"gemm/{dtype}/b{batch}_m{m}_n{n}_k{k}", "gemm", params,
                lambda ctx: run_bmm(ctx, dtype, batch, m, n, k), _est(dtype, batch * m, n, k))


def _moe_experts() -> list[Case]:
    """Per-expert GEMMs of MoE layers at 8192 tokens (Qwen3-30B-A3B: 128 experts, top-8;
    Mixtral 8x7B: 8, top-2; DeepSeek-V3: 32 local experts of 256 at ep=8, top-8)."""
    shapes = [("moe/qwen3/gate_up", 128, 512, 1536, 2048), ("moe/qwen3/down", 128, 512, 2048, 768),
              ("moe/qwen3/gate_up_ep8", 16, 512, 1536, 2048),
              ("moe/mixtral/gate_up", 8, 2048, 28672, 4096), ("moe/mixtral/down", 8, 2048, 4096, 14336),
              ("moe/dsv3/gate_up", 32, 256, 4096, 7168), ("moe/dsv3/down", 32, 256, 7168, 2048),
              ("moe/dsv3/gate_up_m128", 32, 128, 4096, 7168)]
    return [bmm_case("bf16", b, m, n, k, tag) for tag, b, m, n, k in shapes]


def gemm_case(dtype: str, m: int, n: int, k: int, tag: str) -> Case:
    params = {"dtype": dtype, "m": m, "n": n, "k": k, "flops": 2 * m * n * k,
              "bytes_min": gemm_bytes(dtype, m, n, k), "layout": "A row-major, B = W[N,K].t() (F.linear)",
              "torch_dtype": str(DTYPES[dtype]), "tf32": dtype == "tf32", "tags": [tag],
              "impl": "torch._scaled_mm(per-tensor scales, out bf16)" if dtype == "fp8_e4m3" else "torch.matmul"}
    return Case(f"gemm/{dtype}/m{m}_n{n}_k{k}", "gemm", params,
                lambda ctx: run_gemm(ctx, dtype, m, n, k), _est(dtype, m, n, k))


def window_case(dtype: str, m: int, n: int, k: int, reps: int, idle_s: float = 1.0) -> Case:
    """A GEMM timed over exactly ``reps`` back-to-back calls after ``idle_s`` of idle GPU: the
    timed window runs from boost clock into the power cap (validation: boosted_compute_scale)."""
    c = gemm_case(dtype, m, n, k, "window")
    params = {**c.params, "reps": reps, "idle_before_s": idle_s}
    return Case(f"{c.case_id}/reps{reps}", "gemm", params,
                lambda ctx: run_gemm(ctx, dtype, m, n, k, reps, idle_s), c.est_s * reps / 30 + idle_s)


def _window() -> list[Case]:
    return [window_case(dt, 8192, 8192, 8192, r) for dt in ("bf16", "fp8_e4m3") for r in (3, 10, 30, 100, 300)]


def _ksweep() -> list[Case]:
    """K from 256 to 12288 at M = N = 8192: the per-tile prologue/epilogue (gemm.k_overhead)."""
    ks = (256, 384, 512, 768, 1536, 3072, 6144, 12288)
    return ([gemm_case("bf16", 8192, 8192, k, "ksweep") for k in ks]
            + [gemm_case("fp8_e4m3", 8192, 8192, k, "ksweep") for k in (512, 1536, 6144)])


def _layer_cases(dtypes, ms, model: str, layers=None, tag: str = "train") -> list[Case]:
    nk = LLAMA_NK[model]
    return [gemm_case(dt, m, *nk[ly], f"{tag}/{model}/{ly}")
            for dt in dtypes for m in ms for ly in (layers or nk)]


def _bwd_cases(model: str, tokens: int) -> list[Case]:
    """Backward GEMMs of a linear: dgrad [T,N]x[N,K] (depth N) and wgrad [N,T]x[T,K] (depth T)."""
    out = []
    for ly, (n, k) in LLAMA_NK[model].items():
        out.append(gemm_case("bf16", tokens, k, n, f"bwd_dgrad/{model}/{ly}"))
        out.append(gemm_case("bf16", n, k, tokens, f"bwd_wgrad/{model}/{ly}"))
    return out


def _square(dtypes, sizes) -> list[Case]:
    return [gemm_case(dt, s, s, s, "square") for dt in dtypes for s in sizes]


def _align(ms, ks) -> list[Case]:
    return [gemm_case("bf16", m, n, k, f"align/n{n}") for m in ms for k in ks for n in (50257, 50304)]


def _odd_leading_dims() -> list[Case]:
    """Calibration cases for the alignment mechanism: N or K not a multiple of
    16 bytes of elements (the held-out "align/" vocabulary cases stay unseen)."""
    shapes = [(4096, 32001, 4096), (2048, 10007, 2048), (8192, 4100, 4096), (4096, 4096, 4099), (1024, 6001, 1024)]
    return [gemm_case(dt, m, n, k, f"odd_ld/n{n}_k{k}") for dt in ("bf16", "fp16") for m, n, k in shapes]


def _smoke() -> list[Case]:
    cases = _square(["bf16", "fp16", "tf32", "fp32", "fp8_e4m3"], [64]) + [bmm_case("bf16", 4, 16, 32, 64, "moe/tiny")]
    return cases + [gemm_case("bf16", 1, 128, 64, "decode"), gemm_case("bf16", 32, 257, 64, "align/n257")]


def _quick() -> list[Case]:
    return (_square(["bf16"], [1024, 4096, 8192]) + _square(["fp16", "tf32", "fp32"], [4096])
            + _square(["fp8_e4m3"], [4096, 8192])
            + _layer_cases(["bf16"], [8192], "8b")
            + _layer_cases(["fp8_e4m3"], [8192], "8b", ["qkv", "gate_up"])
            + _layer_cases(["bf16"], [8192], "70b", ["gate_up"])
            + _layer_cases(["bf16"], [1, 16, 128], "8b", ["qkv", "gate_up", "down"], "decode")
            + _layer_cases(["bf16"], [1], "70b", ["gate_up"], "decode")
            + _align([8192], [768]))


def _full() -> list[Case]:
    return (_square(["bf16", "fp16", "fp8_e4m3"], [512, 1024, 2048, 4096, 8192, 16384])
            + _square(["tf32"], [512, 1024, 2048, 4096, 8192]) + _square(["fp32"], [512, 1024, 2048, 4096, 8192])
            + _layer_cases(["bf16"], [4096, 8192, 16384], "8b") + _layer_cases(["bf16"], [4096, 8192, 16384], "70b")
            + _layer_cases(["fp8_e4m3", "fp16"], [8192], "8b") + _layer_cases(["fp8_e4m3"], [8192], "70b")
            + _bwd_cases("8b", 8192)
            + _layer_cases(["bf16"], DECODE_M, "8b", tag="decode")
            + _layer_cases(["bf16"], [1, 8, 32, 128], "70b", ["qkv", "gate_up", "down"], "decode")
            + _layer_cases(["fp8_e4m3"], [1, 16, 64], "8b", ["qkv", "gate_up", "down"], "decode")
            + _align([8192], [768, 4096]) + _odd_leading_dims() + _moe_experts() + _ksweep() + _window())


def groups(suite: str) -> list[Group]:
    cases = dedupe({"smoke": _smoke, "quick": _quick, "full": _full}[suite]())
    by_tag: dict[str, list[Case]] = {}
    for c in cases:
        by_tag.setdefault("gemm/" + c.params["tags"][0].split("/")[0], []).append(c)
    return [Group(name, cs) for name, cs in by_tag.items()]
