"""The pruned plan search (sim/search.py; bounds of sim/search_bounds.py) gives the rows of estimating
every plan. The bounds themselves are tested in tests/sim/test_search_bounds.py."""

import random

import pytest

from mechsim.sim import cluster as C
from mechsim.sim.search import BOUNDS, search_plans
from mechsim.sim.search_space import SearchSpace


def _rows(res):
    return [(r.plan, r.step_time_s, r.memory_bytes, r.why) for r in res.rows]


def _counts_add_up(res):
    c = res.counts
    assert c.enumerated == c.invalid_total + c.not_fitting + c.dominated + c.pruned_by_bound + c.estimated


@pytest.mark.slow
@pytest.mark.parametrize("model,cluster,gbs,seq,top,space", [
    ("llama3-8b", C.Cluster(system="hgx_h100", nodes=2), 64, 4096, 10, SearchSpace(mbs=(1, 2))),
    ("llama3-8b", C.Cluster(system="hgx_b200", nodes=2), 128, 8192, 1, SearchSpace(zero=(0, 1))),
    ("mixtral-8x7b", C.Cluster(system="hgx_h100", nodes=2), 32, 4096, 5, SearchSpace(mbs=(1, 2), max_pp=4)),
    # heavy GEMMs with the clock throttled (1,530-1,780 MHz against the 1,980 boost the bound allows)
    ("llama3-70b", C.Cluster(system="hgx_h200", nodes=4), 64, 8192, 3, SearchSpace(mbs=(1, 2), zero=(1,))),
])
def test_pruned_search_equals_estimating_every_plan(model, cluster, gbs, seq, top, space):
    """Exhaustive (bound="none": every plan that fits estimated) vs pruned by the FLOP bound, the
    layer bound and the tail bound: the same rows, step times, memory and why-lines; each tighter
    bound estimates no more plans than the one before, the layer bound fewer than the FLOP bound."""
    full, flops, layer, tail = (search_plans(model, cluster, gbs, seq, top=top, constraints=space, bound=b)
                                for b in ("none", "flops", "layer", "tail"))
    assert full.counts.pruned_by_bound == 0 and len(full.rows) == top
    assert _rows(tail) == _rows(layer) == _rows(flops) == _rows(full)
    assert tail.counts.estimated <= layer.counts.estimated < flops.counts.estimated <= full.counts.estimated
    for r in (flops, layer, tail):
        _counts_add_up(r)


MODELS = ("llama3.2-1b", "llama3-8b", "llama3.2-3b")
CLUSTERS = (("hgx_h100", 1), ("hgx_h100", 2), ("hgx_h200", 2), ("hgx_b200", 1), ("dgx_a100", 2))
STACKS = ("megatron_te", "megatron_te", "megatron_2021", "torchtitan_compile", "eager", "megatron_2021_local_ddp")


def _random_case(seed: int):
    """A small random space: model, cluster, stack, batch, sequence, top and space limits."""
    r = random.Random(seed)
    system, nodes = r.choice(CLUSTERS)
    cluster = C.Cluster(system=system, nodes=nodes)
    space = SearchSpace(mbs=tuple(sorted(r.sample((1, 2, 4), r.randint(1, 2)))),
                        zero=tuple(sorted(r.sample((0, 1, 3), r.randint(1, 3)))),
                        max_cp=r.choice((1, 2, 4)), max_pp=r.choice((2, 4, 8)),
                        recompute_only_if_needed=r.random() < 0.7)
    return (r.choice(MODELS), cluster, r.choice((32, 64, 128)) * nodes, r.choice((2048, 4096, 8192)),
            r.randint(1, 6), space, r.choice(STACKS))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_pruned_search_equals_exhaustive_on_random_spaces(seed):
    """Property: on seeded random small spaces (model, cluster, stack, batch, limits, top), the search
    pruned by the default bounds returns exactly the rows of estimating every plan that fits: the
    same plans in the same order, with the same step times, memory and why-lines."""
    model, cluster, gbs, seq, top, space, stack = _random_case(seed)
    full = search_plans(model, cluster, gbs, seq, stack=stack, top=top, constraints=space, bound="none")
    pruned = search_plans(model, cluster, gbs, seq, stack=stack, top=top, constraints=space)
    assert _rows(pruned) == _rows(full), (model, cluster, gbs, seq, top, space, stack)
    assert pruned.counts.estimated <= full.counts.estimated
    _counts_add_up(pruned)


CLOCKED = (("hgx_h100", 8), ("hgx_h100", 16), ("hgx_h200", 4), ("hgx_h200", 8))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_pruned_search_equals_exhaustive_where_the_clock_matters(seed):
    """The same property on spaces where the power model throttles the clock: 8B and 70B on 32-128
    H100s and H200s at long sequences (GEMM-heavy steps, sustained clocks well below the boost
    clock the bounds let GEMMs run at)."""
    r = random.Random(1000 + seed)
    system, nodes = r.choice(CLOCKED)
    cluster = C.Cluster(system=system, nodes=nodes)
    space = SearchSpace(mbs=(r.choice((1, 2)),), zero=tuple(sorted(r.sample((0, 1, 3), r.randint(1, 2)))),
                        max_pp=r.choice((4, 8)), recompute=("none", "selective"))
    model, gbs, seq, top = r.choice(("llama3-8b", "llama3-70b")), r.choice((2, 4)) * 8 * nodes, r.choice((4096, 8192)), r.randint(1, 5)
    full = search_plans(model, cluster, gbs, seq, top=top, constraints=space, bound="none")
    pruned = search_plans(model, cluster, gbs, seq, top=top, constraints=space)
    assert _rows(pruned) == _rows(full), (model, cluster, gbs, seq, top, space)
    _counts_add_up(pruned)


def test_unknown_bound_is_refused():
    assert BOUNDS[0] == "tail"
    with pytest.raises(ValueError, match="bound"):
        search_plans("llama3-8b", C.Cluster(system="hgx_h100", nodes=1), 32, 4096, bound="exact")
