"""The pruned plan search (sim/search.py; bounds of sim/search_bounds.py) gives the rows of estimating
every plan. The layer bound itself is tested in tests/sim/test_search_bounds.py."""

import pytest

from mechsim.sim import cluster as C
from mechsim.sim.search import search_plans
from mechsim.sim.search_space import SearchSpace


def _rows(res):
    return [(r.plan, r.step_time_s, r.memory_bytes, r.why) for r in res.rows]


@pytest.mark.slow
@pytest.mark.parametrize("model,cluster,gbs,seq,top,space", [
    ("llama3-8b", C.Cluster(system="hgx_h100", nodes=2), 64, 4096, 10, SearchSpace(mbs=(1, 2))),
    ("llama3-8b", C.Cluster(system="hgx_b200", nodes=2), 128, 8192, 1, SearchSpace(zero=(0, 1))),
    ("mixtral-8x7b", C.Cluster(system="hgx_h100", nodes=2), 32, 4096, 5, SearchSpace(mbs=(1, 2), max_pp=4)),
])
def test_pruned_search_equals_estimating_every_plan(model, cluster, gbs, seq, top, space):
    """Exhaustive (bound="none": every plan that fits estimated) vs pruned by the FLOP bound vs
    pruned by the layer bound: the same rows, step times, memory and why-lines; the layer bound
    estimates fewer plans than the FLOP bound."""
    full, flops, layer = (search_plans(model, cluster, gbs, seq, top=top, constraints=space, bound=b)
                          for b in ("none", "flops", "layer"))
    assert full.counts.pruned_by_bound == 0 and len(full.rows) == top
    assert _rows(layer) == _rows(flops) == _rows(full)
    assert layer.counts.estimated < flops.counts.estimated <= full.counts.estimated
    for r in (flops, layer):
        c = r.counts
        assert c.enumerated == c.invalid_total + c.not_fitting + c.dominated + c.pruned_by_bound + c.estimated


def test_unknown_bound_is_refused():
    with pytest.raises(ValueError, match="bound"):
        search_plans("llama3-8b", C.Cluster(system="hgx_h100", nodes=1), 32, 4096, bound="exact")
