"""Elementwise, norm, softmax and cross-entropy cases as the eager stack runs them.

Every op runs exactly as llama_ref / eager PyTorch issues it (the HF RMSNorm is ~6
kernels; SwiGLU's silu and mul are 2; RoPE several), timed by the generic helper as
one unit. Shapes: T tokens x d (or ffn). "train" dtypes follow llama_ref's amp_bf16
precision (fp32 residual stream, bf16 linear outputs); "infer" the bf16 model.
bytes_min = each input read once + each output written once (the fused ideal).

Estimated durations on an H200 (~0.25 s per case; CE 16K x 128256 fp32 ~0.6 s):
  quick: 12 cases, ~4 s
  full: 45 cases, ~15 s
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from common import Case, Ctx, Group, randn, result
from llama_ref import RMSNorm, apply_rope
from models import kernel_summary
from timing import measure, rotation_count

ELT = {"fp32": 4, "bf16": 2}
KIND = {"rmsnorm_hf": "norm", "rms_norm_f": "norm", "softmax": "softmax", "cross_entropy": "cross_entropy"}


PROFILE_CALLS = 3   # calls per kernel profile: counts and total_us in extra.kernels cover all of them


def _run(ctx: Ctx, make, fn, set_bytes: int, grad: bool = False) -> dict:
    """Generic runner: make() -> one input set (tuple); fn(*set) -> output(s).

    After the timing (which it does not change), one profiler pass over PROFILE_CALLS calls
    records each kernel's name, count and total time (`extra.kernels`, models.kernel_summary):
    the per-kernel ground truth of the eager chains (validation/LOG.md, kernel classes)."""
    n_rot = rotation_count(set_bytes, ctx.l2_bytes)
    sets = [make() for _ in range(n_rot)]
    call = lambda i: fn(*sets[i % n_rot])  # noqa: E731
    with torch.set_grad_enabled(grad):
        timing, extra = measure(call, ctx.device, n_rot=n_rot, l2=ctx.l2_bytes)
        extra.update(kernel_summary(lambda i: [call(j) for j in range(PROFILE_CALLS)], ctx.device, name_chars=400))
    extra["profile_calls"] = PROFILE_CALLS
    return result(timing, extra)


# ---- bytes: (rotating set bytes, bytes_min = inputs read once + outputs written once) ----

def io_bytes(p: dict) -> tuple[int, int]:
    op = p["op"]
    if op in ("rmsnorm_hf", "rms_norm_f"):
        io = p["t"] * p["d"] * ELT[p["dtype"]]
        return (2 * io, 5 * io) if p["bwd"] else (io, 2 * io)  # bwd: x, dy in; fwd y + dx out
    if op == "swiglu_act":
        io = p["t"] * p["ffn"] * 2
        return 2 * io, 3 * io
    if op == "residual_add":
        io = p["t"] * p["d"] * ELT[p["dtype"]]
        return 2 * io, 3 * io
    if op == "rope":  # bf16 q,k in; out fp32 when the tables are fp32 (training promotes)
        qk = p["b"] * p["s"] * (p["hq"] + p["hkv"]) * p["hd"]
        return 2 * qk, qk * (2 + ELT[p["table_dtype"]])
    if op == "softmax":
        io = p["t"] * p["cols"] * ELT[p["dtype"]]
        return io, 2 * io
    if op == "cross_entropy":
        io = p["t"] * p["vocab"] * 4
        return io, io * (3 if p["bwd"] else 1)
    if op == "cast":
        n = p["rows"] * p["cols"]
        return n * ELT[p["src"]], n * (ELT[p["src"]] + ELT[p["dst"]])
    raise ValueError(f"unknown op {op!r}")


# ---- op builders: each returns (make, fn); make() -> one input set, fn(*set) -> output ----

def _rmsnorm(ctx, p):
    t, d, dt, bwd, dev = p["t"], p["d"], p["dtype"], p["bwd"], ctx.device
    mod = RMSNorm(d, 1e-5).to(dev)  # fp32 weight, as in amp training
    if dt == "bf16":
        mod = mod.to(torch.bfloat16)  # inference: bf16 model
    w = mod.weight
    fn = mod if p["op"] == "rmsnorm_hf" else (lambda x: F.rms_norm(x, (d,), w, 1e-5))

    def make():
        x = randn((t, d), dt, dev).requires_grad_(bwd)
        return (x, randn((t, d), dt, dev)) if bwd else (x,)
    if not bwd:
        return make, fn
    return make, (lambda x, go: torch.autograd.grad(fn(x), (x, w), go))  # dx and dweight, as in training


def _swiglu(ctx, p):
    t, f = p["t"], p["ffn"]
    make = lambda: (randn((t, f), "bf16", ctx.device), randn((t, f), "bf16", ctx.device))  # noqa: E731
    return make, (lambda g, u: F.silu(g) * u)


def _residual(ctx, p):
    t, d, dt = p["t"], p["d"], p["dtype"]
    make = lambda: (randn((t, d), dt, ctx.device), randn((t, d), dt, ctx.device))  # noqa: E731
    return make, (lambda x, y: x + y)


def _rope(ctx, p):
    b, s, hq, hkv, hd, dev = p["b"], p["s"], p["hq"], p["hkv"], p["hd"], ctx.device
    cos, sin = randn((s, hd), p["table_dtype"], dev), randn((s, hd), p["table_dtype"], dev)
    make = lambda: (randn((b, hq, s, hd), "bf16", dev), randn((b, hkv, s, hd), "bf16", dev))  # noqa: E731
    return make, (lambda q, k: apply_rope(q, k, cos, sin))


def _softmax(ctx, p):
    return (lambda: (randn((p["t"], p["cols"]), p["dtype"], ctx.device),)), (lambda x: F.softmax(x, dim=-1))


def _ce(ctx, p):
    t, v, bwd, dev = p["t"], p["vocab"], p["bwd"], ctx.device

    def make():
        return randn((t, v), "fp32", dev).requires_grad_(bwd), torch.randint(0, v, (t,), device=dev)

    def fwd_bwd(x, y):
        return torch.autograd.grad(F.cross_entropy(x, y), (x,))
    return make, (fwd_bwd if bwd else F.cross_entropy)


def _cast(ctx, p):
    tdt = torch.float32 if p["dst"] == "fp32" else torch.bfloat16
    return (lambda: (randn((p["rows"], p["cols"]), p["src"], ctx.device),)), (lambda x: x.to(tdt))


BUILD = {"rmsnorm_hf": _rmsnorm, "rms_norm_f": _rmsnorm, "swiglu_act": _swiglu, "residual_add": _residual,
         "rope": _rope, "softmax": _softmax, "cross_entropy": _ce, "cast": _cast}


def run_case(ctx: Ctx, p: dict) -> dict:
    make, fn = BUILD[p["op"]](ctx, p)
    return _run(ctx, make, fn, io_bytes(p)[0], p["bwd"])


def case(op: str, **p) -> Case:
    p = {"op": op, "bwd": p.pop("bwd", False), **p}
    p["bytes_min"] = io_bytes(p)[1]
    p["pass"] = "fwd+bwd" if p["bwd"] else "fwd"
    shape = "_".join(v if isinstance(v, str) else f"{k}{v}" for k, v in p.items()
                     if k not in ("op", "bwd", "bytes_min", "pass"))
    kind = KIND.get(op, "elementwise")
    return Case(f"{kind}/{op}/{p['pass']}/{shape}", kind, p, lambda ctx: run_case(ctx, p),
                0.25 + 15 * p["bytes_min"] / 3e12)


def _norms(ts, ds, dtypes=("fp32", "bf16")) -> list[Case]:
    return [case(op, t=t, d=d, dtype=dt) for op in ("rmsnorm_hf", "rms_norm_f")
            for dt in dtypes for t in ts for d in ds]


def _smoke() -> list[Case]:
    return (_norms([64], [32]) + [case("rmsnorm_hf", t=64, d=32, dtype="fp32", bwd=True),
                                  case("swiglu_act", t=64, ffn=96), case("residual_add", t=64, d=32, dtype="fp32"),
                                  case("rope", b=2, s=16, hq=4, hkv=2, hd=16, table_dtype="fp32"),
                                  case("softmax", t=64, cols=100, dtype="fp32"),
                                  case("cross_entropy", t=64, vocab=300), case("cross_entropy", t=64, vocab=300, bwd=True),
                                  case("cast", rows=64, cols=32, src="bf16", dst="fp32")])


def _quick() -> list[Case]:
    t, d = 8192, 4096
    return ([case("rmsnorm_hf", t=t, d=d, dtype="fp32"), case("rms_norm_f", t=t, d=d, dtype="fp32"),
             case("rmsnorm_hf", t=t, d=d, dtype="bf16"), case("rmsnorm_hf", t=t, d=d, dtype="fp32", bwd=True),
             case("swiglu_act", t=t, ffn=14336), case("residual_add", t=t, d=d, dtype="fp32"),
             case("rope", b=2, s=4096, hq=32, hkv=8, hd=128, table_dtype="fp32"),
             case("softmax", t=t, cols=4096, dtype="bf16"),
             case("cross_entropy", t=4096, vocab=128256), case("cross_entropy", t=4096, vocab=128256, bwd=True),
             case("cast", rows=t, cols=d, src="bf16", dst="fp32"), case("cast", rows=14336, cols=d, src="fp32", dst="bf16")])


def _full() -> list[Case]:
    ts, ds = [4096, 16384], [2048, 4096]
    return (_norms(ts, ds) + [case("rmsnorm_hf", t=t, d=4096, dtype="fp32", bwd=True) for t in ts]
            + [case("swiglu_act", t=t, ffn=f) for t in ts for f in (8192, 14336)]
            + [case("residual_add", t=t, d=4096, dtype=dt) for t in ts for dt in ("fp32", "bf16")]
            + [case("rope", b=b, s=4096, hq=32, hkv=8, hd=128, table_dtype=dt) for b in (1, 4) for dt in ("fp32", "bf16")]
            + [case("softmax", t=8192, cols=c, dtype=dt) for c, dt in ((4096, "bf16"), (32000, "fp32"))]
            # row-length sweep: how torch's softmax kernels scale with the row (persistent vs block kernels)
            + [case("softmax", t=8192, cols=c, dtype=dt) for c in (512, 1024, 2048, 8192, 16384)
               for dt in ("bf16", "fp32")]
            # the families in between: warp kernel sizes, Reg<2..9> and Smem (torch's SoftMax.cu dispatch)
            + [case("softmax", t=8192, cols=c, dtype=dt) for c in (256, 768, 1536, 3072, 4096, 6144, 12288)
               for dt in ("bf16", "fp32") if (c, dt) != (4096, "bf16")]
            + [case("cross_entropy", t=t, vocab=v, bwd=b) for t in (4096, 16384) for v in (32000, 128256)
               for b in (False, True)]
            + [case("cast", rows=t, cols=4096, src=s, dst=o) for t in ts for s, o in (("bf16", "fp32"), ("fp32", "bf16"))]
            + [case("cast", rows=14336, cols=4096, src="fp32", dst="bf16")])


def groups(suite: str) -> list[Group]:
    cases = {"smoke": _smoke, "quick": _quick, "full": _full}[suite]()
    out: dict[str, list[Case]] = {}
    for c in cases:
        out.setdefault(f"{c.kind}", []).append(c)
    return [Group(k, v) for k, v in out.items()]
