"""Row softmax kernels (sim/rowkernels.py): torch's dispatch and their use in workloads."""

import pytest

from mechsim.hwdb import get_gpu
from mechsim.model import TrainingWorkload
from mechsim.model.microops import cross_entropy_chain
from mechsim.model.ops import RowShape
from mechsim.sim.estimate import efficiency as efficiency_for
from mechsim.sim.estimate import estimate
from mechsim.sim.rowkernels import softmax_fwd_s, softmax_kernel


def test_dispatch_follows_softmax_cu():
    assert softmax_kernel(2048, 2) == "warp"
    assert softmax_kernel(2048, 8) == "reg"          # 16 KiB row > the warp kernel's 8 KiB
    assert softmax_kernel(8192, 2) == "reg"          # ceil(8192 / 1024) = 8 < 10
    assert softmax_kernel(16384, 2) == "smem"        # 32 KiB row fits 48 KiB of smem
    assert softmax_kernel(16384, 4) == "block"       # 64 KiB does not
    assert softmax_kernel(128256, 4) == "block"      # vocabulary-sized rows: three passes


def test_three_pass_kernel_rereads_from_hbm_when_rows_outgrow_l2():
    g = get_gpu("h200")
    eff = efficiency_for(g)
    small = softmax_fwd_s(4096, 16384, 4, 4, g.hbm_bandwidth, g.sm_count, eff) / (4096 * 16384)
    big = softmax_fwd_s(4096, 128256, 4, 4, g.hbm_bandwidth, g.sm_count, eff) / (4096 * 128256)
    assert big > small                               # per element: more of the re-reads miss L2


def test_eager_loss_times_its_log_softmax_with_the_row_kernel():
    ops = cross_entropy_chain(4096, 32000)
    lsm = [o for o in ops if o.name == "loss/log_softmax"]
    assert len(lsm) == 1 and lsm[0].shape == RowShape(4096, 32000) and lsm[0].kernels == 1
    w = TrainingWorkload(model="llama3.2-1b", mbs=1, seq=2048, stack="eager")
    e = estimate(w, "h200")
    op = next(o for o in e.ops if o.name == "loss/log_softmax")
    g = get_gpu("h200")
    eff = efficiency_for(g)
    want = softmax_fwd_s(2048, 128256, 4, 4, g.hbm_bandwidth, g.sm_count, eff) + eff.get("rowkernel.softmax_block.fixed_s")
    assert abs(op.time_s - want) < 1e-12 * max(1.0, want) + 1e-9   # HBM-bound: the row law's latency does not bind


def test_fused_loss_has_no_row_softmax_op():
    w = TrainingWorkload(model="llama3.2-1b", mbs=1, seq=2048, stack="megatron_te")
    assert not [o for o in estimate(w, "h200").ops if o.name == "loss/log_softmax"]


def test_reg_kernel_rate_table_interpolates_in_registers_per_thread():
    from mechsim.sim.rowkernels import elem_rate
    eff = efficiency_for(get_gpu("h200"))
    table = dict((int(k), v) for k, v in eff.get("rowsoftmax.reg_elem_rates"))
    assert elem_rate("reg", 3072, eff) == pytest.approx(table[3], rel=1e-12)   # 1 / (1 / rate): rounding
    assert elem_rate("reg", 8192, eff) == pytest.approx(table[8], rel=1e-12)
    assert min(table[3], table[6]) <= elem_rate("reg", 4096, eff) <= max(table[3], table[6])
    assert elem_rate("reg", 9216, eff) == pytest.approx(table[8], rel=1e-12)   # flat outside the table


def test_d2d_copy_engine_time_is_traffic_over_copy_rate_plus_fixed():
    from mechsim.model.microops import memory_kernel
    from mechsim.sim.estimate import estimate_op
    g = get_gpu("h200")
    eff = efficiency_for(g)
    b = 256 * 2**20
    t = estimate_op(memory_kernel(b, b, kind="copy_engine"), "h200").time_s
    want = 2 * b / (g.hbm_bandwidth * eff.get("memory.copy_fraction")) + eff.get("memory.copy_fixed_s")
    assert abs(t - want) < 1e-12


def test_reg_kernel_rows_take_whole_rows_per_sm_and_walk_all_their_slots():
    """cunn_SoftMaxForwardReg<k>: 1024-thread blocks whose co-resident rows share an SM, so a kernel
    takes ceil(rows / SMs) rows' worth, each walking k x 1024 slots (H200 kernel times: Reg<8> bf16
    147 x 7,778 8.8 us = 2 x the 57-row 4.6 us; Reg<3> rows of 2,211 and 3,072 columns alike)."""
    g = get_gpu("h200")
    eff = efficiency_for(g)
    t = lambda rows, cols: softmax_fwd_s(rows, cols, 2, 2, g.hbm_bandwidth, g.sm_count, eff)  # noqa: E731
    assert softmax_kernel(7778, 2) == "reg" and softmax_kernel(2211, 2) == "reg"
    assert t(g.sm_count + 1, 7778) == 2 * t(57, 7778)
    assert t(57, 7778) == t(g.sm_count, 7778)
    assert t(4096, 2211) == t(4096, 3072)


def test_softmax_families_of_the_row_law():
    from mechsim.sim.kernel_laws import softmax_family
    assert [softmax_family(c, 2) for c in (1024, 8192, 16384)] == ["softmax_warp", "softmax_reg", "softmax_block"]
    assert softmax_family(128256, 4) == "softmax_block"
