"""Attention cases (kind "attention"): F.scaled_dot_product_attention, bf16, [B, H, S, hd].

backend "flash" pins SDPBackend.FLASH_ATTENTION; "default" lets torch choose (on Hopper
with CUDA 13 torch prefers cuDNN attention: what llama_ref's model steps actually run).
fwd+bwd uses torch.autograd.grad (no .grad accumulation kernels).
FLOP convention: fwd = 4*B*Hq*Sq*Sk*hd (x0.5 when causal and Sq == Sk); bwd = 2.5x fwd.
Decode: one query per sequence against a KV cache of ctx tokens, Llama-3-8B heads (32/8, hd 128).

Estimated durations on an H200 (causal fwd at 32K tokens ~1-20 ms/call, bwd 2.5x):
  quick: 6 prefill-shaped + 3 decode = 9 cases, ~6 s
  full: 36 prefill-shaped + 16 decode = 52 cases, ~35 s
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from common import Case, Ctx, Group, randn, result
from timing import measure, rotation_count

BACKENDS = {"flash": [SDPBackend.FLASH_ATTENTION], "default": None}
TOKENS = 32768  # B*S for the prefill-shaped cases (within the 16K-64K range asked for)


def attn_flops(b: int, hq: int, sq: int, sk: int, hd: int, causal: bool, bwd: bool) -> int:
    fwd = 4 * b * hq * sq * sk * hd * (0.5 if causal and sq == sk else 1.0)
    return int(fwd * (3.5 if bwd else 1.0))


def _sdpa(q, k, v, causal: bool, gqa: bool, backend: str):
    if BACKENDS[backend] is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    with sdpa_kernel(BACKENDS[backend]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)


def chosen_backend(qkv, causal: bool, gqa: bool, backend: str) -> str | None:
    """Which SDPA kernel torch dispatches these inputs to (private API; best effort)."""
    q, k, v, _ = qkv
    try:
        if BACKENDS[backend] is None:
            idx = torch._fused_sdp_choice(q, k, v, is_causal=causal, enable_gqa=gqa)
        else:
            with sdpa_kernel(BACKENDS[backend]):
                idx = torch._fused_sdp_choice(q, k, v, is_causal=causal, enable_gqa=gqa)
        return SDPBackend(idx).name
    except Exception:  # noqa: BLE001 - diagnostic only
        return None


def run_attn(ctx: Ctx, p: dict) -> dict:
    b, hq, hkv, sq, sk, hd = p["b"], p["hq"], p["hkv"], p["sq"], p["sk"], p["hd"]
    bwd, causal, gqa, backend = p["bwd"], p["causal"], hq != hkv, p["backend"]
    set_bytes = 2 * (b * hq * sq * hd * (2 if bwd else 1) + 2 * b * hkv * sk * hd)
    n_rot = rotation_count(set_bytes, ctx.l2_bytes)
    sets = []
    for _ in range(n_rot):
        q = randn((b, hq, sq, hd), "bf16", ctx.device).requires_grad_(bwd)
        k = randn((b, hkv, sk, hd), "bf16", ctx.device).requires_grad_(bwd)
        v = randn((b, hkv, sk, hd), "bf16", ctx.device).requires_grad_(bwd)
        go = randn((b, hq, sq, hd), "bf16", ctx.device) if bwd else None
        sets.append((q, k, v, go))

    def call(i):
        q, k, v, go = sets[i % n_rot]
        out = _sdpa(q, k, v, causal, gqa, backend)
        return torch.autograd.grad(out, (q, k, v), go) if bwd else out
    with torch.set_grad_enabled(bwd):
        timing, extra = measure(call, ctx.device, n_rot=n_rot, l2=ctx.l2_bytes)
    extra["tflops"] = p["flops"] / timing["median_s"] / 1e12
    extra["sdpa_backend_chosen"] = chosen_backend(sets[0], causal, gqa, backend)
    extra["kv_bytes_read_min"] = 2 * b * hkv * sk * hd * 2
    if "decode" in p["tags"] and ctx.is_cuda:   # which kernels (split-KV or not, combine) and their times
        from models import kernel_summary
        with torch.set_grad_enabled(False):
            extra.update(kernel_summary(call, ctx.device, top=6))
    return result(timing, extra)


def attn_case(b, hq, hkv, sq, sk, hd, causal, bwd, backend="flash", tag="prefill") -> Case:
    p = {"b": b, "hq": hq, "hkv": hkv, "sq": sq, "sk": sk, "hd": hd, "causal": causal, "bwd": bwd,
         "gqa": hq != hkv, "backend": backend, "dtype": "bf16", "tags": [tag],
         "pass": "fwd+bwd" if bwd else "fwd",
         "flops": attn_flops(b, hq, sq, sk, hd, causal, bwd),
         "flop_convention": "fwd 4*B*Hq*Sq*Sk*hd (x0.5 causal square); fwd+bwd 3.5x fwd"}
    heads = f"h{hq}" if hq == hkv else f"h{hq}kv{hkv}"
    mask = "causal" if causal else "full"
    cid = f"attention/{tag}/{backend}/{p['pass']}/{mask}/b{b}_s{sq}_k{sk}_{heads}_d{hd}"
    est = 0.3 + 12 * p["flops"] / (3e14 if bwd else 4.5e14) + 12 * p["b"] * hkv * sk * hd * 4 / 3e12
    return Case(cid, "attention", p, lambda ctx: run_attn(ctx, p), est)


def _prefill(seqs, hq=32, hkv=8, hd=128, causal=True, passes=(False, True), backend="flash",
             tokens=TOKENS) -> list[Case]:
    return [attn_case(max(1, tokens // s), hq, hkv, s, s, hd, causal, bwd, backend)
            for s in seqs for bwd in passes]


def _decode(batches, ctxs, backend="flash") -> list[Case]:
    return [attn_case(b, 32, 8, 1, c, 128, False, False, backend, "decode") for b in batches for c in ctxs]


def _smoke() -> list[Case]:
    return (_prefill([32], hq=4, hkv=2, hd=16, tokens=64) + _prefill([32], hq=4, hkv=4, hd=16, causal=False,
                                                                     passes=(True,), tokens=64)
            + [attn_case(2, 4, 2, 1, 64, 16, False, False, "flash", "decode")])


def _quick() -> list[Case]:
    return (_prefill([2048, 8192]) + _prefill([4096], hkv=32, passes=(True,))
            + _prefill([4096], passes=(True,), backend="default")
            + _decode([1], [8192]) + _decode([32], [2048, 8192]))


def _full() -> list[Case]:
    return (_prefill([512, 1024, 2048, 4096, 8192, 16384, 32768])
            + _prefill([2048, 8192], causal=False) + _prefill([2048, 8192], hkv=32)
            + _prefill([2048, 8192], hd=64) + _prefill([2048, 8192], hq=64)  # 70B heads: 64/8
            + _prefill([1024, 4096], backend="default")
            + _decode([1, 8, 32, 64], [512, 2048, 8192, 32768])
            + _decode([1, 32], [8192], backend="default")
            # batch sweep: where FA2's per-query-head blocks stop sharing a GQA group's K/V in L2,
            # and the cuDNN kernel the eager and graphed decode steps really use
            + _decode([2, 4, 12, 16, 24, 48], [8192])
            + _decode([2, 4, 8, 16, 64], [8192], backend="default")
            + _decode([8, 64], [2048, 32768], backend="default")
            # cuDNN at head dim 64 (the 1B model's attention): exposes the softmax cost per FLOP
            + _prefill([1024, 4096], hd=64, backend="default"))


def groups(suite: str) -> list[Group]:
    cases = {"smoke": _smoke, "quick": _quick, "full": _full}[suite]()
    return [Group("attention/prefill", [c for c in cases if "prefill" in c.params["tags"]]),
            Group("attention/decode", [c for c in cases if "decode" in c.params["tags"]])]
