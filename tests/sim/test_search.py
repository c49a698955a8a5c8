"""Plan search (sim/search.py, sim/search_space.py) and the numpy network twins (sim/netfast.py)."""

import itertools
import random

import re

import pytest

from mechsim.sim.memory import parallel_components

from mechsim.model import TrainingWorkload
from mechsim.model.parallel import Parallelism
from mechsim.sim import cluster as C
from mechsim.sim import netfast as F
from mechsim.sim.estimate import estimate
from mechsim.sim.search import PlanRow, search_plans, why
from mechsim.sim.search_space import Bounds, SearchSpace
from mechsim.sim.stacks import get_stack

NODE = C.Cluster(system="hgx_h100", nodes=1)


@pytest.fixture(scope="module")
def tiny():
    return search_plans("llama3.2-1b", NODE, gbs=64, seq=4096, top=10)


@pytest.fixture(scope="module")
def mid():
    return search_plans("llama3-8b", C.Cluster(system="hgx_h100", nodes=2), gbs=64, seq=4096, top=8)


def test_pure_dp_wins_when_the_model_fits(tiny):
    # 1B params fit on each GPU many times over: any split of the model only adds
    # communication and smaller GEMMs, so the best plan is data parallel over all 8 GPUs.
    best = tiny.best.parallel
    assert (best.tp, best.pp, best.cp, best.dp) == (1, 1, 1, 8)
    assert tiny.best.recompute == "none"


@pytest.mark.parametrize("res", ["tiny", "mid"])
def test_rows_are_valid_fit_and_sorted(res, request):
    r = request.getfixturevalue(res)
    assert r.rows
    for row in r.rows:
        p = row.parallel
        assert p.tp * p.pp * p.dp * p.cp == r.gpus
        assert row.mbs * row.grad_accum * p.dp == r.gbs
        assert row.headroom_bytes >= 0 and row.memory_bytes <= 80 * 2**30 * 1.1
        assert p.tp <= 8                                  # NVLink domain of an HGX H100
    times = [x.step_time_s for x in r.rows]
    assert times == sorted(times)
    c = r.counts
    assert c.enumerated == c.invalid_total + c.not_fitting + c.dominated + c.pruned_by_bound + c.estimated


def test_rows_equal_the_estimator(mid):
    """The fast layouts and flow rates change nothing: each row is estimate() of its plan."""
    cl = C.Cluster(system="hgx_h100", nodes=2)
    for row in mid.rows[:3]:
        w = TrainingWorkload(model="llama3-8b", seq=4096, precision="bf16", stack="megatron_te", mbs=row.mbs,
                             grad_accum=row.grad_accum, recompute=row.recompute, parallel=row.parallel)
        e = estimate(w, cl)
        assert e.step_time_s == pytest.approx(row.step_time_s, rel=1e-12)
        assert e.memory.total == pytest.approx(row.memory_bytes, rel=1e-12) and e.memory.fits


def test_a_plan_that_does_not_fit_is_never_listed():
    # 70B with AdamW needs ~16 B/param = 1.1 TB of states: more than 8 x 80 GB in any plan.
    r = search_plans("llama3-70b", NODE, gbs=16, seq=4096)
    assert r.rows == () and r.counts.not_fitting > 0 and r.counts.estimated == 0


def test_pinned_space_and_no_nvlink_crossing():
    r = search_plans("llama3-8b", C.Cluster(system="hgx_h100", nodes=2), gbs=32, seq=4096, top=3,
                     constraints=SearchSpace(tp=(4, 16), zero=(1,), recompute=("none",)))
    assert all(x.parallel.tp == 4 and x.parallel.zero == 1 for x in r.rows)
    wide = search_plans("llama3-8b", C.Cluster(system="hgx_h100", nodes=2), gbs=32, seq=4096, top=3,
                        constraints=SearchSpace(tp=(16,), tp_beyond_nvlink=True, zero=(1,), recompute=("none",)))
    assert all(x.parallel.tp == 16 for x in wide.rows) and wide.rows


def _plans(cfg_name, gpus):
    for tp, cp, pp, mbs, rc, zero in itertools.product((1, 2, 4, 8), (1, 2), (1, 2, 4), (1, 2),
                                                         ("none", "selective", "full"), (0, 1, 3)):
        if gpus % (tp * cp * pp):
            continue
        dp = gpus // (tp * cp * pp)
        try:
            yield TrainingWorkload(model=cfg_name, seq=4096, precision="bf16", stack="megatron_te", mbs=mbs,
                                   grad_accum=64 // (dp * mbs), recompute=rc,
                                   parallel=Parallelism(tp=tp, sp=tp > 1, pp=pp, dp=dp, cp=cp, zero=zero))
        except ValueError:
            continue


def test_bounds_memory_counts_the_loss_allocator_reserve():
    """An eager loss (torchtitan) on stage 0 adds the allocator's 2 T V reserve, as estimate does."""
    fused = get_stack("torchtitan_compile").fused
    base = TrainingWorkload(model="llama3-8b", seq=4096, precision="bf16", stack="torchtitan_compile")
    b = Bounds(base, fused, NODE.sys.gpu)
    w = base.model_copy(update={"mbs": 2, "grad_accum": 4, "parallel": Parallelism(dp=8, zero=3)})
    comps = parallel_components(w, fused)
    assert comps["allocator_reserve"] == 2 * 2 * 4096 * 128256
    assert b.memory(w) == pytest.approx(sum(comps.values()), rel=1e-12)


def test_bounds_memory_exact_and_time_below_the_estimate():
    fused = get_stack("megatron_te").fused
    base = TrainingWorkload(model="llama3-8b", seq=4096, precision="bf16", stack="megatron_te")
    b = Bounds(base, fused, NODE.sys.gpu)
    plans = list(_plans("llama3-8b", 8))
    random.Random(0).shuffle(plans)
    assert len(plans) > 40
    ratios = []
    for w in plans[:40]:
        assert b.memory(w) == pytest.approx(sum(parallel_components(w, fused).values()), rel=1e-12)
        e = estimate(w, NODE)
        assert b.step_lb(w, 8, 64) <= e.step_time_s
        ratios.append(b.step_lb(w, 8, 64) / e.step_time_s)
    assert sorted(ratios)[len(ratios) // 2] > 0.5          # a bound tight enough to prune


@pytest.mark.parametrize("cl", [C.Cluster(system="hgx_h100", nodes=16),
                                C.Cluster(system="hgx_h100", nodes=16, topology="fat_tree", oversubscription=2.0),
                                C.Cluster(system="gb200_nvl72", nodes=36)])
def test_fast_layouts_and_flow_rates_equal_cluster_py(cl):
    for tp, cp, pp, ep in itertools.product((1, 2, 8), (1, 4), (1, 2, 4), (1, 4)):
        dp = cl.gpus // (tp * cp * pp)
        if cl.gpus % (tp * cp * pp) or (dp * cp) % ep:
            continue
        par = Parallelism(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep)
        for kind in C.GROUP_KINDS:
            a, b = C.layout(par, cl, kind), F.layout(par, cl, kind)
            assert (a.size, a.per_domain, a.domains, a.same_rails) == (b.size, b.per_domain, b.domains, b.same_rails)
            assert sorted(a.groups) == sorted(b.groups)
            for pattern in ("ring", "chain", "all_to_all"):
                assert F.flow_rate(cl, b.groups, pattern) == pytest.approx(C.flow_rate(cl, a.groups, pattern),
                                                                         rel=1e-12)


def test_estimates_use_the_numpy_twins():
    from mechsim.sim import distributed, network
    assert network.flow_rate is F.flow_rate
    assert distributed.cluster_layouts.__module__ == "mechsim.sim.distributed"


def test_why_names_the_difference():
    p1, p2 = Parallelism(tp=8, sp=True, dp=2), Parallelism(tp=16, sp=True, dp=1)
    a = PlanRow(p1, 1, 8, "none", 1.0, 1, 0.4, 1, 1, 0.8, {"tp": 0.05, "dp": 0.1}, 0.0)
    b = PlanRow(p2, 1, 8, "none", 1.2, 1, 0.3, 1, 1, 0.8, {"tp": 0.3, "dp": 0.05}, 0.0)
    s = why(a, b, NODE)
    assert "16.7% faster" in s and "tp=8 vs 16" in s and "inside NVLink" in s and "tp comm -250 ms" in s


def test_rejects_a_system_name():
    with pytest.raises(TypeError, match="Cluster"):
        search_plans("llama3.2-1b", "hgx_h100", gbs=8, seq=1024)


def test_cli_plan_prints_the_table(capsys):
    from mechsim.cli import main
    assert main(["plan", "--model", "llama3.2-1b", "--nodes", "1", "--gbs", "16", "--seq", "2048", "--top", "2"]) == 0
    out = capsys.readouterr().out
    # the winner: a 1B model on one node keeps to data parallelism with at most tp 2 (the top
    # plans are within 0.5 % of each other: tp=2 dp=4 and dp=8)
    assert "enumerated" in out and "why:" in out
    winner = re.search(r"^ 1 (tp=\d+ )?dp=\d+ .*$", out, re.M)
    assert winner and re.match(r" 1 (tp=2 dp=4|dp=8) ", winner.group(0)) and "pp=" not in winner.group(0)
    assert main(["plan", "--model", "llama3.2-1b", "--nodes", "1", "--gbs", "0"]) == 2


def test_torchtitan_fsdp_pipeline_plans_keep_units_gathered():
    """A torchtitan stack's zero-3 plans with pp > 1 run as torchtitan does (overlap.toml
    [fsdp.keep_unsharded_under_pp]), and the listed memory is that plan's."""
    space = SearchSpace(tp=(1,), zero=(3,), recompute=("full",))
    r = search_plans("llama3-8b", C.Cluster(system="hgx_h100", nodes=2), gbs=32, seq=4096, top=20,
                     stack="torchtitan_compile", constraints=space)
    pp_rows = [x for x in r.rows if x.parallel.pp > 1]
    assert pp_rows and all(x.parallel.fsdp_keep_unsharded for x in pp_rows)
    assert not any(x.parallel.fsdp_keep_unsharded for x in r.rows if x.parallel.pp == 1)
    x = pp_rows[0]
    w = TrainingWorkload(model="llama3-8b", seq=4096, precision="bf16", stack="torchtitan_compile", mbs=x.mbs,
                         grad_accum=x.grad_accum, recompute=x.recompute, parallel=x.parallel)
    assert estimate(w, C.Cluster(system="hgx_h100", nodes=2)).memory.total == pytest.approx(x.memory_bytes, rel=1e-12)
