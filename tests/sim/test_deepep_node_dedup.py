"""DeepEP / HybridEP node-deduplicated dispatch (sim/moe.flex_node_scales, sim/network a2a_scales)."""

from math import comb

import pytest

from mechsim.model.comm import ranks_hit
from mechsim.model.parallel import Parallelism
from mechsim.sim.calibration import efficiency_for
from mechsim.sim.cluster import Cluster, layout
from mechsim.sim.moe import flex_node_scales
from mechsim.sim.network import collective_time_s


def test_one_node_is_unchanged():
    assert flex_node_scales(128, 8, 8, 8) == (1.0, 1.0)


def test_inter_scale_closed_form_deepseek_v3_ep32_on_4_nodes():
    # remote nodes hit: 3 (1 - C(192, 8)/C(256, 8)); remote ranks hit: D 24/32
    nodes = 3 * (1 - comb(192, 8) / comb(256, 8))
    ranks = 32 * (1 - comb(248, 8) / comb(256, 8)) * 24 / 32
    inter, intra = flex_node_scales(256, 8, 32, 8)
    assert inter == pytest.approx(nodes / ranks, rel=1e-12)
    assert intra == 4.0
    assert 0.45 < inter < 0.55


def test_one_expert_per_node_dedups_nothing():
    # one GPU per "node" domain: a node is a rank, RDMA bytes = remote ranks' bytes
    assert flex_node_scales(64, 8, 16, 1)[0] == pytest.approx(1.0)


def test_top1_never_sends_a_token_twice():
    # top-1: one destination, node and rank counts agree
    assert flex_node_scales(128, 1, 16, 8)[0] == pytest.approx(1.0)


def test_dedup_grows_with_top_k():
    assert flex_node_scales(128, 8, 16, 8)[0] < flex_node_scales(128, 2, 16, 8)[0] < 1.0


def test_bad_layout_raises():
    with pytest.raises(ValueError, match="per_domain"):
        flex_node_scales(128, 8, 12, 8)


def test_dedup_shortens_cross_node_all_to_all_only():
    c = Cluster(system="hgx_h100", nodes=2)
    par = Parallelism(tp=1, dp=16, ep=16)
    lay, e = layout(par, c, "ep"), efficiency_for(c.sys.gpu.key, c.sys.gpu.arch)
    s = 4096 * ranks_hit(128, 8, 8, 16) * 2048 * 2
    flat = collective_time_s("all_to_all", s, "ep", lay, c, e)
    dedup = collective_time_s("all_to_all", s, "ep", lay, c, e, a2a_scales=flex_node_scales(128, 8, 16, 8))
    assert dedup.inter_s < 0.5 * flat.inter_s
    assert dedup.intra_s > flat.intra_s          # NVLink forwarding of the remote copies
    assert dedup.time_s < flat.time_s


def _dsv3_b200(**moe):
    from mechsim.model import TrainingWorkload, preset
    from mechsim.validation.analysis.published_compare import pipeline_split
    cfg = preset("deepseek-v3")
    cfg = cfg.model_copy(update={"moe": cfg.moe.model_copy(update={"dispatcher": "flex", **moe})})
    par = Parallelism(pp=8, vp=2, ep=32, dp=32, zero=1, schedule="interleaved", **pipeline_split(cfg, 8, 2))
    return TrainingWorkload(model=cfg, mbs=1, seq=4096, grad_accum=16, precision="fp8",
                            stack="megatron_te", parallel=par)


def test_flex_dispatch_dedup_and_a2a_overlap_in_the_estimate():
    from mechsim.sim.estimate import estimate
    cl = Cluster(system="hgx_b200", nodes=32)
    flex, ovl = estimate(_dsv3_b200(), cl), estimate(_dsv3_b200(a2a_overlap=True), cl)
    assert ovl.exposed_comm["ep"] < flex.exposed_comm["ep"]
    assert ovl.step_time_s < flex.step_time_s
    # alltoall dispatcher: every copy crosses, no node dedup -> more EP time than flex
    a2a = estimate(_dsv3_b200(dispatcher="alltoall"), cl)
    assert a2a.exposed_comm["ep"] > 1.5 * flex.exposed_comm["ep"]
