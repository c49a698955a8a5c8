"""Match a trace's kernels to mechsim's ops of the workload the user describes.

Both sides get a key (phase, group, shape):
  * predicted op: its phase; group by kind (matmul -> gemm, attention, optimizer, softmax,
    embedding, copy_engine -> memcpy, collective -> collective:<kind>, every other streaming
    kind -> memory); shape, for GEMMs, ({M, N}, K, batch): C = A[M,K] B[K,N] up to a transpose.
  * kernel: phase from the timeline; group from the rule table (families.py); shape from the
    "Input Dims" of the aten matmul op that launched it (record_shapes=True).
Ops sharing a key (q_proj and o_proj of a square model) form one row. Where some GEMM kernel
of a phase has no shape (CUDA-graph replay, record_shapes off), that phase's GEMMs are matched
as one row. Kernels of memcpy/memset/softmax/embedding groups with no such op in their phase
fold into the phase's memory row. Everything else that finds no key (unknown kernel names,
GEMM shapes the workload does not have) is listed as unmatched, never dropped.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np


from .timeline import PHASES, Timeline

KIND_GROUP = {"matmul": "gemm", "attention": "attention", "optimizer": "optimizer", "softmax": "softmax",
              "embedding": "embedding", "copy_engine": "memcpy"}
FOLD_TO_MEMORY = frozenset(("memcpy", "memset", "softmax", "embedding"))
COLLECTIVE_GROUP = {"sendrecv": "send_recv", "all_to_all": "send_recv"}   # NCCL runs all-to-all as send/recv
ANY_PHASE = "*"


@dataclass(frozen=True)
class Row:
    """One matched key: the ops predicted for it and the kernels measured (seconds per step)."""

    phase: str
    group: str
    shape: tuple | None
    ops: tuple[str, ...]
    category: str
    predicted_s: float
    measured_s: float
    predicted_kernels: float
    measured_kernels: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0 if self.measured_s > 0 else math.nan


@dataclass(frozen=True)
class Unmatched:
    name: str
    family: str
    phase: str
    shape: tuple | None
    measured_s: float          # per step
    kernels: float             # per step


@dataclass(frozen=True)
class Match:
    rows: tuple[Row, ...]
    unmatched: tuple[Unmatched, ...]
    steps: int
    gpu_s: float               # measured kernel seconds per step (all kernels in steps)
    matched_s: float

    @property
    def matched_fraction(self) -> float:
        return self.matched_s / self.gpu_s if self.gpu_s > 0 else 0.0


def gemm_key(m: int, n: int, k: int, batch: int = 1) -> tuple:
    return (tuple(sorted((int(m), int(n)))), int(k), int(batch))


def _prod(xs: tuple) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def dims_mnk(op_name: str, dims: tuple) -> tuple[int, int, int, int] | None:
    """(M, N, K, batch) of an aten matmul op from its Input Dims; None when they do not say."""
    d = [x for x in dims if isinstance(x, tuple) and x]
    try:
        if op_name in ("aten::mm", "aten::_scaled_mm") and len(d) >= 2:
            return int(d[0][0]), int(d[1][1]), int(d[0][1]), 1
        if op_name == "aten::addmm" and len(d) >= 3:
            return int(d[1][0]), int(d[2][1]), int(d[1][1]), 1
        if op_name == "aten::bmm" and len(d) >= 2:
            return int(d[0][1]), int(d[1][2]), int(d[0][2]), int(d[0][0])
        if op_name == "aten::baddbmm" and len(d) >= 3:
            return int(d[1][1]), int(d[2][2]), int(d[1][2]), int(d[1][0])
        if op_name == "aten::linear" and len(d) >= 2:
            return _prod(d[0][:-1]), int(d[1][0]), int(d[0][-1]), 1
        if op_name == "aten::matmul" and len(d) >= 2 and len(d[1]) == 2:
            return _prod(d[0][:-1]), int(d[1][1]), int(d[0][-1]), 1
    except (IndexError, TypeError, ValueError):
        return None
    return None


def dims_gemm_key(op_name: str, dims: tuple) -> tuple | None:
    mnk = dims_mnk(op_name, dims)
    return None if mnk is None else gemm_key(*mnk)


def op_key(op: Any, phase_override: str | None = None) -> tuple:
    """(phase, group, shape) of a model Op."""
    if op.kind == "collective":   # CollectiveShape(bytes, group size, op, group): model/comm.py
        name = op.shape.op if op.shape is not None else "all_reduce"
        return (ANY_PHASE, f"collective:{COLLECTIVE_GROUP.get(name, name)}", None)
    group = KIND_GROUP.get(op.kind, "memory")
    s = op.shape
    shape = gemm_key(s.M, s.N, s.K, s.batch) if group == "gemm" else None
    return (phase_override or op.phase, group, shape)


@dataclass
class _Acc:
    ops: list
    category: str
    predicted_s: float = 0.0
    measured_s: float = 0.0
    predicted_kernels: float = 0.0
    measured_kernels: float = 0.0


def predicted_keys(ops: tuple, estimates: tuple, shapeless: set) -> dict[tuple, _Acc]:
    """Predicted seconds per key; GEMMs of a phase in ``shapeless`` collapse to one key."""
    acc: dict[tuple, _Acc] = {}
    for op, est in zip(ops, estimates):
        k = op_key(op)
        if k[1] == "gemm" and k[0] in shapeless:
            k = (k[0], "gemm", None)
        a = acc.setdefault(k, _Acc([], _category(k[1])))
        if op.name not in a.ops:
            a.ops.append(op.name)
        a.predicted_s += est.time_s
        a.predicted_kernels += op.count * op.kernels
    return acc


def _category(group: str) -> str:
    if group in ("gemm", "attention"):
        return group
    return "communication" if group.startswith("collective:") else "memory"


def kernel_keys(tl: Timeline) -> list[tuple]:
    t = tl.trace
    out: list[tuple] = []
    for fam, ph, oi in zip(tl.family, tl.phase.tolist(), t.op_index.tolist()):
        if fam.group.startswith("collective:"):
            out.append((ANY_PHASE, fam.group, None))
            continue
        shape = dims_gemm_key(t.ops[oi].name, t.ops[oi].dims) if fam.group == "gemm" and oi >= 0 else None
        out.append((PHASES[ph], fam.group, shape))
    return out


def _resolve(k: tuple, fam: Any, acc: dict) -> tuple | None:
    if fam.name == "unknown":
        return None
    if k in acc:
        return k
    if k[1] == "gemm" and (k[0], "gemm", None) in acc:
        return (k[0], "gemm", None)
    if k[1] in FOLD_TO_MEMORY and (k[0], "memory", None) in acc:
        return (k[0], "memory", None)
    return None


def match(tl: Timeline, ops: tuple, estimates: tuple) -> Match:
    """Kernels of the timeline's steps against the ops (model Op records) and their estimates."""
    t = tl.trace
    in_step = tl.step >= 0
    n_steps = max(len(tl.steps), 1)
    keys = kernel_keys(tl)
    shapeless = {k[0] for k, s in zip(keys, in_step) if s and k[1] == "gemm" and k[2] is None}
    keys = [(k[0], "gemm", None) if k[1] == "gemm" and k[0] in shapeless else k for k in keys]
    acc = predicted_keys(ops, estimates, shapeless)
    lost: dict[tuple, list] = {}
    dur = t.dur_us * 1e-6 / n_steps
    for i in np.flatnonzero(in_step).tolist():
        k, fam = keys[i], tl.family[i]
        r = _resolve(k, fam, acc)
        if r is None:
            u = lost.setdefault((t.names[t.name_id[i]], fam.name, k[0], k[2]), [0.0, 0])
            u[0] += dur[i]
            u[1] += 1
            continue
        acc[r].measured_s += dur[i]
        acc[r].measured_kernels += 1.0 / n_steps
    rows = tuple(Row(k[0], k[1], k[2], tuple(a.ops), a.category, a.predicted_s, a.measured_s,
                     a.predicted_kernels, a.measured_kernels) for k, a in acc.items())
    un = tuple(sorted((Unmatched(n, f, p, s, v[0], v[1] / n_steps) for (n, f, p, s), v in lost.items()),
                      key=lambda u: -u.measured_s))
    total = float(dur[in_step].sum())
    return Match(rows, un, n_steps, total, total - sum(u.measured_s for u in un))


SHORT = re.compile(r"^(void )?([^<(]{1,80})")


def short_name(kernel: str) -> str:
    m = SHORT.match(kernel)
    return m.group(2) if m else kernel[:80]
