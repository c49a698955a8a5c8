"""Row-softmax kernels of eager PyTorch (torch.softmax / log_softmax over the last dim).

Which kernel runs is a host-side dispatch in aten/src/ATen/native/cuda/SoftMax.cu
(host_softmax, inner_size == 1, output dtype = input dtype; torch 2.x):

* ``softmax_warp_forward`` (PersistentSoftmax.cuh) when cols <= 2048 and
  cols * elem_bytes <= 8192: one warp per row (128-thread blocks, 4 rows each), the
  row held in registers: one read and one write of HBM.
* otherwise a 1024-thread block per row (SoftMaxForward_getBlockSize: min(cols, 1024)
  rounded to a warp), grid = rows, and
  - ``cunn_SoftMaxForwardReg<reg_cnt>`` when reg_cnt = ceil(cols / 1024) < 10: the row
    in registers, one read + one write;
  - else ``cunn_SoftMaxForwardSmem`` when the row fits the 48 KiB of shared memory per
    block (cols * elem_bytes + reduction scratch), both pointers 16-byte aligned and
    cols % ILP == 0 (ILP = 16 / elem_bytes): one read (into smem) + one write;
  - else ``cunn_SoftMaxForward<ILP>``: three passes over the input (max, sum of exp,
    epilogue) and one write. The two re-reads hit L2 only while the rows in flight
    (2 blocks of 1024 threads per SM) fit in the part of L2 that streaming leaves them.

Measured on H200 (validation/data/h200, per-kernel profiles) the one-pass kernels do not
reach HBM bandwidth: a warp or block per row serialises load -> reduce -> exp -> reduce
-> store, so their time is set by an element rate per family (latency-bound), e.g. bf16
and fp32 rows of 2048 take the same 41 us. Time of one kernel:

    t = max(hbm_bytes / (HBM * bw_fraction), rows * cols / elem_rate[warp])           warp
    t = max(hbm_bytes / (HBM * bw_fraction), ceil(rows / SMs) * slots * SMs / elem_rate[family])
                                                                                    reg, smem

(the 1024-thread blocks: an SM's co-resident rows share its throughput, so a kernel of few rows
takes whole rows per SM: Reg<8> bf16 147 x 7,778 8.8 us = 2 x its 57-row 4.6 us; slots = the
k x 1024 values Reg<k> walks, masked past the row, or the smem kernel's cols: row_slots)

(the warp kernel has its own bandwidth fraction: one warp per row with a serial load ->
reduce -> store chain keeps fewer bytes in flight; fp32 rows of 512-2048 run at ~3.3 TB/s
of read + written bytes on H200 whatever their length, while bf16 rows stay element-bound)

with hbm_bytes = read * (1 + 2 * miss) + write for the three-pass kernel, where
miss = max(0, 1 - l2_resident_bytes / (rows_in_flight * row_bytes)), and read + write
for the others. Rates are data (sim/data/efficiency/*.toml, section [rowsoftmax]).
"""

from __future__ import annotations

import math

import numpy as np

from .calibration import Efficiency

WARP_MAX_COLS, WARP_MAX_BYTES = 2048, 8192
BLOCK_THREADS, REG_MAX = 1024, 10
SMEM_PER_BLOCK = 48 * 1024
ALIGN_BYTES = 16


def softmax_kernel(cols: int, elem_bytes: float) -> str:
    """Name of the forward kernel torch dispatches for rows of ``cols`` elements."""
    if cols <= WARP_MAX_COLS and cols * elem_bytes <= WARP_MAX_BYTES:
        return "warp"
    block = min(BLOCK_THREADS, math.ceil(min(cols, BLOCK_THREADS) / 32) * 32)
    if math.ceil(cols / block) < REG_MAX:
        return "reg"
    ilp = ALIGN_BYTES // elem_bytes
    if cols * elem_bytes + (block // 32) * 4 < SMEM_PER_BLOCK and cols % ilp == 0:
        return "smem"
    return "block"


def softmax_fwd_s(rows: int, cols: int, elem_bytes: float, out_bytes: float, hbm_bandwidth: float,
                  sm_count: int, eff: Efficiency) -> float:
    """GPU time of one softmax / log_softmax forward kernel over ``rows`` x ``cols``."""
    fam = softmax_kernel(cols, elem_bytes)
    n = float(rows) * cols
    read, write = n * elem_bytes, n * out_bytes
    if fam == "block":
        in_flight = min(rows, 2 * sm_count) * cols * elem_bytes
        miss = max(0.0, 1.0 - eff.get("rowsoftmax.l2_resident_bytes") / in_flight)
        hbm = read * (1.0 + 2.0 * miss) + write
        return hbm / (hbm_bandwidth * eff.get("rowsoftmax.bw_fraction"))
    frac = eff.get("rowsoftmax.warp_bw_fraction") if fam == "warp" and "rowsoftmax.warp_bw_fraction" in eff.params \
        else eff.get("rowsoftmax.bw_fraction")
    t_bw = (read + write) / (hbm_bandwidth * frac)
    if fam == "warp":
        return max(t_bw, n / elem_rate(fam, cols, eff))
    # a 1024-thread block per row: an SM runs its rows' worth in turn (co-resident rows share its
    # throughput), ceil(rows / SMs) rows, each walking its slots at the SM's share of the rate
    per_row = row_slots(fam, cols) * sm_count / elem_rate(fam, cols, eff)
    return max(t_bw, math.ceil(rows / sm_count) * per_row)


def row_slots(fam: str, cols: int) -> float:
    """Elements one row's block walks: cunn_SoftMaxForwardReg<k> holds k = ceil(cols / 1024) values
    per thread of its 1024 and runs all k x 1024 slots, masked past the row (H200 kernel times: Reg<3>
    rows of 2,211 and of 3,072 columns both take 1.3-1.4 us per row); the smem kernel walks the row."""
    return float(math.ceil(cols / BLOCK_THREADS) * BLOCK_THREADS) if fam == "reg" else float(cols)


def elem_rate(fam: str, cols: int, eff: Efficiency) -> float:
    """Elements/s of a one-pass family; Reg<k> (k = ceil(cols / 1024) elements per thread)
    from the per-k table where the efficiency data has one, flat outside it. Between two
    table points the time per element is interpolated linearly in 1/k: a row's fixed latency
    (block reductions, the load -> reduce -> store chain) is shared by its k elements per
    thread, so seconds/element = c + d / k."""
    if fam == "reg" and "rowsoftmax.reg_elem_rates" in eff.params:
        table = sorted(eff.get("rowsoftmax.reg_elem_rates"), key=lambda r: -r[0])   # ascending 1/k
        k = math.ceil(cols / BLOCK_THREADS)
        s_per_elem = np.interp(1.0 / k, [1.0 / r[0] for r in table], [1.0 / r[1] for r in table])
        return float(1.0 / s_per_elem)
    return eff.get(f"rowsoftmax.{fam}_elem_rate")
