"""Hardware counters per op (sim/counters.py): the binding rule, the profiler's DRAM / L2 traffic,
hand-computed fractions, and invariants."""

import dataclasses
import math

import pytest

import mechsim
from mechsim.model import TrainingWorkload
from mechsim.model.microops import attention, gemm, memory_kernel, row_norm, softmax
from mechsim.sim import counters


@pytest.mark.parametrize("args,kw,want", [
    ((0.5, 0.1, 0.3), {}, "latency"),                 # nothing reaches 60 % (ncu's latency threshold)
    ((0.85, 0.05, 0.3), {}, "tensor"),
    ((0.1, 0.7, 0.3), {}, "sm"),
    ((0.0, 0.1, 0.8), {}, "hbm"),
    ((0.0, 0.1, 0.3, 0.7), {}, "l1"),
    ((0.86, 0.02, 0.44), {"compute": 0.86, "memory": 0.69}, "tensor"),   # ncu's SOL figures given
    ((0.0, 0.55, 0.63), {"compute": 0.55, "memory": 0.63}, "hbm"),
    ((0.59, 0.0, 0.59), {}, "latency"),
])
def test_binding_rule(args, kw, want):
    assert mechsim.binding_unit(*args, **kw) == want


def test_dram_bytes_with_writes_left_in_l2():
    # 10 MB read, 10 MB written, write-back capacity 35 MB: the footprint (20 MB) fits, no write
    # reaches DRAM; with 40 MB each (80 MB footprint) 45/80 of the written bytes are evicted.
    small = memory_kernel(10e6, 10e6)
    assert counters.dram_bytes(small, 35e6) == pytest.approx(10e6)
    big = memory_kernel(40e6, 40e6)
    assert counters.dram_bytes(big, 35e6) == pytest.approx(40e6 + 40e6 * 45 / 80)


def test_hbm_fraction_by_hand():
    # a 2 GB + 2 GB stream on H200: DRAM bytes = read + written x (4e9 - C) / 4e9, over time x 4.8 TB/s
    op = memory_kernel(2e9, 2e9)
    c = mechsim.op_counters(op, "h200")
    cap = counters.l2_params("hopper").writeback_fraction * 60 * 2**20
    dram = 2e9 + 2e9 * (4e9 - cap) / 4e9
    assert c.dram_bytes == pytest.approx(dram)
    assert c.hbm == pytest.approx(dram / (c.time_s * 4.8e12))
    assert c.binding == "hbm" and c.tensor == 0.0


def test_tensor_fraction_by_hand():
    # 8192^3 bf16 on H200: FLOP / (calibrated time x 4096 FLOP/clk/SM x 132 SMs x 1470 MHz)
    op = gemm(8192, 8192, 8192)
    c = mechsim.op_counters(op, "h200")
    t_cal = mechsim.estimate_op(op, "h200").time_s
    assert c.tensor == pytest.approx(op.flops / (t_cal * 4096 * 132 * 1.47e9), rel=1e-3)
    assert c.binding == "tensor" and 0.7 < c.tensor < 1.0


def test_small_ops_are_latency_bound():
    for op in (gemm(32, 512, 512), memory_kernel(1e5, 1e5), softmax(64, 128, "bf16")):
        assert mechsim.op_counters(op, "h200").binding == "latency"


def test_row_kernel_with_few_rows_is_latency_not_sm():
    # the same 32 MB row softmax: 64 long rows keep few SMs busy, 65,536 short rows fill them
    few, many = softmax(64, 131072, "fp32"), softmax(65536, 128, "fp32")
    assert mechsim.op_counters(few, "h200").sm < mechsim.op_counters(many, "h200").sm


def test_more_bandwidth_never_raises_the_hbm_fraction_of_a_stream():
    op = memory_kernel(1e9, 1e9)
    a = counters.counters_of(op, mechsim.estimate_op(op, "h200"), "h200")
    b = counters.counters_of(op, mechsim.estimate_op(op, "h200", overrides={"hbm_bandwidth": "+50%"}), "h200")
    assert b.time_s < a.time_s and b.hbm > a.hbm       # same bytes in less time, against the same peak


def test_gemm_l2_bytes_at_least_its_unique_bytes():
    for m, n, k in ((16, 4096, 4096), (8192, 8192, 8192), (128, 128, 128)):
        op = gemm(m, n, k)
        assert counters.l2_bytes(op, 132, mechsim.sim.estimate.efficiency(mechsim.sim.estimate.resolve_gpu("h200")),
                                 "fa2", 0.12) >= op.bytes_read + op.bytes_written


def test_attention_and_norm_have_counters():
    c = mechsim.op_counters(attention(4, 32, 8, 4096, 4096, 128, True), "h200", "torchtitan_eager")
    assert c.tensor > 0.2 and c.sm > 0 and c.kind == "attention"
    n = mechsim.op_counters(row_norm(32768, 4096, "bf16", "rms_norm"), "h200")
    assert n.binding in ("hbm", "sm") and n.tensor == 0.0


def test_chain_counters_are_time_weighted():
    ops = [softmax(1024, 50304, "fp32"), memory_kernel(4096, 4)]
    each = [mechsim.op_counters(o, "h200") for o in ops]
    chain = mechsim.ops_counters(ops, "h200")
    w = [c.time_s for c in each]
    assert chain.time_s == pytest.approx(sum(w))
    assert chain.hbm == pytest.approx(sum(c.hbm * t for c, t in zip(each, w)) / sum(w))


def test_no_l2_data_is_nan_not_a_guess():
    c = mechsim.op_counters(memory_kernel(1e9, 1e9), "a100_sxm_80gb")
    assert math.isnan(c.l2) and c.binding == "hbm"


def test_estimate_counters_cover_the_kernels_of_a_step():
    w = TrainingWorkload(model="llama3.2-1b", mbs=1, seq=2048, precision="amp_bf16", stack="eager")
    cs = mechsim.estimate_counters(w, "h200")
    est = mechsim.estimate(w, "h200")
    assert len(cs) == sum(o.kind not in ("collective", "memcpy", "copy_engine") and o.time_s > 0 for o in est.ops)
    assert {c.binding for c in cs} <= set(counters.BINDINGS)
    assert any(c.binding == "tensor" for c in cs) and any(c.binding == "hbm" for c in cs)


def test_zero_time_op_is_refused_clearly():
    op = gemm(128, 128, 128)
    e = mechsim.estimate_op(op, "h200")
    with pytest.raises(ValueError, match="time_s"):
        counters.counters_of(op, dataclasses.replace(e, time_s=0.0), "h200")


def _eff():
    return mechsim.sim.estimate.efficiency(mechsim.sim.estimate.resolve_gpu("h200"))


def test_three_pass_softmax_rereads_from_dram_only_past_the_l2_share():
    # cunn_SoftMaxForward (fp32 rows of 16,384 and 65,536: neither fits the 48 KiB smem kernel) keeps
    # 2 x 132 rows in flight: 17 MB fits the L2 share C (0.56 x 60 MiB = 35 MB), its two re-reads hit;
    # 69 MB does not, and LRU evicts every row before its next pass: all three passes come from DRAM
    cap = counters.l2_params("hopper").writeback_fraction * 60 * 2**20
    fits, spills = softmax(264, 16384, "fp32"), softmax(264, 65536, "fp32")
    assert counters.dram_read_bytes(fits, 132, _eff(), cap) == pytest.approx(fits.bytes_read)
    assert counters.dram_read_bytes(spills, 132, _eff(), cap) == pytest.approx(3 * spills.bytes_read)


def test_vectorized_norm_rereads_x_past_the_l2_share():
    # vectorized_layer_norm_kernel, 16 rows resident per SM: fp32 rows of 8,192 (32 KB) put 69 MB in
    # flight, past C: x is read twice from DRAM; rows of 1,024 (8.6 MB in flight) re-read from L2
    cap = counters.l2_params("hopper").writeback_fraction * 60 * 2**20
    big, small = row_norm(4096, 8192, "fp32", "rms_norm"), row_norm(4096, 1024, "fp32", "rms_norm")
    assert counters.dram_read_bytes(big, 132, _eff(), cap, 16) == pytest.approx(big.bytes_read + 4096 * 8192 * 4)
    assert counters.dram_read_bytes(small, 132, _eff(), cap, 16) == pytest.approx(small.bytes_read)
    assert counters.dram_read_bytes(big, 132, _eff(), None, 16) == pytest.approx(big.bytes_read)   # no counter data


def test_block_softmax_sm_is_its_work_not_its_row_latency():
    # the 1024-thread softmax kernels' time is a latency per row the SM's co-resident rows share; the SM
    # pipes are busy for the work the code issues: per slot (Reg<k>: k x 1024 per row) or per element
    lp = counters.l2_params("hopper")
    reg = softmax(20000, 3000, "fp32")                      # Reg<3>: 3,072 slots a row
    c = mechsim.op_counters(reg, "h200")
    assert c.sm * c.time_s == pytest.approx(20000 * 3072 * lp.reg_sm_s_per_slot)
    block = softmax(2000, 65536, "fp32")                    # three-pass cunn_SoftMaxForward
    c = mechsim.op_counters(block, "h200")
    assert c.sm * c.time_s == pytest.approx(2000 * 65536 * lp.block_sm_s_per_element)
    assert c.binding == "hbm"                               # its rows spill the L2: three reads stream


def test_block_softmax_without_counter_data_keeps_the_time_split():
    c = mechsim.op_counters(softmax(20000, 3000, "fp32"), "a100_sxm_80gb")
    assert 0.0 < c.sm <= 1.0 + 1e-9
