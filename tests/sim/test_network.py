"""Cluster, group placement and collective times across NVLink domains (sim/cluster.py, sim/network.py)."""

import pytest

from mechsim.model.parallel import Parallelism
from mechsim.sim.calibration import efficiency_for
from mechsim.sim.cluster import Cluster, flow_rate, layout, layouts
from mechsim.sim.collectives import collective_time_s as ring_time_s
from mechsim.sim.network import collective_time_s, net_param

GiB = 2**30


def eff(c: Cluster):
    return efficiency_for(c.sys.gpu.key, c.sys.gpu.arch)


def t(op, nbytes, kind, par, c, **kw):
    return collective_time_s(op, nbytes, kind, layout(par, c, kind), c, eff(c), **kw)


def test_cluster_counts_and_graph():
    c = Cluster(system="hgx_h100", nodes=4)
    assert (c.gpus, c.gpus_per_nvlink_domain, c.nics_per_node) == (32, 8, 8)
    g = c.graph()
    assert sum(1 for n in g if n[0] == "gpu") == 32 and sum(1 for n in g if n[0] == "nic") == 32
    assert g.edges[("gpu", 0), ("nvswitch", 0)]["bw"] == pytest.approx(450e9)
    assert g.edges[("nic", 0, 0), ("leaf", 0, 0)]["bw"] == pytest.approx(50e9)
    assert c.graph() is g  # cached


def test_h800_and_nvl72_fall_out_of_hwdb():
    assert Cluster(system="hgx_h800").graph().edges[("gpu", 0), ("nvswitch", 0)]["bw"] == pytest.approx(200e9)
    rack = Cluster(system="gb200_nvl72", nodes=18)
    assert (rack.gpus, rack.gpus_per_nvlink_domain, rack.gpus_per_node) == (72, 72, 4)
    lay = layout(Parallelism(tp=64, dp=1, pp=1, cp=1), Cluster(system="gb200_nvl72", nodes=16), "tp")
    assert (lay.size, lay.per_domain, lay.domains) == (64, 64, 1)
    r = collective_time_s("all_reduce", GiB, "tp", lay, Cluster(system="gb200_nvl72", nodes=16),
                          efficiency_for("gb200", "blackwell"))
    assert r.inter_s == 0 and r.algorithm == "ring"


def test_megatron_placement():
    c = Cluster(system="hgx_h100", nodes=4)
    ls = layouts(Parallelism(tp=4, cp=2, dp=2, pp=2), c)
    assert ls["tp"].groups[0] == (0, 1, 2, 3) and (ls["tp"].per_domain, ls["tp"].domains) == (4, 1)
    assert ls["cp"].groups[0] == (0, 4)
    assert ls["dp"].groups[0] == (0, 8) and ls["dp"].domains == 2 and ls["dp"].same_rails
    assert ls["pp"].groups[0] == (0, 16)
    assert ls["dp_cp"].groups[0] == (0, 4, 8, 12) and ls["dp_cp"].per_domain == 2
    ep = layout(Parallelism(tp=2, dp=8, ep=4), Cluster(system="hgx_h100", nodes=2), "ep")
    assert ep.groups[0] == (0, 2, 4, 6) and ep.domains == 1


def test_gpu_count_mismatch_names_both_numbers():
    with pytest.raises(ValueError, match="16 GPUs.*has 8"):
        layout(Parallelism(tp=8, dp=2), Cluster(system="hgx_h100"), "dp")


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="oversubscription"):
        Cluster(oversubscription=0.5)
    with pytest.raises(ValueError, match="nodes"):
        Cluster(system="gb200_nvl72", nodes=19)
    par, c = Parallelism(dp=8), Cluster()
    with pytest.raises(ValueError, match="nbytes"):
        t("all_reduce", 0, "dp", par, c)
    with pytest.raises(ValueError, match="op: unknown"):
        t("all_to_one", 1e6, "dp", par, c)
    with pytest.raises(ValueError, match="group_kind"):
        collective_time_s("all_reduce", 1e6, "tp", layout(par, c, "dp"), c, eff(c))
    with pytest.raises(ValueError, match="group kind"):
        layout(par, c, "xp")


def test_8_gpus_in_a_node_use_nvlink_only_with_the_calibrated_ring():
    c = Cluster(system="hgx_h100")
    r = t("all_reduce", GiB, "dp", Parallelism(dp=8), c)
    assert r.inter_s == 0 and r.algorithm == "ring"
    assert r.time_s == pytest.approx(ring_time_s("all_reduce", GiB, 8, 450e9, eff(c)))
    lat, f = eff(c).get("collective.all_reduce.latency_s"), eff(c).get("collective.all_reduce.bw_fraction")
    assert r.time_s == pytest.approx(lat + 2 * 7 / 8 * GiB / (450e9 * f))


def test_tp8_dp2_puts_dp_on_the_nics_at_50GBps_per_gpu():
    c, par = Cluster(system="hgx_h100", nodes=2), Parallelism(tp=8, dp=2)
    lay = layout(par, c, "dp")
    assert (lay.size, lay.per_domain, lay.domains, lay.same_rails) == (2, 1, 2, True)
    assert flow_rate(c, lay.groups, "ring") == pytest.approx(50e9)
    r = t("all_reduce", GiB, "dp", par, c, algorithm="ring")
    f, h = net_param("fabric.infiniband.bw_fraction"), net_param("fabric.infiniband.hop_latency_s")
    assert r.intra_s == 0
    assert r.inter_s == pytest.approx(2 * h + 2 * 1 / 2 * GiB / (50e9 * f))


def test_hierarchical_is_intra_plus_inter():
    c, par = Cluster(system="hgx_h100", nodes=4), Parallelism(dp=32)
    r = t("all_reduce", GiB, "dp", par, c, algorithm="ring")
    e, f, h = eff(c), net_param("fabric.infiniband.bw_fraction"), net_param("fabric.infiniband.hop_latency_s")
    intra = ring_time_s("reduce_scatter", GiB, 8, 450e9, e) + ring_time_s("all_gather", GiB, 8, 450e9, e)
    inter = 2 * 3 * h + 2 * 3 / 4 * (GiB / 8) / (50e9 * f)
    assert (r.intra_s, r.inter_s) == (pytest.approx(intra), pytest.approx(inter))
    assert r.time_s == pytest.approx(intra + inter) and r.algorithm == "hierarchical_ring"
    p = t("all_reduce", GiB, "dp", par, c, algorithm="ring", pipelined=True)
    assert p.time_s == pytest.approx(max(intra, inter))


def test_tree_wins_small_messages_across_many_nodes():
    c, par = Cluster(system="hgx_h100", nodes=64), Parallelism(tp=8, dp=64)
    small, big = t("all_reduce", 64e3, "dp", par, c), t("all_reduce", 4 * GiB, "dp", par, c)
    assert small.algorithm == "hierarchical_tree" and big.algorithm == "hierarchical_ring"
    h = net_param("fabric.infiniband.hop_latency_s")
    assert t("all_reduce", 8, "dp", par, c, algorithm="tree").inter_s == pytest.approx(2 * 6 * h, rel=1e-3)


def test_h800_nvlink_is_2_25x_slower_than_h100_at_large_sizes():
    e = efficiency_for("h100_sxm", "hopper")
    par, h100, h800 = Parallelism(tp=8), Cluster(system="hgx_h100"), Cluster(system="hgx_h800")
    a = collective_time_s("all_reduce", 16 * GiB, "tp", layout(par, h100, "tp"), h100, e).time_s
    b = collective_time_s("all_reduce", 16 * GiB, "tp", layout(par, h800, "tp"), h800, e).time_s
    assert b / a == pytest.approx(2.25, rel=0.01)


def test_nvls_is_opt_in_and_only_where_the_switch_has_it():
    c, par = Cluster(system="hgx_h200"), Parallelism(dp=8)
    assert t("all_reduce", GiB, "dp", par, c).algorithm == "ring"
    r = t("all_reduce", GiB, "dp", par, c, in_network=True)
    assert r.algorithm == "nvls" and r.time_s < t("all_reduce", GiB, "dp", par, c).time_s
    a100 = Cluster(system="hgx_h100").model_copy()  # every hwdb system is Hopper+; check the rule
    assert net_param("nvls.archs") == ["hopper", "blackwell"] and a100.sys.gpu.arch == "hopper"


def test_more_nic_bandwidth_is_never_slower():
    par = Parallelism(tp=8, dp=4)
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"):
        slow = t(op, GiB, "dp", par, Cluster(system="hgx_h100", nodes=4)).time_s
        fast = t(op, GiB, "dp", par, Cluster(system="hgx_h100", nodes=4, fabric="cx8_800g")).time_s
        assert fast < slow, op


def test_oversubscription_is_never_faster_and_hurts_cross_rail_all_to_all():
    par = Parallelism(tp=1, dp=256, ep=256)
    base = dict(system="hgx_h100", nodes=32, topology="fat_tree")
    for kind, op in (("dp", "all_reduce"), ("ep", "all_to_all")):
        full = t(op, GiB, kind, par, Cluster(**base)).time_s
        over = t(op, GiB, kind, par, Cluster(**base, oversubscription=2.0)).time_s
        assert over >= full, kind
    full = t("all_to_all", GiB, "ep", par, Cluster(**base))
    over = t("all_to_all", GiB, "ep", par, Cluster(**base, oversubscription=4.0))
    assert over.inter_s > full.inter_s


def test_dp_rings_of_a_tp4_job_use_distinct_rails():
    # tp=4: two DP slots per node; the 8 inter-node rings still land on 8 different rails
    c, par = Cluster(system="hgx_h100", nodes=2), Parallelism(tp=4, dp=4)
    lay = layout(par, c, "dp")
    assert (lay.per_domain, lay.domains) == (2, 2)
    assert flow_rate(c, lay.groups, "ring") == pytest.approx(50e9)  # 8 rings, 8 rails, no sharing


def test_all_to_all_and_sendrecv_closed_forms():
    c, par = Cluster(system="hgx_h100", nodes=2), Parallelism(tp=1, dp=16, ep=16)
    r = t("all_to_all", GiB, "ep", par, c)
    e, f, h = eff(c), net_param("fabric.infiniband.bw_fraction"), net_param("fabric.infiniband.hop_latency_s")
    intra = e.get("collective.all_gather.latency_s") + 7 / 16 * GiB / (450e9 * e.get("collective.all_gather.bw_fraction"))
    inter = h + (GiB / 16) / (50e9 / 8 * f)  # 8 cross-node flows share each GPU's NIC
    assert (r.intra_s, r.inter_s, r.time_s) == (pytest.approx(intra), pytest.approx(inter), pytest.approx(max(intra, inter)))
    pp = Parallelism(tp=8, pp=2)
    s = t("sendrecv", 1e8, "pp", pp, c)
    assert s.algorithm == "p2p_net" and s.time_s == pytest.approx(h + 1e8 / (50e9 * f))
    s1 = t("sendrecv", 1e8, "pp", Parallelism(tp=4, pp=2), Cluster(system="hgx_h100"))
    assert s1.algorithm == "p2p_nvlink" and s1.inter_s == 0


def test_efa_p5_splits_each_gpu_over_four_devices():
    c = Cluster(system="aws_p5", nodes=2)
    assert c.nics_per_node == 32 and c.nic_bw_per_gpu == pytest.approx(50e9)
    assert flow_rate(c, layout(Parallelism(tp=8, dp=2), c, "dp").groups, "ring") == pytest.approx(50e9)


def test_a_job_on_part_of_each_nvl72_rack():
    """256 GPUs cannot fill NVL72 racks of 72: Slurm block scheduling gives equal parts of 64
    (16 trays); NVLink inside a part, the scale-out NICs between parts."""
    from mechsim.sim.cluster import segment_gpus
    from mechsim.hwdb import get_system
    nvl = get_system("gb200_nvl72")
    assert (segment_gpus(nvl, 256), segment_gpus(nvl, 128), segment_gpus(nvl, 144), segment_gpus(nvl, 8)) == (64, 64, 72, 8)
    with pytest.raises(ValueError, match="domain_gpus"):
        Cluster(system="gb200_nvl72", nodes=64)
    with pytest.raises(ValueError, match="domain_gpus"):
        Cluster(system="gb200_nvl72", nodes=64, domain_gpus=62)            # not whole trays
    with pytest.raises(ValueError, match="domain_gpus"):
        Cluster(system="gb200_nvl72", nodes=64, domain_gpus=76)            # more than a rack
    c = Cluster(system="gb200_nvl72", nodes=64, domain_gpus=64)
    assert (c.gpus, c.gpus_per_nvlink_domain, c.domain_of(63), c.domain_of(64)) == (256, 64, 0, 1)
    par = Parallelism(tp=1, pp=4, dp=64, cp=1, ep=64)
    ep = layout(par, c, "ep")
    assert (ep.size, ep.per_domain, ep.domains) == (64, 64, 1)          # an EP group fills one part
    dp = layout(par, c, "dp")
    assert dp.domains == 1 and layout(par, c, "pp").domains == 4        # pipeline stages cross racks
    # a smaller part of the same rack puts more of a group on the NICs: never faster
    eff = efficiency_for("gb200", "blackwell")
    c32 = Cluster(system="gb200_nvl72", nodes=64, domain_gpus=32)
    t64 = collective_time_s("all_reduce", GiB, "dp", layout(par, c, "dp"), c, eff)
    t32 = collective_time_s("all_reduce", GiB, "dp", layout(par, c32, "dp"), c32, eff)
    assert t32.total > t64.total
