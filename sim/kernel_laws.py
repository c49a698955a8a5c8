"""Kernel laws fitted across random shapes (validation/runners/cases_sweep.py, LOG "Random-shape
kernel sweeps", 2026-12-02), used by sim/kernels.py where the efficiency data carries them.

Row kernels (a thread block, or a warp, per row: torch's softmax, F.layer_norm / F.rms_norm)
serialise load -> reduce -> normalise -> store within a row, so a kernel over few or short rows
is bound by the rows' latency, not by HBM:

    t = max(t_hbm_or_rate, waves x (row_s + n x c)) + fixed_s      n = the elements a row's loop
                                                                   walks (row_elements)
    waves = max(1, rows / (rows_per_sm x SMs))      (rows_per_sm rows resident per SM: at least
                                                     one row's latency; beyond, a row throughput)
    c = col_s when a row is a whole number of vectors, misaligned_col_s otherwise (the kernel
        falls back to scalar loads): 4 elements for the norms (vectorized_layer_norm_kernel's
        vec_size), 16 bytes for softmax (its ILP)
    fixed_s: the norms' per-kernel cost (softmax's is inside its calibrated element rates: 0)

one parameter set per family: rowkernel.softmax_warp (softmax_warp_forward, cols <= 2048),
rowkernel.softmax_block (the 1024-thread block kernels), rowkernel.layer_norm, rowkernel.rms_norm.
"""

from __future__ import annotations

import math

import numpy as np

from ..model.ops import DTYPE_BYTES, RowShape
from .calibration import Efficiency
from .optable import KINDS
from .rowkernels import softmax_kernel

NORM = KINDS.index("norm")

VECTOR_BYTES = 16
NORM_VEC = 4
NORMS = ("layer_norm", "rms_norm")
ROW_FIELDS = ("row_s", "col_s", "rows_per_sm", "misaligned_col_s", "fixed_s")


def has_row_law(eff: Efficiency, fam: str) -> bool:
    return f"rowkernel.{fam}.row_s" in eff.params


def row_latency_s(rows: float, cols: float, elem_bytes: float, sm_count: int, eff: Efficiency, fam: str) -> float:
    """waves x (row_s + cols x c) of one row kernel (module docstring); 0 without data."""
    if not has_row_law(eff, fam):
        return 0.0
    p = f"rowkernel.{fam}."
    waves = max(1.0, rows / max(eff.get(p + "rows_per_sm") * sm_count, 1e-9))
    aligned = cols % NORM_VEC == 0 if fam in NORMS else (cols * elem_bytes) % VECTOR_BYTES == 0
    c = eff.get(p + ("col_s" if aligned else "misaligned_col_s"))
    return waves * (eff.get(p + "row_s") + row_elements(cols, fam) * c)


def row_elements(cols: float, fam: str) -> float:
    """Elements one row's loop walks: softmax_warp_forward is compiled for the next power of two
    of the row (log2_elements; each of the warp's 32 lanes loads next_pow2(cols) / 32 elements,
    masked past the row), the block kernels and the norms walk the row itself."""
    return float(2 ** math.ceil(math.log2(max(cols, 1.0)))) if fam == "softmax_warp" else float(cols)


def row_fixed_s(eff: Efficiency, fam: str) -> float:
    name = f"rowkernel.{fam}.fixed_s"
    return eff.get(name) if name in eff.params else 0.0


def softmax_family(cols: float, elem_bytes: float) -> str:
    """The row-law family of torch's softmax forward for rows of ``cols`` (sim/rowkernels.py)."""
    return "softmax_warp" if softmax_kernel(int(cols), int(elem_bytes)) == "warp" else "softmax_block"


def norm_family(op) -> str | None:
    """'layer_norm' / 'rms_norm' for a one-kernel forward norm op built with its (rows, cols)
    (model/microops.row_norm: a layer norm also reads its bias), None otherwise."""
    if op.kind != "norm" or op.phase != "fwd" or op.kernels != 1 or not isinstance(op.shape, RowShape):
        return None
    rows, cols = op.shape.rows, op.shape.cols
    e = DTYPE_BYTES[op.dtype]
    return "layer_norm" if op.bytes_read >= rows * cols * e + 2 * cols * e else "rms_norm"


def apply_row_laws(t, compute: np.ndarray, memory: np.ndarray, fixed: np.ndarray, hw, eff: Efficiency) -> None:
    """Row-kernel laws (module docstring) on the forward softmax and fused-norm rows of ``t``, in
    place: the rows' latency on the compute side (it follows the SM clock), a fused norm's
    traffic at memory.fused_norm_fraction on the memory side, fixed = the family's fixed_s."""
    cand = np.flatnonzero(((t.rows > 0) | (t.kind == NORM)) & (t.phase == 0))
    for i in cand:
        op = t.ops[i]
        fam: str | None
        if t.rows[i] > 0:
            rows, cols = t.rows[i], t.cols[i]
            fam = softmax_family(cols, DTYPE_BYTES[op.dtype])
        else:
            fam = norm_family(op)
            if fam is None or not has_row_law(eff, fam):
                continue
            rows, cols = op.shape.rows, op.shape.cols
            memory[i] = op.bytes_total / (hw.hbm_bandwidth * eff.get("memory.fused_norm_fraction"))
        if fam is None or not has_row_law(eff, fam):
            continue
        lat = row_latency_s(rows, cols, DTYPE_BYTES[op.dtype], hw.sm_count, eff, fam) / hw.clock_fraction
        compute[i] = max(compute[i], lat)
        fixed[i] = row_fixed_s(eff, fam)
