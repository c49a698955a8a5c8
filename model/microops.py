"""Single-op constructors: the units validation compares with microbenchmarks.

Each returns one Op whose FLOPs and bytes follow the same conventions as the
workload builders (each input read once, each output written once).
"""

from __future__ import annotations

from .ops import DTYPE_BYTES, Op


def gemm(m: int, n: int, k: int, dtype: str = "bf16", batch: int = 1,
         out_dtype: str | None = None, name: str = "gemm") -> Op:
    """C[M,N] = A[M,K] @ B[K,N] (x batch): 2*M*N*K*batch FLOP;
    bytes = (M*K + K*N) * in + M*N * out per batch."""
    _positive(m=m, n=n, k=k, batch=batch)
    b_in = DTYPE_BYTES[dtype]
    b_out = DTYPE_BYTES[out_dtype or ("bf16" if dtype in ("fp8", "fp4") else dtype)]
    return Op(name, "matmul", "fwd", 2.0 * m * n * k * batch,
              (m * k + k * n) * b_in * batch, m * n * b_out * batch, dtype, (m, n, k, batch))


def attention(b: int, hq: int, hkv: int, sq: int, skv: int, d: int, causal: bool,
              phase: str = "fwd", dtype: str = "bf16", name: str = "attention") -> Op:
    """Flash attention. Forward FLOP = 4*B*Hq*Sq*Skv*D (QK^T and PV), times the
    fraction of the score matrix a causal kernel computes: 1 - (Sq-1)/(2*Skv) when
    Sq == Skv (about half); backward = 2.5x forward (five GEMMs vs two).
    Bytes: Q, O (and dO, dQ in bwd) per query head; K, V (dK, dV) per KV head."""
    _positive(b=b, hq=hq, hkv=hkv, sq=sq, skv=skv, d=d)
    if hq % hkv:
        raise ValueError(f"hq={hq} must be a multiple of hkv={hkv}")
    frac = 1.0 - (sq - 1) / (2.0 * skv) if causal and sq == skv else 1.0
    fwd = 4.0 * b * hq * sq * skv * d * frac
    e = DTYPE_BYTES[dtype]
    q_o = b * hq * sq * d * e
    kv = 2 * b * hkv * skv * d * e
    if phase == "fwd":
        return Op(name, "attention", "fwd", fwd, q_o + kv, q_o, dtype, (b, hq, hkv, sq, skv, d, d, int(causal)))
    return Op(name, "attention", "bwd", 2.5 * fwd, 3 * q_o + kv, q_o + kv, dtype,
              (b, hq, hkv, sq, skv, d, d, int(causal)))


def memory_kernel(bytes_read: float, bytes_written: float, flops: float = 0.0,
                  kind: str = "elementwise", name: str = "memory", kernels: int = 1) -> Op:
    """A memory-bound kernel (copy, elementwise, norm, reduction) by its traffic."""
    if bytes_read < 0 or bytes_written < 0 or bytes_read + bytes_written <= 0:
        raise ValueError(f"bytes_read={bytes_read}, bytes_written={bytes_written}: need non-negative, not both 0")
    numel = int(max(bytes_read, bytes_written))
    return Op(name, kind, "fwd", float(flops), float(bytes_read), float(bytes_written), "fp32",
              (numel,), 1, kernels)


def reduction(bytes_read: float, out_bytes: float = 4.0, name: str = "reduction") -> Op:
    """A whole-tensor reduction (x.sum()): reads every byte once, writes a scalar."""
    if bytes_read <= 0:
        raise ValueError(f"bytes_read must be positive, got {bytes_read}")
    return Op(name, "reduction", "fwd", bytes_read / 4.0, float(bytes_read), float(out_bytes), "fp32",
              (int(bytes_read),))


def _positive(**sizes: int) -> None:
    for field, v in sizes.items():
        if not isinstance(v, int) or v <= 0:
            raise ValueError(f"{field} must be a positive integer, got {v!r}")
