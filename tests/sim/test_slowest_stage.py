"""The step is paced by the slowest pipeline stage when a stage holds MTP modules."""

import pytest

from mechsim.model import TrainingWorkload, preset
from mechsim.model.parallel import Parallelism
from mechsim.model.shard import timed_stage
from mechsim.sim.cluster import Cluster
from mechsim.sim.estimate import estimate_stage
from mechsim.sim.estimate import estimate


def _dsv3(mtp: int, pp: int = 8) -> TrainingWorkload:
    cfg = preset("deepseek-v3").model_copy(update={"mtp_layers": mtp})
    return TrainingWorkload(model=cfg, mbs=1, seq=4096, grad_accum=16, precision="fp8", stack="megatron_te",
                            parallel=Parallelism(pp=pp, ep=8, dp=8, zero=1, first_stage_layers=7, last_stage_layers=6))


def test_timed_stage_must_be_a_stage():
    with pytest.raises(ValueError, match="timed_stage"):
        Parallelism(pp=4, dp=2, timed_stage=4)


def test_mtp_step_is_the_slowest_of_the_flop_stage_and_the_mtp_stage():
    cl = Cluster(system="hgx_h100", nodes=8)
    w = _dsv3(1)
    e = estimate(w, cl)
    flop_stage, last = timed_stage(w.model, w.parallel), w.parallel.pp - 1
    assert flop_stage != last          # the FLOP rule alone would not time the MTP stage
    steps = {s: estimate_stage(w, s, cl).step_time_s for s in (flop_stage, last)}
    assert steps[flop_stage] != steps[last]
    assert e.step_time_s == pytest.approx(max(steps.values()))
    # without MTP the FLOP rule alone picks the stage (one estimate)
    e0 = estimate(_dsv3(0), cl)
    assert e0.step_time_s <= e.step_time_s


def test_interleaving_spreads_the_gradient_buckets_over_the_last_pp_backwards():
    from mechsim.sim.distributed import grad_ready_window_s
    assert grad_ready_window_s(0.1, Parallelism(pp=4, vp=3, dp=2), m=8) == pytest.approx(0.4)
    assert grad_ready_window_s(0.1, Parallelism(pp=4, vp=3, dp=2), m=2) == pytest.approx(0.2)
    assert grad_ready_window_s(0.1, Parallelism(pp=4, vp=1, dp=2), m=8) == pytest.approx(0.1)
    # a DP-bound plan: interleaving leaves less gradient reduction exposed than plain 1F1B
    cl = Cluster(system="hgx_b200", nodes=8)

    def w(vp, sched):
        return TrainingWorkload(model="llama3-70b", mbs=1, seq=4096, grad_accum=8, precision="bf16",
                                stack="megatron_te", parallel=Parallelism(tp=4, sp=True, pp=4, vp=vp, dp=4, zero=1,
                                                                          schedule=sched))
    inter, plain = estimate(w(5, "interleaved"), cl), estimate(w(1, "1f1b"), cl)
    assert inter.exposed_comm["dp"] < plain.exposed_comm["dp"]


def test_collectives_through_the_nic_do_not_stretch_beside_compute():
    from mechsim.sim.distributed import cluster_layouts, network_bound_stretch
    one_node = cluster_layouts(Parallelism(tp=2, dp=4), Cluster(system="hgx_b200", nodes=1))["dp"]
    four_nodes = cluster_layouts(Parallelism(tp=8, dp=4), Cluster(system="hgx_b200", nodes=4))["dp"]
    assert one_node.domains == 1 and network_bound_stretch(one_node) is None       # NVLink: comm_stretch
    assert four_nodes.domains == 4 and network_bound_stretch(four_nodes) == 1.0    # NIC-bound ring


def test_megatron_a2a_overlap_pays_stretch_and_contention_dualpipe_does_not():
    from mechsim.sim.distributed import dualpipe_ep_exposed_s
    assert dualpipe_ep_exposed_s(3.0, 2.0) == pytest.approx(1.0)                      # DualPipe rule
    # NVLink all-to-all stretched 2x beside 2 s of compute covers 1 s of it; slowdown on that 1 s
    assert dualpipe_ep_exposed_s(3.0, 2.0, 2.0, 0.3) == pytest.approx(2.0 + 0.3)
    assert dualpipe_ep_exposed_s(0.5, 2.0, 2.0, 0.3) == pytest.approx(0.15)
