"""cuBLAS's dispatch classes in the GEMM tile law (sim/kernel_laws.py): which kernel family a shape, dtype and
alignment fall in (wmma_rows, few_tile_split) and what that family then costs, through the public API."""

from __future__ import annotations

import numpy as np
import pytest

from mechsim import estimate_op
from mechsim.model.microops import gemm
from mechsim.sim.calibration import efficiency_for
from mechsim.sim.kernel_laws import SPLIT_SLICE, WMMA_FLOOR, few_tile_split, wmma_rows

H200 = "h200_sxm"


def est(m: int, n: int, k: int, dtype: str):
    return estimate_op(gemm(m, n, k, dtype), H200)


def test_wmma_rows_are_fp16_misaligned_and_bf16_only_at_four_or_eight_bytes() -> None:
    k = np.array([7.0, 7.0, 1.0, 8.0, 8.0])
    e = np.full(5, 2.0)
    mis = np.array([True, True, True, True, False])
    align = np.array([2.0, 2.0, 2.0, 4.0, 16.0])
    bf16 = np.array([False, True, False, True, False])
    assert wmma_rows(k, e, mis, align, bf16).tolist() == [True, False, False, True, False]


def test_a_one_cta_wmma_product_launches_below_the_cutlass_75_kernels() -> None:
    """fp16 m42 n3 k7 ran cutlass_75_wmma_tensorop_f16_s161616gemm_f16_32x32 (2.1 us of kernel time, 2.4 us
    timed on H200); bf16 with an odd K runs cutlass_75_tensorop_bf16_s1688gemm_bf16 (2.7-3.3 us)."""
    eff = efficiency_for(H200, "hopper")
    fp16, bf16 = est(42, 3, 7, "fp16").time_s, est(42, 3, 7, "bf16").time_s
    assert fp16 < bf16
    assert eff.get(WMMA_FLOOR) <= fp16 < 1.3 * eff.get(WMMA_FLOOR)


def test_few_output_tiles_on_the_sgemm_path_pay_the_reduce_at_any_split() -> None:
    eff = efficiency_for(H200, "hopper")
    s = eff.get(SPLIT_SLICE)
    m = np.array([10.0, 10.0, 4096.0, 10.0, 1.0])
    n = np.array([22.0, 22.0, 4096.0, 22.0, 22.0])
    k = np.array([4 * s, s - 1, 4 * s, 4 * s, 4 * s])
    mma = np.array([True, True, True, False, True])
    got = few_tile_split(m, n, k, np.ones(5), mma, 132, eff)
    assert got.tolist() == [True, False, False, False, False]   # short K, many tiles, nvjet, a vector operand


@pytest.mark.parametrize("dtype", ["tf32", "fp32"])
def test_a_few_tile_long_k_product_is_charged_its_reduce_kernel(dtype: str) -> None:
    """tf32 m10 n22 k44076 ran cutlass_80_tensorop_s1688gemm_64x64 + splitKreduce_kernel (8.3 + 5.3 us); the
    same dot lengths over many tiles pay no forced reduce."""
    few, short = est(10, 22, 44076, dtype), est(10, 22, 200, dtype)
    assert few.fixed_s > short.fixed_s + 1e-6


def test_sgemm_stores_its_fp32_output_faster_than_the_shared_epilogue_rate() -> None:
    """cutlass_80_simt_sgemm_128x32 nn at K = 1 (fp32 m26752 n16867 k1: 736 us on H200, 2.45 TB/s of output)
    stores from registers at gemm.law.sm_store_bw_simt, not the tensor-core kernels' gemm.law.sm_store_bw."""
    eff = efficiency_for(H200, "hopper")
    assert eff.get("gemm.law.sm_store_bw_simt") > eff.get("gemm.law.sm_store_bw")
    rate = 26752 * 16867 * 4 / est(26752, 16867, 1, "fp32").time_s
    assert 132 * eff.get("gemm.law.sm_store_bw") < rate < 4.8e12
