"""Single-op constructors: the units validation compares with microbenchmarks.

Each returns one Op whose FLOPs and bytes follow the same conventions as the
workload builders (each input read once, each output written once).

The ``*_chain`` constructors return the ops of ONE eager elementwise chain (RMSNorm,
SwiGLU, RoPE, cross-entropy) exactly as validation/runners/cases_elementwise.py runs it,
built by the very functions the workload builders use (model/chains.py): a microbenchmark
of the chain validates the kernels and bytes every workload step counts. No autocast
(the runner calls the module on tensors of the given dtype). Time of a list of ops:
sum of ``estimate_op(op, gpu).time_s * op.count`` (GPU time, as a graph replay measures).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .chains import act, cross_entropy, norm, rope
from .config import TransformerConfig
from .ops import DTYPE_BYTES, AttentionShape, DType, GemmShape, Op, OpKind, Phase, RowShape, StreamShape
from .ops_common import Ctx


def gemm(m: int, n: int, k: int, dtype: DType = "bf16", batch: int = 1,
         out_dtype: DType | None = None, name: str = "gemm") -> Op:
    """C[M,N] = A[M,K] @ B[K,N] (x batch): 2*M*N*K*batch FLOP;
    bytes = (M*K + K*N) * in + M*N * out per batch."""
    _positive(m=m, n=n, k=k, batch=batch)
    b_in = _dtype_bytes(dtype)
    b_out = _dtype_bytes(out_dtype or ("bf16" if dtype in ("fp8", "fp4") else dtype))
    return Op(name, "matmul", "fwd", 2.0 * m * n * k * batch,
              (m * k + k * n) * b_in * batch, m * n * b_out * batch, dtype, GemmShape(m, n, k, batch))


def attention(b: int, hq: int, hkv: int, sq: int, skv: int, d: int, causal: bool,
              phase: Phase = "fwd", dtype: DType = "bf16", name: str = "attention") -> Op:
    """Flash attention. Forward FLOP = 4*B*Hq*Sq*Skv*D (QK^T and PV), times the
    fraction of the score matrix a causal kernel computes: 1 - (Sq-1)/(2*Skv) when
    Sq == Skv (about half); backward = 2.5x forward (five GEMMs vs two).
    Bytes: Q, O (and dO, dQ in bwd) per query head; K, V (dK, dV) per KV head."""
    _positive(b=b, hq=hq, hkv=hkv, sq=sq, skv=skv, d=d)
    if hq % hkv:
        raise ValueError(f"hq={hq} must be a multiple of hkv={hkv}")
    frac = 1.0 - (sq - 1) / (2.0 * skv) if causal and sq == skv else 1.0
    fwd = 4.0 * b * hq * sq * skv * d * frac
    e = _dtype_bytes(dtype)
    q_o = b * hq * sq * d * e
    kv = 2 * b * hkv * skv * d * e
    if phase == "fwd":
        return Op(name, "attention", "fwd", fwd, q_o + kv, q_o, dtype, AttentionShape(b, hq, hkv, sq, skv, d, d, causal))
    return Op(name, "attention", "bwd", 2.5 * fwd, 3 * q_o + kv, q_o + kv, dtype,
              AttentionShape(b, hq, hkv, sq, skv, d, d, causal))


def memory_kernel(bytes_read: float, bytes_written: float, flops: float = 0.0,
                  kind: OpKind = "elementwise", name: str = "memory", kernels: int = 1) -> Op:
    """A memory-bound kernel (copy, elementwise, norm, reduction) by its traffic."""
    for field, v in (("bytes_read", bytes_read), ("bytes_written", bytes_written), ("flops", flops)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{field} must be a number of bytes (flops: FLOP), got {v!r}")
    if not (0 <= bytes_read < math.inf and 0 <= bytes_written < math.inf and bytes_read + bytes_written > 0):
        raise ValueError(f"bytes_read={bytes_read}, bytes_written={bytes_written}: need finite, non-negative, not both 0")
    if not 0 <= flops < math.inf:
        raise ValueError(f"flops must be a finite number >= 0, got {flops!r}")
    numel = int(max(bytes_read, bytes_written))
    return Op(name, kind, "fwd", float(flops), float(bytes_read), float(bytes_written), "fp32",
              StreamShape(numel), 1, kernels)


def reduction(bytes_read: float, out_bytes: float = 4.0, name: str = "reduction") -> Op:
    """A whole-tensor reduction (x.sum()): reads every byte once, writes a scalar."""
    if bytes_read <= 0:
        raise ValueError(f"bytes_read must be positive, got {bytes_read}")
    return Op(name, "reduction", "fwd", bytes_read / 4.0, float(bytes_read), float(out_bytes), "fp32",
              StreamShape(int(bytes_read)))


def _dtype_bytes(dtype: DType) -> float:
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}")
    return DTYPE_BYTES[dtype]


def _positive(**sizes: int) -> None:
    for field, v in sizes.items():
        if not isinstance(v, int) or v <= 0:
            raise ValueError(f"{field} must be a positive integer, got {v!r}")


# ---- eager chains (model/chains.py) as one microbenchmark runs them ----

def _chain_ctx(act_dtype: DType, resid_dtype: DType | None = None, weight_dtype: DType | None = None,
               train: bool = False, fused: Iterable[str] = (), mlp: str = "swiglu") -> Ctx:
    """A one-instance step context (B = S = 1, one micro-batch, no autocast, no parallelism):
    the chain builders then count exactly one chain over the tensors given to them."""
    cfg = TransformerConfig(name="microop", n_layers=1, d_model=64, n_heads=1, ffn=64, vocab=64, mlp=mlp)
    a = DTYPE_BYTES[act_dtype]
    r = DTYPE_BYTES[resid_dtype or act_dtype]
    return Ctx(cfg=cfg, B=1, S=1, Skv=1, act=a, resid=r, gemm=act_dtype, gin=r, wb=a,
               pw=DTYPE_BYTES[weight_dtype or act_dtype], mb=1, train=train, autocast=False,
               fused=frozenset(fused))


def rmsnorm_chain(t: int, d: int, dtype: DType = "fp32", backward: bool = False, fused: bool = False,
                  weight_dtype: DType | None = None) -> list[Op]:
    """llama_ref.RMSNorm (HF LlamaRMSNorm) on x[t, d] of ``dtype`` with a weight of
    ``weight_dtype`` (default: the same; fp32 module in amp training, bf16 model in inference).
    Eager fwd: [x.float()], pow, mean, +eps, rsqrt, mul, [.to(dtype)], *weight (6 kernels in
    fp32, 8 in bf16). ``backward``: + autograd of the chain for dx and dweight with an
    incoming grad of ``dtype`` (one consumer, no residual skip path). ``fused``: one kernel
    each way (the model's "norm" fusion group)."""
    _positive(t=t, d=d)
    c = _chain_ctx(dtype, weight_dtype=weight_dtype, train=backward, fused={"norm"} if fused else ())
    pr = norm(c, "norm", t, d, 1, 1, resid_in=False, stream=True)
    return pr.fwd + pr.bwd


def swiglu_chain(t: int, ffn: int, dtype: DType = "bf16", backward: bool = False, fused: bool = False) -> list[Op]:
    """F.silu(gate) * up on [t, ffn] tensors of ``dtype``: silu and mul (2 kernels); backward
    2 muls + silu_backward. ``fused``: one kernel each way (the "act" fusion group)."""
    _positive(t=t, ffn=ffn)
    c = _chain_ctx(dtype, train=backward, fused={"act"} if fused else ())
    pr = act(c, "swiglu", float(t * ffn), 1)
    return pr.fwd + pr.bwd


def rope_chain(b: int, s: int, hq: int, hkv: int, hd: int, table_dtype: str = "fp32", dtype: DType = "bf16",
               backward: bool = False, fused: bool = False) -> list[Op]:
    """llama_ref.apply_rope on q[b, hq, s, hd] and k[b, hkv, s, hd] of ``dtype`` with cos/sin
    tables [s, hd] of ``table_dtype``: per tensor x*cos, neg, cat, rot*sin, add (5 kernels;
    fp32 tables promote the products and the output to fp32). ``fused``: one kernel (the
    "rope" fusion group)."""
    _positive(b=b, s=s, hq=hq, hkv=hkv, hd=hd)
    c = _chain_ctx(dtype, train=backward, fused={"rope"} if fused else ())
    pr = rope(c, "rope", float(b * s * hq * hd), float(b * s * hkv * hd), float(s * hd), 1,
              table_bytes=DTYPE_BYTES[table_dtype], views=False)   # the runner's q, k are contiguous
    return pr.fwd + pr.bwd


def cross_entropy_chain(t: int, vocab: int, logits_dtype: DType = "fp32", backward: bool = False,
                        fused: bool = False) -> list[Op]:
    """F.cross_entropy(logits[t, vocab], targets[t]) (mean): [.float() cast of non-fp32 logits],
    log_softmax + nll gather; ``backward``: + the seed fill, nll grad (zero-fill + scatter),
    log_softmax backward [and the cast back]. ``fused``: one kernel each way."""
    _positive(t=t, vocab=vocab)
    c = _chain_ctx(logits_dtype, train=backward, fused={"cross_entropy"} if fused else ())
    pr = cross_entropy(c, t, vocab)
    return pr.fwd + (pr.bwd if backward else [])


# ---- single kernels of torch's row and pointwise families ----

ROW_NORMS = ("layer_norm", "rms_norm")
UNARY = ("silu", "gelu_tanh", "gelu", "relu")


def softmax(rows: int, cols: int, dtype: DType = "fp32", name: str = "softmax") -> Op:
    """torch.softmax(x[rows, cols], dim=-1) of ``dtype``: one row-softmax kernel (the one torch
    dispatches for the row length, sim/rowkernels.py); reads and writes rows x cols elements."""
    _positive(rows=rows, cols=cols)
    n, e = rows * cols, DTYPE_BYTES[dtype]
    return Op(name, "softmax", "fwd", 5.0 * n, float(n * e), float(n * e), dtype, RowShape(rows, cols))


def row_norm(rows: int, cols: int, dtype: DType = "fp32", norm: str = "layer_norm", name: str | None = None) -> Op:
    """One fused forward norm kernel over x[rows, cols] of ``dtype`` (F.layer_norm with weight and
    bias, F.rms_norm / nn.RMSNorm: torch's vectorized_layer_norm_kernel family, a row per block):
    reads x and the weights, writes y and the per-row statistics."""
    _positive(rows=rows, cols=cols)
    if norm not in ROW_NORMS:
        raise ValueError(f"norm must be one of {ROW_NORMS}, got {norm!r}")
    e, n = DTYPE_BYTES[dtype], rows * cols
    w = (2 if norm == "layer_norm" else 1) * cols * e
    return Op(name or norm, "norm", "fwd", 8.0 * n, float(n * e + w), float(n * e + 8 * rows), dtype, RowShape(rows, cols))


def unary(elems: int, dtype: DType = "bf16", fn: str = "silu", name: str | None = None) -> Op:
    """One contiguous unary pointwise kernel (F.silu, F.gelu(approximate="tanh"), ...) over
    ``elems`` elements of ``dtype``: vectorized_elementwise_kernel, one read and one write each."""
    _positive(elems=elems)
    if fn not in UNARY:
        raise ValueError(f"fn must be one of {UNARY}, got {fn!r}")
    e = DTYPE_BYTES[dtype]
    return Op(name or fn, "elementwise", "fwd", 8.0 * elems, float(elems * e), float(elems * e), dtype, StreamShape(elems))


def cast(elems: int, src: str, dst: str, name: str = "cast") -> list[Op]:
    """x.to(dst) of ``elems`` contiguous elements of ``src`` as the workloads build it
    (model/ops_common.cast: narrowing is a streaming copy, widening an unrolled element-rate kernel)."""
    from .ops_common import cast as cast_kernel
    from .ops_common import chain
    _positive(elems=elems)
    return chain(name, "elementwise", "fwd", [cast_kernel(elems, DTYPE_BYTES[src], DTYPE_BYTES[dst])], 1, elems)
