"""Mixed-generation clusters (sim/mixed.py): hand-computed laws, then the estimate-backed paths."""

import math

import pytest

from mechsim import Parallelism
from mechsim.model import TrainingWorkload
from mechsim.sim import mixed


def test_mixed_dp_pair_rebalanced_by_hand():
    # pool A: t = 1 + 2n, pool B: t = 1 + n, one replica each, 6 micro-batches.
    # equal split: 3 each -> A 7 s, B 4 s, step 7 s; rebalanced: A 2 (5 s), B 4 (5 s) -> 5 s.
    step, n, k = mixed.rebalance_micro_batches([1, 1], [1.0, 1.0], [2.0, 1.0], 6)
    assert n == (2, 4) and k == (1, 1)
    assert step == pytest.approx(5.0)
    assert max(1 + 2 * 3, 1 + 3) == 7          # the equal split it beats


def test_rebalance_counts_every_replica_of_a_pool():
    # pool A: 2 replicas at t = 2n, pool B: 1 replica at t = n; 8 micro-batches:
    # T = 4: A 2 each (4 micro-batches), B 4 -> 8 in all, step 4 s.
    step, n, k = mixed.rebalance_micro_batches([2, 1], [0.0, 0.0], [2.0, 1.0], 8)
    assert n == (2, 4) and k == (2, 1) and step == pytest.approx(4.0)


def test_rebalance_keeps_the_global_batch_exactly():
    # 3 replicas at t = n and 2 at t = 2n, 20 micro-batches: exactly 20 are handed out
    step, n, k = mixed.rebalance_micro_batches([3, 2], [0.0, 0.0], [1.0, 2.0], 20)
    total = sum(r * ni - (r - ki) for r, ni, ki in zip([3, 2], n, k))
    assert total == 20
    assert step == pytest.approx(max(n[0] * 1.0, n[1] * 2.0))


def test_rebalance_refuses_fewer_micro_batches_than_replicas():
    with pytest.raises(ValueError, match="micro_batches"):
        mixed.rebalance_micro_batches([3, 2], [0.0, 0.0], [1.0, 1.0], 4)


def test_two_stage_pipeline_h100_h200_by_hand():
    # 32 layers, 1.0 s/layer on the slower stage, 0.8 s on the faster: (14, 18) -> 14 s and
    # 14.4 s, against (15, 17) -> 15 s and (16, 16) -> 16 s.
    assert mixed.balance_layers(32, [1.0, 0.8]) == (14, 18)
    assert mixed.even_layers(32, 2) == (16, 16)
    # 8 micro-batches: 14 + 14.4 + 7 x 14.4 = 129.2 s; p2p 0.1 s twice over one boundary: +0.2 s.
    assert mixed.pipeline_step_s([14.0, 14.4], 8) == pytest.approx(129.2)
    assert mixed.pipeline_step_s([14.0, 14.4], 8, 0.1) == pytest.approx(129.4)
    assert mixed.pipeline_step_s([16.0, 12.8], 8) == pytest.approx(16 + 12.8 + 7 * 16)


def test_balance_layers_charges_the_head_to_the_last_stage():
    # equal per-layer cost 1 s, 2 s of head on the last stage: 10 layers -> (6, 4): 6 s and 6 s.
    assert mixed.balance_layers(10, [1.0, 1.0], last_extra_s=2.0) == (6, 4)


def test_disaggregated_kv_handoff_by_hand():
    # 1 GB of KV from tp 2 prefill GPUs at 50 GB/s each to tp 4 decode GPUs at 25 GB/s each:
    # both sides 100 GB/s -> 10 ms; a decode side of tp 1 at 25 GB/s binds: 40 ms.
    assert mixed.kv_handoff_s(1e9, 2, 50e9, 4, 25e9) == pytest.approx(0.01)
    assert mixed.kv_handoff_s(1e9, 2, 50e9, 1, 25e9) == pytest.approx(0.04)


def test_ring_all_reduce_factor():
    assert mixed.ring_all_reduce_s(1e9, 2, 50e9) == pytest.approx(2 * 0.5 * 1e9 / 50e9)
    assert mixed.ring_all_reduce_s(1e9, 1, 50e9) == 0.0


W = TrainingWorkload(model="llama3-8b", mbs=1, seq=2048, grad_accum=8, precision="bf16", stack="megatron_te",
                     parallel=Parallelism(tp=8))


def test_mixed_dp_slowest_pool_sets_the_step():
    r = mixed.mixed_data_parallel(W, ["hgx_h100:2", "hgx_b200:2"])
    slow = max(p.step_s for p in r.pools)
    assert r.step_s == pytest.approx(slow + r.cross_pool_s)
    assert r.slowest == "hgx_h100"
    assert 0 < r.idle_share < 1 and r.gpus == 32


def test_mixed_dp_rebalancing_is_never_slower_and_keeps_the_batch():
    eq = mixed.mixed_data_parallel(W, ["hgx_h100:2", "hgx_b200:2"])
    rb = mixed.mixed_data_parallel(W, ["hgx_h100:2", "hgx_b200:2"], rebalance=True)
    assert rb.tokens == eq.tokens
    assert rb.step_s <= eq.step_s * (1 + 1e-9)
    h100, b200 = rb.pools
    assert b200.micro_batches > h100.micro_batches     # the faster pool takes more


def test_mixed_pipeline_gives_the_faster_gpu_more_layers():
    w = W.model_copy(update={"parallel": Parallelism(tp=8, pp=2)})
    r = mixed.mixed_pipeline(w, ["hgx_h100", "hgx_b200"])
    assert sum(r.layers) == 32
    assert r.layers[1] > r.layers[0]
    assert r.step_s <= r.even_step_s * (1 + 1e-9)
    assert r.step_s == pytest.approx(mixed.pipeline_step_s(r.stage_s, 8, r.p2p_s))


def test_mixed_disagg_uses_both_pools_and_the_slower_nic():
    d = mixed.mixed_disagg("llama3-8b", "hgx_b200", "hgx_h200", 2048, 256, rate=4.0)
    assert d.plan.prefill_gpus >= 1 and d.plan.decode_gpus >= 1
    assert d.kv_handoff_s == pytest.approx(d.kv_bytes / min(d.prefill_tp * 50e9, d.decode_tp * 50e9))
    assert d.plan.ttft_s > d.kv_handoff_s and math.isfinite(d.plan.tpot_s)


def test_best_mixed_disagg_sorted_by_gpus():
    rows = mixed.best_mixed_disagg("llama3-8b", ["hgx_h100", "hgx_b200"], 2048, 256, rate=4.0)
    assert len(rows) == 4
    assert [r.plan.gpus for r in rows] == sorted(r.plan.gpus for r in rows)


def test_pools_must_hold_whole_replicas():
    w = W.model_copy(update={"parallel": Parallelism(tp=8, pp=3)})
    with pytest.raises(ValueError, match="tp\\*pp\\*cp"):
        mixed.mixed_data_parallel(w, ["hgx_h100:2"])


@pytest.mark.parametrize("pool", ["hgx_h100:x", "hgx_h100:0", ("hgx_h100",), 7])
def test_bad_pools_are_one_clear_error(pool):
    with pytest.raises(ValueError, match="pools"):
        mixed.mixed_data_parallel(W, [pool])
