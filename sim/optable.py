"""Column view of an op list: numpy arrays the timing functions work on at once.

An estimate times tens of ops; doing it column-wise (one numpy expression per
mechanism) keeps a whole Llama 3 70B step estimate in the tens of microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.ops import DTYPE_BYTES, Op

KINDS = ("matmul", "attention", "elementwise", "norm", "softmax", "cast",
         "embedding", "optimizer", "collective", "memcpy", "reduction", "copy_engine", "strided")
PHASES = ("fwd", "bwd", "optimizer")
DTYPES = tuple(DTYPE_BYTES)


@dataclass(frozen=True, eq=False)
class OpTable:
    """Per-op columns (per instance unless named otherwise)."""

    ops: tuple[Op, ...]
    kind: np.ndarray        # index into KINDS
    phase: np.ndarray       # index into PHASES
    dtype: np.ndarray       # index into DTYPES
    flops: np.ndarray
    bytes: np.ndarray       # read + written
    bytes_written: np.ndarray
    count: np.ndarray
    kernels: np.ndarray
    mnkb: np.ndarray        # [n_ops, 4] matmul M, N, K, batch (1 elsewhere)
    attn: np.ndarray        # [n_ops, 9] attention B, Hq, Hkv, Sq, Skv, Dqk, Dv, causal (0 elsewhere),
                            # window fraction (sliding window's share of the pairs; 1 without one)
    block_starts: np.ndarray  # first op of each run of consecutive ops with equal count
    align_bytes: np.ndarray   # matmul: largest power of two (<= 16) dividing N and K in bytes
    rows_cols: np.ndarray     # [n_ops, 2] row softmax (kind softmax, shape (rows, cols)); 0 elsewhere
    strided: np.ndarray       # [n_ops, 2] kind strided: (elements, class); 0 elsewhere

    def mask(self, kind: str) -> np.ndarray:
        return self.kind == KINDS.index(kind)


def _padded(shape: tuple[int, ...], n: int, fill: int) -> list[int]:
    s = list(shape[:n])
    return s + [fill] * (n - len(s))


def block_starts(count: np.ndarray, phase: np.ndarray | None = None) -> np.ndarray:
    """Index of the first op of each repeated block: a maximal run of consecutive ops of one
    phase whose counts are multiples of the run's smallest count, which is how often the
    block repeats (a layer of L instances holding ops issued once or twice per layer: GQA's
    kv_proj at count 2L runs between q_proj and o_proj at count L in every layer, not in a
    separate run of 2L after all L q_projs). A new block starts where the phase changes, a
    count neither divides nor is divided by the run's repeat count, or an op issued once meets
    a repeated one."""
    n = len(count)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    phase = np.zeros(n) if phase is None else phase
    starts, rep = [0], float(count[0])
    for i in range(1, n):
        c = float(count[i])
        lo, hi = min(rep, c), max(rep, c)
        if phase[i] != phase[i - 1] or (lo <= 1 < hi) or lo < 1 or hi % lo:
            starts.append(i)
            rep = c
        else:
            rep = lo
    return np.array(starts, dtype=np.int64)


def leading_dim_alignment(mnkb: np.ndarray, dtype: np.ndarray) -> np.ndarray:
    """Bytes (power of two, at most 16) to which both leading dimensions of each GEMM
    (N and K in the F.linear layout) are aligned. Computed in half-byte units so fp4's
    0.5-byte elements stay integers: the lowest set bit of n is n & -n."""
    elem2 = (np.array([DTYPE_BYTES[d] for d in DTYPES]) * 2)[dtype]
    half_bytes = np.rint(mnkb[:, 1:3] * elem2[:, None]).astype(np.int64)
    low = np.min(half_bytes & -half_bytes, axis=1)
    return np.minimum(low / 2.0, 16.0)


def build_table(ops: tuple[Op, ...]) -> OpTable:
    """Columns of ``ops``; raises ValueError naming an op with an unknown kind/phase/dtype."""
    for op in ops:
        if op.kind not in KINDS or op.phase not in PHASES or op.dtype not in DTYPES:
            raise ValueError(f"op {op.name!r}: unknown kind/phase/dtype ({op.kind}, {op.phase}, {op.dtype})")
    is_mm = [op.kind == "matmul" for op in ops]
    is_at = [op.kind == "attention" for op in ops]
    count = np.array([o.count for o in ops], dtype=float)
    dtype = np.array([DTYPES.index(o.dtype) for o in ops], dtype=np.int64)
    mnkb = np.array([_padded(o.shape, 4, 1) if m else [1, 1, 1, 1] for o, m in zip(ops, is_mm)],
                    dtype=float).reshape(len(ops), 4)
    return OpTable(
        ops=ops,
        kind=np.array([KINDS.index(o.kind) for o in ops], dtype=np.int64),
        phase=np.array([PHASES.index(o.phase) for o in ops], dtype=np.int64),
        dtype=dtype,
        flops=np.array([o.flops for o in ops], dtype=float),
        bytes=np.array([o.bytes_read + o.bytes_written for o in ops], dtype=float),
        bytes_written=np.array([o.bytes_written for o in ops], dtype=float),
        count=count,
        kernels=np.array([o.kernels for o in ops], dtype=float),
        mnkb=mnkb,
        attn=np.array([_padded(o.shape, 8, 0) + [o.shape[8] if len(o.shape) > 8 else 1.0] if a else [0] * 8 + [1.0]
                       for o, a in zip(ops, is_at)], dtype=float).reshape(len(ops), 9),
        block_starts=block_starts(count, np.array([PHASES.index(o.phase) for o in ops])),
        align_bytes=leading_dim_alignment(mnkb, dtype),
        strided=np.array([o.shape if o.kind == "strided" else (0, 0) for o in ops], dtype=float).reshape(len(ops), 2),
        rows_cols=np.array([o.shape if _is_row_softmax(o) else (0, 0) for o in ops], dtype=float).reshape(len(ops), 2),
    )


def _is_row_softmax(op: Op) -> bool:
    """A softmax op that names its (rows, cols): one row-softmax kernel (sim/rowkernels.py)."""
    return op.kind == "softmax" and len(op.shape) == 2 and op.kernels == 1
