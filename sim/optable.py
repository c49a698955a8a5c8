"""Column view of an op list: numpy arrays the timing functions work on at once.

An estimate times tens of ops; doing it column-wise (one numpy expression per
mechanism) keeps a whole Llama 3 70B step estimate in the tens of microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.ops import (DTYPE_BYTES, AttentionShape, CollectiveShape, GemmShape, Op, RowShape, StreamShape,
                         StridedShape)

KINDS = ("matmul", "attention", "elementwise", "norm", "softmax", "cast",
         "embedding", "optimizer", "collective", "memcpy", "reduction", "copy_engine", "strided")
PHASES = ("fwd", "bwd", "optimizer")
DTYPES = tuple(DTYPE_BYTES)

# The shape record each kind carries (model/ops.py); kinds not listed take a StreamShape (or none).
SHAPE_OF_KIND: dict[str, type] = {"matmul": GemmShape, "attention": AttentionShape,
                                  "collective": CollectiveShape, "strided": StridedShape}
_OTHER_SHAPES = (StreamShape, RowShape, type(None))


@dataclass(frozen=True, slots=True)
class GemmColumns:
    """GEMM shapes as columns: C[M,N] = A[M,K] B[K,N] x batch (1 in rows that are not GEMMs)."""

    M: np.ndarray
    N: np.ndarray
    K: np.ndarray
    batch: np.ndarray

    def __len__(self) -> int:
        return len(self.M)

    def take(self, idx: np.ndarray) -> "GemmColumns":
        return GemmColumns(*(getattr(self, f)[idx] for f in self.__slots__))

    @classmethod
    def of(cls, shapes: list[GemmShape | None]) -> "GemmColumns":
        rows = [(s.M, s.N, s.K, s.batch) if s is not None else (1, 1, 1, 1) for s in shapes]
        a = np.array(rows, dtype=float).reshape(len(rows), 4)
        return cls(a[:, 0], a[:, 1], a[:, 2], a[:, 3])


@dataclass(frozen=True, slots=True)
class AttnColumns:
    """Attention shapes as columns (model/ops.AttentionShape; causal as 0/1; 0 and window 1 in
    rows that are not attention)."""

    B: np.ndarray
    Hq: np.ndarray
    Hkv: np.ndarray
    Sq: np.ndarray
    Skv: np.ndarray
    Dqk: np.ndarray
    Dv: np.ndarray
    causal: np.ndarray
    window: np.ndarray

    def __len__(self) -> int:
        return len(self.B)

    def take(self, idx: np.ndarray) -> "AttnColumns":
        return AttnColumns(*(getattr(self, f)[idx] for f in self.__slots__))

    @classmethod
    def of(cls, shapes: list[AttentionShape | None]) -> "AttnColumns":
        rows = [(s.B, s.Hq, s.Hkv, s.Sq, s.Skv, s.Dqk, s.Dv, int(s.causal), s.window_frac) if s is not None
                else (0, 0, 0, 0, 0, 0, 0, 0, 1.0) for s in shapes]
        a = np.array(rows, dtype=float).reshape(len(rows), 9)
        return cls(*(a[:, i] for i in range(9)))


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
    gemm: GemmColumns       # matmul shapes (1 elsewhere)
    attn: AttnColumns       # attention shapes (0 elsewhere; window fraction 1)
    block_starts: np.ndarray  # first op of each run of consecutive ops with equal count
    align_bytes: np.ndarray   # matmul: largest power of two (<= 16) dividing N and K in bytes
    rows: np.ndarray          # row softmax (RowShape, one kernel): rows; 0 elsewhere
    cols: np.ndarray          # row softmax: columns; 0 elsewhere
    strided_elems: np.ndarray  # kind strided: elements; 0 elsewhere
    strided_class: np.ndarray  # kind strided: class (model/ops_common); 0 elsewhere

    def mask(self, kind: str) -> np.ndarray:
        return self.kind == KINDS.index(kind)


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


def leading_dim_alignment(g: GemmColumns, dtype: np.ndarray) -> np.ndarray:
    """Bytes (power of two, at most 16) to which both leading dimensions of each GEMM
    (N and K in the F.linear layout) are aligned. Computed in half-byte units so fp4's
    0.5-byte elements stay integers: the lowest set bit of n is n & -n."""
    elem2 = (np.array([DTYPE_BYTES[d] for d in DTYPES]) * 2)[dtype]
    half_n, half_k = (np.rint(x * elem2).astype(np.int64) for x in (g.N, g.K))
    low = np.minimum(half_n & -half_n, half_k & -half_k)
    return np.minimum(low / 2.0, 16.0)


def check_op(op: Op) -> None:
    """Raise ValueError naming an op with an unknown kind/phase/dtype or a shape record that is not
    its kind's (model/ops.py)."""
    if op.kind not in KINDS or op.phase not in PHASES or op.dtype not in DTYPES:
        raise ValueError(f"op {op.name!r}: unknown kind/phase/dtype ({op.kind}, {op.phase}, {op.dtype})")
    want = SHAPE_OF_KIND.get(op.kind)
    if not isinstance(op.shape, want or _OTHER_SHAPES):
        need = want.__name__ if want else "a StreamShape, RowShape or None"
        raise ValueError(f"op {op.name!r}: kind {op.kind} needs shape {need}, got {type(op.shape).__name__}")


def _field(ops: tuple[Op, ...], shape: type, name: str) -> np.ndarray:
    return np.array([getattr(o.shape, name) if isinstance(o.shape, shape) else 0 for o in ops], dtype=float)


def build_table(ops: tuple[Op, ...]) -> OpTable:
    """Columns of ``ops`` (the one place shape records become arrays); raises ValueError naming
    an op with an unknown kind/phase/dtype or the wrong shape record (check_op)."""
    for op in ops:
        check_op(op)
    count = np.array([o.count for o in ops], dtype=float)
    dtype = np.array([DTYPES.index(o.dtype) for o in ops], dtype=np.int64)
    phase = np.array([PHASES.index(o.phase) for o in ops], dtype=np.int64)
    gemm = GemmColumns.of([o.shape_as(GemmShape) if o.kind == "matmul" else None for o in ops])
    row = [o.shape_as(RowShape) if _is_row_softmax(o) else None for o in ops]
    return OpTable(
        ops=ops,
        kind=np.array([KINDS.index(o.kind) for o in ops], dtype=np.int64),
        phase=phase,
        dtype=dtype,
        flops=np.array([o.flops for o in ops], dtype=float),
        bytes=np.array([o.bytes_read + o.bytes_written for o in ops], dtype=float),
        bytes_written=np.array([o.bytes_written for o in ops], dtype=float),
        count=count,
        kernels=np.array([o.kernels for o in ops], dtype=float),
        gemm=gemm,
        attn=AttnColumns.of([o.shape_as(AttentionShape) if o.kind == "attention" else None for o in ops]),
        block_starts=block_starts(count, phase),
        align_bytes=leading_dim_alignment(gemm, dtype),
        rows=np.array([r.rows if r else 0 for r in row], dtype=float),
        cols=np.array([r.cols if r else 0 for r in row], dtype=float),
        strided_elems=_field(ops, StridedShape, "elements"),
        strided_class=_field(ops, StridedShape, "strided_class"),
    )


def _is_row_softmax(op: Op) -> bool:
    """A softmax op that names its (rows, cols): one row-softmax kernel (sim/rowkernels.py)."""
    return op.kind == "softmax" and isinstance(op.shape, RowShape) and op.kernels == 1
