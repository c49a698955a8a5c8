"""The kernel laws fitted across random shapes (sim/kernel_laws.py): the GEMM tile / split-K /
load-store law, causal attention at tile granularity and the pointwise arithmetic rate, through
the public API where they show, and the fit tool's writer (validation/analysis/fit_laws.py)."""

from __future__ import annotations

import math
import tomllib

import numpy as np
import pytest

from mechsim import estimate_op
from mechsim.model.microops import attention, gemm, unary
from mechsim.sim.kernel_laws import causal_tiles
from mechsim.validation.analysis.fit_laws import is_root_dotted, set_root_records, write_records

H200 = "h200_sxm"


def t_us(op) -> float:
    return estimate_op(op, H200).time_s * 1e6


def brute_causal_tiles(s: int, bm: int, bn: int) -> int:
    return sum(math.ceil(min((i + 1) * bm, s) / bn) for i in range(math.ceil(s / bm)))


@pytest.mark.parametrize("s", [1, 5, 64, 130, 653, 1000, 4097])
@pytest.mark.parametrize("bm,bn", [(128, 128), (128, 64), (64, 128), (64, 64)])
def test_causal_tiles_is_the_exact_tile_count(s: int, bm: int, bn: int) -> None:
    got = causal_tiles(np.array([float(s)]), np.array([float(bm)]), np.array([float(bn)]))[0]
    assert got == brute_causal_tiles(s, bm, bn)


def test_a_tiny_gemm_costs_about_a_launch_not_a_tile_of_k_steps() -> None:
    assert 1.5 < t_us(gemm(6, 3, 9, "bf16")) < 4.0


def test_misaligned_operands_are_slower_and_sgemm_has_no_misaligned_path() -> None:
    aligned, odd_k = t_us(gemm(4096, 4096, 4096, "bf16")), t_us(gemm(4096, 4096, 4095, "bf16"))
    assert odd_k > 1.5 * aligned
    assert t_us(gemm(2048, 2048, 2047, "fp32")) == pytest.approx(t_us(gemm(2048, 2048, 2048, "fp32")), rel=0.02)


def test_a_k2_product_is_bound_by_writing_its_output() -> None:
    op = gemm(16384, 16384, 2, "fp32")            # 1 GiB of fp32 output
    out_rate = 16384 * 16384 * 4 / (t_us(op) * 1e-6)
    assert 0.5e12 < out_rate < 4.8e12             # some TB/s, never above HBM


def test_gemm_time_grows_with_k_and_every_dtype_is_predicted() -> None:
    for dt in ("bf16", "fp16", "fp8", "tf32", "fp32"):
        ts = [t_us(gemm(512, 768, k, dt)) for k in (16, 256, 4096, 65536)]
        assert all(a <= 1.01 * b for a, b in zip(ts, ts[1:])), (dt, ts)   # 1 %: the power state


def test_a_short_causal_sequence_costs_more_than_half_its_square() -> None:
    def per_flop(s: int, causal: bool) -> float:
        op = attention(2, 16, 16, s, s, 256, causal, phase="fwd")
        return estimate_op(op, H200).time_s / op.flops
    assert per_flop(130, True) > 1.3 * per_flop(130, False)      # 5 of 6 tiles, not half
    assert per_flop(16384, True) < 1.25 * per_flop(16384, False)


def test_the_pointwise_arithmetic_rate_applies_only_where_the_data_has_it() -> None:
    """memory.elementwise_flop_fraction is not in H200's data (LOG 'The pointwise arithmetic rate
    contradicts Nsight Compute'): a bf16 tanh-GELU streams at the HBM rate, half fp32's time."""
    n = 1 << 28
    bf16, fp32 = t_us(unary(n, "bf16", "gelu_tanh")), t_us(unary(n, "fp32", "gelu_tanh"))
    assert bf16 == pytest.approx(0.5 * fp32, rel=0.02)


def test_the_fit_writer_keeps_root_dotted_keys_at_the_root(tmp_path) -> None:
    f = tmp_path / "eff.toml"
    f.write_text('arch = "hopper"\n\ngemm.fixed_s = { value = 1.0, unit = "s", source = "x", kind = "measured" }\n'
                 'memory.floor_s = { value = 2.0, unit = "s", source = "x", kind = "measured" }\n\n'
                 '[rowkernel.rms_norm]\nrow_s = { value = 3.0, unit = "s", source = "x", kind = "measured" }\n')
    assert is_root_dotted(f, "gemm.law.floor_s") and not is_root_dotted(f, "rowkernel.rms_norm.row_s")
    rec = {"value": 4.0, "unit": "s", "source": "y", "kind": "calibrated", "note": "a \"quoted\" note"}
    set_root_records(f, {"gemm.law.floor_s": rec, "gemm.fixed_s": {**rec, "value": 5.0},
                         "gemm.law.tiles": {**rec, "value": [[64, 8], [8, 64]]}})
    d = tomllib.loads(f.read_text())
    assert d["gemm"]["fixed_s"]["value"] == 5.0 and d["gemm"]["law"]["floor_s"]["value"] == 4.0
    assert d["memory"]["floor_s"]["value"] == 2.0 and d["rowkernel"]["rms_norm"]["row_s"]["value"] == 3.0
    assert d["gemm"]["law"]["tiles"]["value"] == [[64, 8], [8, 64]]


def test_the_fit_writer_keeps_comments_order_and_unchanged_records_byte_for_byte(tmp_path) -> None:
    """tomlkit writer: re-writing the records a file holds leaves its bytes unchanged (comments, the
    root records' `{ value = ... }` spacing, key order); a changed record is updated in place."""
    f = tmp_path / "eff.toml"
    text = ('# header comment\narch = "hopper"\n\ngemm.fixed_s = { value = 1.0, unit = "s", source = "x", kind = "measured" }\n'
            'gemm.law.tiles = { value = [[64, 8], [8, 64]], unit = "1", source = "x", kind = "measured" }\n\n'
            '[rowkernel.rms_norm]\n# a table comment\nrow_s = {value = 3e-07, unit = "s", source = "x", kind = "measured"}\n')
    f.write_text(text)
    d = tomllib.loads(text)
    write_records(f, {"gemm.fixed_s": d["gemm"]["fixed_s"], "gemm.law.tiles": d["gemm"]["law"]["tiles"],
                      "rowkernel.rms_norm.row_s": d["rowkernel"]["rms_norm"]["row_s"]})
    assert f.read_text() == text
    write_records(f, {"gemm.fixed_s": {**d["gemm"]["fixed_s"], "value": 2.0}, "rowkernel.rms_norm.col_s": {"value": 1e-10}})
    out = f.read_text()
    assert out.replace("value = 2.0", "value = 1.0").startswith(text.split("[rowkernel")[0])
    assert "# a table comment" in out and tomllib.loads(out)["rowkernel"]["rms_norm"]["col_s"]["value"] == 1e-10
    assert not list(tmp_path.glob(".*.tmp"))   # written atomically: no stray temp file


@pytest.mark.parametrize("b,h,s,d", [(2, 16, 512, 128), (1, 4, 130, 256), (1, 32, 4096, 128), (8, 8, 2048, 64)])
@pytest.mark.parametrize("phase", ["fwd", "bwd"])
def test_a_causal_kernel_is_never_slower_than_the_non_causal_one(b: int, h: int, s: int, d: int, phase: str) -> None:
    causal, full = (estimate_op(attention(b, h, h, s, s, d, c, phase=phase), H200).time_s for c in (True, False))
    assert causal <= full * 1.0001


def test_the_gemm_config_is_chosen_by_the_time_the_op_is_charged() -> None:
    """The (tile, split) chosen minimises max(main / clock, HBM time) + kernels x (launch + reduce), the
    time sim/kernels.py then charges, so more HBM bandwidth never makes the op slower. The shape of
    mixtral-8x7b's fp32 expert gate_up (M 64, N 1,792, K 4,096, 8 experts, 8 kernels) had switched to a
    split whose per-kernel reduce it paid 8 times (invariants fuzz, LOG 'Invariants re-run on a later
    tree', 2026-12-02): the choice made for one kernel costs more when charged for 8."""
    from mechsim.sim.calibration import efficiency_for
    from mechsim.sim.kernel_laws import dense_peaks, gemm_law
    one = np.ones(1)

    def charged(gpu: str, hbm: float, told: float, kernels: float = 8.0) -> float:
        eff = efficiency_for(gpu, "hopper")
        peak = dense_peaks(gpu, ("fp32",))
        mem = (64 * 4096 + 4096 * 1792) * 8 * 4.0 / (hbm * eff.get("gemm.mem_fraction"))
        e, fixed = gemm_law(64 * one, 1792 * one, 4096 * one, 8 * one, 4 * one, 4 * one, 0.5 * one, one < 0, 4 * one,
                            one > 0, peak, 132, hbm, eff, memory_s=mem, kernels=told)
        return max(2.0 * 64 * 1792 * 4096 * 8 / (peak[0] * e[0]), mem) + kernels * fixed[0]
    for gpu in ("h100_sxm", H200):
        hbms = np.linspace(2.0e12, 6.0e12, 41)
        times = [charged(gpu, h, 8.0) for h in hbms]
        assert all(a >= b * (1 - 1e-12) for a, b in zip(times, times[1:])), (gpu, times)
        one_kernel_choice = [charged(gpu, h, 1.0) for h in hbms]
        assert all(a <= b * (1 + 1e-12) for a, b in zip(times, one_kernel_choice))
    assert charged(H200, 3.0e12, 8.0) < 0.95 * charged(H200, 3.0e12, 1.0)


def test_more_hbm_bandwidth_never_slows_mixtrals_fp32_expert_gemms() -> None:
    import importlib.util
    import sys
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("invariants", Path(__file__).with_name("invariants.py"))
    inv = importlib.util.module_from_spec(spec)
    sys.modules["invariants"] = inv
    spec.loader.exec_module(inv)
    c = inv.train_case("mixtral-8x7b", 2, 128, 2, "fp32", "full", "torchtitan_eager", 8, 4, 1, 0, False, "aws_p5", 4)
    assert inv.check_spec(c, ("hbm_bandwidth",), 8.45274) is None
    c = inv.train_case("mixtral-8x7b", 4, 4096, 7, "fp32", "full", "eager", 1, 1, 1, 0, False, "hgx_h100", 1)
    assert inv.check_spec(c, ("hbm_bandwidth",), 31.1877) is None


def test_a_vector_operand_streams_the_matrix_at_about_hbm_speed() -> None:
    """fp32 m1 n37115 k5516 (gemv2T, 222 us measured on H200): the matrix streamed, not tiled."""
    t = estimate_op(gemm(1, 37115, 5516, "fp32"), "h200_sxm").time_s
    assert 1.6e-4 < t < 2.8e-4


def test_a_long_dot_against_a_weight_vector_pays_a_second_kernel() -> None:
    short = estimate_op(gemm(64, 1, 256, "fp32"), "h200_sxm").fixed_s
    long = estimate_op(gemm(64, 1, 4096, "fp32"), "h200_sxm").fixed_s
    assert long > short


def test_the_two_kernel_norm_pays_the_moments_waves() -> None:
    """RowwiseMomentsCUDAKernel: 4 blocks of 512 threads per SM, so one more row past 4 x 132 rows
    starts another wave; the pair's time grows with rows and columns."""
    from mechsim.sim import estimate as est
    from mechsim.sim.kernel_laws import rowwise_pair_s
    eff = est.efficiency(est.resolve_gpu("h200_sxm"))
    one, two = rowwise_pair_s(528, 20001, 132, eff), rowwise_pair_s(529, 20001, 132, eff)
    assert two > 1.5 * one
    assert rowwise_pair_s(100000, 301, 132, eff) > rowwise_pair_s(50000, 301, 132, eff) > rowwise_pair_s(50000, 101, 132, eff)


def test_nll_reduce_is_one_block_whose_threads_step_through_the_rows() -> None:
    """nll_loss_forward_reduce_cuda_kernel_2d: one block of clamp(2^round(log2(rows / 16)), 32, 1024)
    threads (torch's nll_loss_threads), ceil(rows / threads) dependent steps: the time falls where the
    thread count doubles (H200 kernel times: fp32 t1429 25.5 us, t1552 17.0 us)."""
    from mechsim.model.microops import cross_entropy_chain
    from mechsim.sim.kernel_laws import nll_threads

    assert [nll_threads(r) for r in (5, 262, 735, 736, 1455, 1456, 11599, 11600, 10**6)] == \
        [32, 32, 32, 64, 64, 128, 512, 1024, 1024]

    def nll_us(t: int) -> float:
        op = next(o for o in cross_entropy_chain(t, 32000) if o.name == "loss/cross_entropy")
        return t_us(op)

    assert nll_us(300) > 5.0                            # a single block: far above the ~2 us of a streamed gather
    assert nll_us(1440) > 1.5 * nll_us(1460)            # 23 steps of 64 threads vs 12 steps of 128
    assert nll_us(1460) == pytest.approx(nll_us(1536), rel=0.01)   # 12 steps each


def test_sgemm_splits_k_into_short_slices() -> None:
    """fp32 m4 n4 k880 ran cutlass_80_simt_sgemm_64x64 + splitKreduce_kernel on H200 (6.2 us measured,
    held-out sweep case); one 32 x 32 CTA walking all 880 K steps alone was charged 15.5 us."""
    est = estimate_op(gemm(4, 4, 880, "fp32"), H200)
    assert 3.5e-6 < est.time_s < 9.0e-6
    assert est.fixed_s > estimate_op(gemm(4, 4, 8, "fp32"), H200).fixed_s   # the reduce kernel is paid


def test_split_k_slices_only_on_the_mma_sync_and_sgemm_paths() -> None:
    from mechsim.sim.calibration import efficiency_for
    from mechsim.sim.kernel_laws import SPLIT_SLICE, split_ok
    eff = efficiency_for(H200, "hopper")
    slice_k = eff.get(SPLIT_SLICE)
    ks = np.array([slice_k - 1.0, slice_k, 4 * slice_k])[None, None, :]
    ok = split_ok(np.broadcast_to(ks, (2, 1, 3)), np.array([True, False]), eff)
    assert ok[0, 0].tolist() == [False, True, True]
    assert not ok[1].any()


def test_a_one_cta_sgemm_launches_below_the_tensor_core_floor() -> None:
    """One-CTA CUDA-core kernels (fp32 m3 n5 k4 gemmSN_TN_kernel 1.8 us on H200) against the tensor-core
    ones (tf32 m7 n3 k3 xmma 3.0 us)."""
    fp32, tf32 = t_us(gemm(3, 5, 4, "fp32")), t_us(gemm(7, 3, 3, "tf32"))
    assert fp32 < 2.6 < tf32


def test_a_lone_norm_row_is_a_chain_and_many_rows_share_the_sms_throughput() -> None:
    """vectorized_layer_norm_kernel's two regimes (sim/kernel_laws.row_throughput_s): a row alone walks
    its row at about 1 ns per element (H200: rms_norm bf16 t8 d12296 16.6 us, layer_norm fp32 t56 d21752
    37.4 us), far below HBM; thousands of short rows per SM cost their per-row work (layer_norm bf16
    t714400 d276 1.05 ms, twice what its bytes take at HBM speed)."""
    from mechsim.model.microops import row_norm
    lone = t_us(row_norm(8, 12296, "bf16", "rms_norm"))
    assert 8.0 < lone < 30.0
    assert t_us(row_norm(56, 21752, "fp32")) > 2 * t_us(row_norm(56, 21752 // 4, "fp32"))   # the chain's length
    many = t_us(row_norm(714400, 276, "bf16"))
    assert 800.0 < many < 1400.0
    assert many > 1.8 * (714400 * 276 * 2 * 2 / 4.8e12 * 1e6)


def test_the_norms_second_pass_comes_from_dram_past_the_l2_share() -> None:
    """Rows in flight (16 blocks per SM x 132 SMs x row bytes) past l2_writeback_fraction x L2 = 35.2 MB
    (sim/data/counters.toml) re-read x from DRAM: one row of 16 more fp32 columns across the cliff costs
    about half as much again; a GPU without counter data for its architecture keeps no cliff."""
    from mechsim.model.microops import row_norm
    from mechsim.sim.kernel_laws import l2_reread_cap
    assert l2_reread_cap("h200_sxm") == pytest.approx(0.56 * 60 * 2**20)
    below = t_us(row_norm(16384, 4160, "fp32", "rms_norm"))   # 2112 x 16.6 KB = 35.1 MB
    above = t_us(row_norm(16384, 4176, "fp32", "rms_norm"))   # 35.3 MB
    assert 1.3 < above / below < 1.6
    assert l2_reread_cap("no_such_gpu") is None


def test_only_a_tile_past_the_register_file_pays_recompute_passes() -> None:
    """fp32 accumulators per thread from the kernels' tiles (sim/kernel_laws.kernel_tiles): FA2 keeps
    160-192 at every head dim; cuDNN's bprop 64x64xD holds dK, dV, S and dP, 320 at D = 256, past the
    255-register limit: two passes over D, 7/5 of the backward's work (H200 sweeps: cuDNN fwd+bwd at
    D = 256 ran 400 TFLOP/s against 525 at D = 128)."""
    from mechsim.sim.kernel_laws import accumulator_floats, register_passes
    hd = np.array([64.0, 128.0, 256.0])
    for impl in ("fa2", "cudnn"):
        for bwd in (False, True):
            b = np.full(3, bwd)
            assert accumulator_floats(hd, b, impl).max() <= 320
    assert list(accumulator_floats(hd, np.full(3, True), "fa2")) == [192.0, 192.0, 160.0]
    assert list(register_passes(hd, np.full(3, True), "cudnn")) == [1.0, 1.0, pytest.approx(1.4)]
    assert list(register_passes(hd, np.full(3, False), "cudnn")) == [1.0, 1.0, 1.0]
    assert list(register_passes(hd, np.full(3, True), "fa2")) == [1.0, 1.0, 1.0]
    assert list(register_passes(hd, np.full(3, True), "fa3")) == [1.0, 1.0, 1.0]
    def bwd_us(d: int) -> float:   # the eager stack runs cuDNN attention (sim/data/stacks.toml)
        return estimate_op(attention(1, 8, 8, 16384, 16384, d, False, phase="bwd"), H200).time_s * 1e6
    assert bwd_us(256) > 1.2 * 2 * bwd_us(128)          # twice the FLOPs and 7/5 of the work (2.0x without)
