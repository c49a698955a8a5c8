"""MoE host time (sim/moe.py: dropless syncs, token drop) in the multi-GPU step."""

import pytest

from mechsim.model import TrainingWorkload, preset
from mechsim.model.parallel import Parallelism
from mechsim.sim import moe
from mechsim.sim.cluster import Cluster
from mechsim.sim.estimate import estimate


def test_sync_exposed_formula():
    assert moe.sync_exposed_s(5e-3, 2e-3, 2e-5) == pytest.approx(2e-5 + 3e-3)
    assert moe.sync_exposed_s(1e-3, 4e-3, 2e-5) == pytest.approx(2e-5)      # GPU-bound: only the sync
    with pytest.raises(ValueError):
        moe.sync_exposed_s(-1.0, 1e-3, 0.0)


def test_per_microbatch_sync_counts_layers_and_respects_the_config():
    m = preset("qwen3-30b-a3b").moe
    p = moe.moe_params("megatron_te")
    got = moe.moe_host_exposed_per_mb_s(m, "megatron_te", 48, 48 * 1e-3, ep=8)
    h = p["host_fwd_layer_s"] + 16 * p["host_fwd_expert_s"]          # 128 experts / ep 8
    assert got == pytest.approx(48 * (p["sync_s"] + max(0.0, h - 1e-3)))
    # token drop: the same host time, no sync (sim/moe.py docstring)
    drop = moe.moe_host_exposed_per_mb_s(m.model_copy(update={"capacity_factor": 1.0}), "megatron_te", 48, 48e-3, ep=8)
    assert drop == pytest.approx(48 * max(0.0, h - 1e-3)) and drop == pytest.approx(got - 48 * p["sync_s"])
    assert moe.moe_host_exposed_per_mb_s(m.model_copy(update={"capacity_factor": 1.0}), "megatron_te", 48, 1.0, ep=8) == 0.0   # GPU-bound: nothing
    assert moe.moe_host_exposed_per_mb_s(m.model_copy(update={"sync_free": True}), "megatron_te", 48, 0.05) == 0.0
    assert moe.moe_host_exposed_per_mb_s(m, "eager", 48, 0.05) == 0.0          # no entry for the stack
    assert moe.moe_host_exposed_per_mb_s(None, "megatron_te", 48, 0.05) == 0.0


def _w(**moe_fields) -> TrainingWorkload:
    cfg = preset("qwen3-30b-a3b")
    cfg = cfg.model_copy(update={"moe": cfg.moe.model_copy(update=moe_fields)})
    return TrainingWorkload(model=cfg, mbs=1, seq=4096, grad_accum=8, precision="bf16", stack="megatron_te",
                            parallel=Parallelism(dp=8, ep=8, zero=1))


def test_dropless_step_pays_the_syncs_and_sync_free_does_not():
    cl = Cluster(system="hgx_h100", nodes=1)
    drop, free = estimate(_w(), cl), estimate(_w(sync_free=True), cl)
    extra = drop.step_time_s - free.step_time_s
    assert extra > 0
    gap = drop.by_category["launch_overhead"] - free.by_category["launch_overhead"]
    # the sync-free path also runs the experts as one grouped kernel (model/ops_layer.py), the
    # synced one a GEMM per local expert: more GPU time on top of the idle time
    busy = drop.gpu_busy_s - free.gpu_busy_s
    assert busy > 0
    # the syncs add idle time; the idler step also sustains a higher clock under the power cap
    # (sim/power.py), so its compute is a little faster and the step grows by less than the gap
    assert gap >= (extra - busy) * (1 - 1e-9)
    assert drop.sm_clock_hz >= free.sm_clock_hz
    # 48 MoE layers x 8 micro-batches, each at least the sync latency
    assert extra >= 48 * 8 * moe.moe_params("megatron_te")["sync_s"]


def test_flex_dispatch_shortens_the_exposed_all_to_all():
    cl = Cluster(system="hgx_h100", nodes=1)
    a2a, flex = estimate(_w(sync_free=True), cl), estimate(_w(sync_free=True, dispatcher="flex"), cl)
    assert flex.exposed_comm["ep"] < a2a.exposed_comm["ep"]
    assert flex.step_time_s < a2a.step_time_s


def test_host_time_grows_with_the_local_experts():
    """TE GroupedLinear works per local expert on the host: fewer experts per GPU (larger ep),
    less host time per layer, never below h_layer; ep must leave at least one expert."""
    m, p = preset("qwen3-30b-a3b").moe, moe.moe_params("megatron_te")
    t = [moe.moe_host_exposed_per_mb_s(m, "megatron_te", 48, 48e-6, ep=e) for e in (4, 8, 16, 32)]
    assert t == sorted(t, reverse=True) and t[0] > t[-1]
    assert t[1] - t[2] == pytest.approx(48 * 8 * p["host_fwd_expert_s"])
    assert moe.host_fwd_layer_s(p, 1) == pytest.approx(p["host_fwd_layer_s"] + p["host_fwd_expert_s"])
    with pytest.raises(ValueError):
        moe.host_fwd_layer_s(p, 0)
