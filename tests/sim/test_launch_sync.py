"""Host syncs in the tandem queue (sim/launch.synced_step_time): hand-computed toys."""

import numpy as np
import pytest

import mechsim
from mechsim.model.config import MoEConfig, TransformerConfig
from mechsim.model.workload import TrainingWorkload
from mechsim.sim.launch import HOST_SYNC_S, synced_step_time, tandem_step_time


def test_no_sync_is_the_tandem_queue():
    rng = np.random.default_rng(0)
    host, gpu = rng.uniform(0, 5, 12), rng.uniform(0, 5, 12)
    count = np.array([1, 1, 4, 4, 8, 4, 4, 1, 2, 2, 1, 1], dtype=float)
    assert synced_step_time(host, gpu, count, np.zeros(12)) == pytest.approx(tandem_step_time(host, gpu, count))


def test_sync_exposes_hidden_host_time():
    """Two ops, host 5 each, GPU 10 each. No sync: the GPU never waits after the first launch,
    5 + 20 = 25. A sync after op 0: the host waits for op 0 (5 + 10 = 15), pays the sync (2),
    then issues op 1 on an idle GPU (5 + 10): 32. The 5 of host time op 1 hid is exposed."""
    host, gpu, count = np.array([5.0, 5.0]), np.array([10.0, 10.0]), np.ones(2)
    assert tandem_step_time(host, gpu, count) == pytest.approx(25.0)
    assert synced_step_time(host, gpu, count, np.array([1.0, 0.0]), sync_s=2.0) == pytest.approx(32.0)
    # host-bound toy: host 10 per op, GPU 1: no sync 10 + 10 + 1 = 21; a sync after op 0 adds the
    # wait for op 0's GPU time (1) and the sync (2): 11 + 2 + 11 = 24
    h2, g2 = np.array([10.0, 10.0]), np.array([1.0, 1.0])
    assert tandem_step_time(h2, g2, count) == pytest.approx(21.0)
    assert synced_step_time(h2, g2, count, np.array([1.0, 0.0]), sync_s=2.0) == pytest.approx(24.0)


def test_repeated_block_equals_unrolled():
    """A layer of 3 ops repeated 5 times (count 5) with a sync on its middle op equals the same
    15 ops written out one by one (count 1 each)."""
    host, gpu, syncs = np.array([3.0, 1.0, 2.0]), np.array([1.0, 4.0, 6.0]), np.array([0.0, 2.0, 0.0])
    rep = synced_step_time(host, gpu, np.full(3, 5.0), syncs, sync_s=0.5)
    flat = synced_step_time(np.tile(host, 5), np.tile(gpu, 5), np.ones(15), np.tile(syncs, 5), sync_s=0.5)
    assert rep == pytest.approx(flat)
    # by hand: segments [op0 op1] then [op2, op0', op1'] x 4 then [op2]; 2 syncs of 0.5 each time
    first = max(3 + 5, 4 + 4)                      # 8
    mid = max(2 + 6 + 1 + 4, 2 + 3 + 1 + 4)        # op2 op0 op1: lead 2 + G 11 = 13
    last = 2 + 6
    assert rep == pytest.approx(first + 4 * mid + last + 5 * 2 * 0.5)


def test_moe_loop_step_pays_its_syncs():
    """An eager MoE loop's estimate grows by at least its syncs x HOST_SYNC_S over the same op list
    without them (the launch model, not a constant: the lost overlap comes on top)."""
    cfg = TransformerConfig(name="toy", n_layers=2, d_model=256, n_heads=4, n_kv_heads=2, ffn=512, vocab=1024,
                            max_seq=4096, moe=MoEConfig(n_experts=8, top_k=2, expert_ffn=512, impl="loop_modules"))
    w = TrainingWorkload(model=cfg, mbs=1, seq=512, precision="amp_bf16", optimizer="adamw", stack="eager")
    e = mechsim.estimate(w, "h200")
    assert e.launch_overhead_s >= 2 * 8 * HOST_SYNC_S
    assert e.step_time_s > e.gpu_busy_s + 2 * 8 * HOST_SYNC_S


def _loop_workload(impl: str = "loop_modules", **kw) -> TrainingWorkload:
    cfg = TransformerConfig(name="toy", n_layers=2, d_model=256, n_heads=4, n_kv_heads=2, ffn=512, vocab=1024,
                            max_seq=4096, moe=MoEConfig(n_experts=8, top_k=2, expert_ffn=512, impl=impl))
    return TrainingWorkload(model=cfg, mbs=1, seq=512, precision="amp_bf16", optimizer="adamw", stack="eager", **kw)


def test_estimate_many_takes_synced_points_one_at_a_time():
    w = _loop_workload()
    table = mechsim.estimate_many([w], "h200")
    assert table["path"].iloc[0] == "loop"
    assert float(table["step_time_s"].iloc[0]) == pytest.approx(mechsim.estimate(w, "h200").step_time_s, rel=1e-9)


def test_data_parallel_loop_keeps_its_syncs():
    """On 2 GPUs (dp) the compute queue is the synced one too: the loop's syncs still cost."""
    from mechsim.model.parallel import Parallelism
    dp = Parallelism(dp=2)
    loop = mechsim.estimate(_loop_workload(parallel=dp), "hgx_h200").step_time_s
    grouped = mechsim.estimate(_loop_workload("grouped_gemm", parallel=dp), "hgx_h200").step_time_s
    assert loop > grouped + 2 * 8 * HOST_SYNC_S
