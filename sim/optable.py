"""Column view of an op list: numpy arrays the timing functions work on at once.

An estimate times tens of ops; doing it column-wise (one numpy expression per
mechanism) keeps a whole Llama 3 70B step estimate in the tens of microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

from typing import Any

import numpy as np

from ..model.ops import (DTYPE_BYTES, AttentionShape, CollectiveShape, GemmShape, Op, RowShape, StreamShape,
                         StridedShape)

KINDS = ("matmul", "attention", "elementwise", "norm", "softmax", "cast",
         "embedding", "optimizer", "collective", "memcpy", "reduction", "copy_engine", "strided", "ssm_scan")
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
    cs = [float(c) for c in count.tolist()]   # Python floats: indexing numpy scalars is slower
    ph = [0] * n if phase is None else phase.tolist()
    starts, rep, prev = [0], cs[0], ph[0]
    for i, c, p in zip(range(1, n), cs[1:], ph[1:]):
        lo, hi = (c, rep) if c < rep else (rep, c)
        if p != prev or lo < 1 or (lo <= 1 < hi) or hi % lo:
            starts.append(i)
            rep = c
        else:
            rep = lo
        prev = p
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


_KIND_AT = {k: i for i, k in enumerate(KINDS)}
_PHASE_AT = {k: i for i, k in enumerate(PHASES)}
_DTYPE_AT = {k: i for i, k in enumerate(DTYPES)}
_NO_GEMM, _NO_ATTN = (1, 1, 1, 1), (0, 0, 0, 0, 0, 0, 0, 0, 1.0)
# Column order of _row: kind, phase, dtype, flops, bytes, bytes_written, count, kernels, rows, cols,
# strided elements, strided class, GEMM M N K batch, attention B Hq Hkv Sq Skv Dqk Dv causal window.
_GEMM_AT, _ATTN_AT = 12, 16


def _row(o: Op) -> tuple:
    """One op's numbers in _row's column order (shapes of other kinds: the neutral values)."""
    s, kind = o.shape, o.kind
    g = (s.M, s.N, s.K, s.batch) if kind == "matmul" and isinstance(s, GemmShape) else _NO_GEMM
    a = (s.B, s.Hq, s.Hkv, s.Sq, s.Skv, s.Dqk, s.Dv, int(s.causal), s.window_frac) \
        if kind == "attention" and isinstance(s, AttentionShape) else _NO_ATTN
    r = (s.rows, s.cols) if isinstance(s, RowShape) and _is_row_softmax(o) else (0, 0)
    st = (s.elements, s.strided_class) if isinstance(s, StridedShape) else (0, 0)
    return (_KIND_AT[kind], _PHASE_AT[o.phase], _DTYPE_AT[o.dtype], o.flops, o.bytes_read + o.bytes_written,
            o.bytes_written, o.count, o.kernels, *r, *st, *g, *a)


# (kind, shape record type) -> which shape columns an op of that kind and record fills (_rows):
# every pair check_op accepts, by exact type (a subclass of a record takes check_op and _row)
_GEMM, _ATTN, _ROWS, _STRIDED, _PLAIN = range(5)
_FILL: dict[tuple[str, type], int] = {}
for _k in KINDS:
    for _t in (GemmShape, AttentionShape, CollectiveShape, StreamShape, StridedShape, RowShape, type(None)):
        if issubclass(_t, SHAPE_OF_KIND.get(_k) or _OTHER_SHAPES):
            _FILL[(_k, _t)] = (_GEMM if _k == "matmul" else _ATTN if _k == "attention" else
                               _STRIDED if _t is StridedShape else _ROWS if _t is RowShape else _PLAIN)
_HEAD = 8   # kind, phase, dtype, flops, bytes, bytes_written, count, kernels


def _columns(ops: tuple[Op, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """_row's columns of ``ops`` after check_op, in one loop: (the _HEAD columns [8, n], rows and cols
    [2, n], strided elements and class [2, n], GEMM M N K batch [4, n], attention [9, n]). The shape
    columns are filled only for the ops whose (kind, record type) fills them (_FILL), the rest keep
    _row's neutral values; an op _FILL does not know goes through check_op (which raises for a bad
    one) and _row."""
    n = len(ops)
    heads: list[tuple] = []
    gi: list[int] = []
    gv: list[tuple] = []
    ai: list[int] = []
    av: list[tuple] = []
    ri: list[int] = []
    rv: list[tuple] = []
    si: list[int] = []
    sv: list[tuple] = []
    fill, kind_at, phase_at, dtype_at = _FILL, _KIND_AT, _PHASE_AT, _DTYPE_AT
    for i, o in enumerate(ops):
        s: Any = o.shape   # its record type is the _FILL key: the branch below knows its fields
        kind = o.kind
        f = fill.get((kind, type(s)))
        ph, dt = phase_at.get(o.phase), dtype_at.get(o.dtype)
        if f is None or ph is None or dt is None:
            check_op(o)
            r = _row(o)
            heads.append(r[:_HEAD])
            for idx, vals, part_of_row in ((ri, rv, r[8:10]), (si, sv, r[10:12]), (gi, gv, r[_GEMM_AT:_GEMM_AT + 4]),
                                           (ai, av, r[_ATTN_AT:])):
                idx.append(i)
                vals.append(part_of_row)
            continue
        heads.append((kind_at[kind], ph, dt, o.flops, o.bytes_read + o.bytes_written, o.bytes_written, o.count,
                      o.kernels))
        if f == _PLAIN:
            continue
        if f == _GEMM:
            gi.append(i)
            gv.append((s.M, s.N, s.K, s.batch))
        elif f == _ATTN:
            ai.append(i)
            av.append((s.B, s.Hq, s.Hkv, s.Sq, s.Skv, s.Dqk, s.Dv, int(s.causal), s.window_frac))
        elif f == _STRIDED:
            si.append(i)
            sv.append((s.elements, s.strided_class))
        elif kind == "softmax" and o.kernels == 1:   # a RowShape names (rows, cols) of a row softmax only
            ri.append(i)
            rv.append((s.rows, s.cols))
    head = np.fromiter(chain.from_iterable(heads), dtype=float, count=n * _HEAD).reshape(n, _HEAD).T.copy()

    def part(idx: list[int], vals: list[tuple], neutral: tuple) -> np.ndarray:
        out = np.array(neutral, dtype=float)[:, None].repeat(n, axis=1)
        if idx:
            out[:, idx] = np.array(vals, dtype=float).reshape(len(idx), len(neutral)).T
        return out

    return head, part(ri, rv, _ZERO2), part(si, sv, _ZERO2), part(gi, gv, _NO_GEMM), part(ai, av, _NO_ATTN)


_ZERO2 = (0, 0)


def build_table(ops: tuple[Op, ...]) -> OpTable:
    """Columns of ``ops`` (the one place shape records become arrays); raises ValueError naming
    an op with an unknown kind/phase/dtype or the wrong shape record (check_op). One pass over
    the ops (_columns), each column a contiguous row of a float array."""
    a, rc, st, g, at = _columns(ops)
    kind, phase, dtype = (a[i].astype(np.int64) for i in range(3))
    gemm = GemmColumns(g[0], g[1], g[2], g[3])
    return OpTable(ops=ops, kind=kind, phase=phase, dtype=dtype, flops=a[3], bytes=a[4], bytes_written=a[5],
                   count=a[6], kernels=a[7], gemm=gemm, attn=AttnColumns(*(at[i] for i in range(9))),
                   block_starts=block_starts(a[6], phase), align_bytes=leading_dim_alignment(gemm, dtype),
                   rows=rc[0], cols=rc[1], strided_elems=st[0], strided_class=st[1])


def _is_row_softmax(op: Op) -> bool:
    """A softmax op that names its (rows, cols): one row-softmax kernel (sim/rowkernels.py)."""
    return op.kind == "softmax" and isinstance(op.shape, RowShape) and op.kernels == 1
