"""CP K/V exchange exposure (sim/overlap.cp_exposed_s) and the releases' cp_comm (sim/data/recipes)."""

import pytest

from mechsim.sim.overlap import beside_compute_exposed_s, cp_exposed_s
from mechsim.sim.recipes import recipe

K, SLOW = 1.95, 0.328


def test_ring_alone_is_the_beside_compute_rule():
    for ring, attn in ((0.5, 10.0), (4.0, 3.0)):
        assert cp_exposed_s(0.0, ring, attn, 4, K, SLOW) == beside_compute_exposed_s(ring, attn, K, SLOW)


def test_an_all_gather_hides_only_behind_step_zero():
    """Waited at step 1: only the first of cp steps covers it (hand-computed, no stretch or slowdown)."""
    assert cp_exposed_s(2.0, 0.0, 8.0, 8, 1.0, 0.0) == pytest.approx(2.0 - 8.0 / 8)
    assert cp_exposed_s(0.5, 0.0, 8.0, 8, 1.0, 0.0) == 0.0
    # the same seconds as a ring hide behind the whole phase
    assert cp_exposed_s(0.0, 2.0, 8.0, 8, 1.0, 0.0) == 0.0


def test_waited_where_issued_exposes_everything():
    assert cp_exposed_s(1.5, 0.7, 100.0, 4, K, SLOW, overlapped=False) == pytest.approx(2.2)


def test_never_less_exposed_than_overlapped_and_monotone_in_comm():
    for g, r in ((0.0, 1.0), (1.0, 0.0), (0.3, 0.9)):
        assert cp_exposed_s(g, r, 5.0, 4, K, SLOW, False) >= cp_exposed_s(g, r, 5.0, 4, K, SLOW)
        assert cp_exposed_s(g + 0.1, r, 5.0, 4, K, SLOW) >= cp_exposed_s(g, r, 5.0, 4, K, SLOW)


def test_releases_state_their_cp_comm():
    tt = recipe("torchtitan-2024-12")
    assert tt.resolve("llama3-8b")["cp_comm"] == "allgather"
    assert tt.resolve("llama3-8b")["cp_comm_overlap"] is True
    assert tt.resolve("llama3-8b", techniques=("torch.compile",))["cp_comm_overlap"] is False
    assert recipe("torchtitan-2025-06").resolve("llama3.1-8b")["cp_comm"] == "allgather"
    for name in ("nemo-24.03", "nemo-24.07", "megatron-bridge-26.02"):
        s = recipe(name).resolve("llama3-8b")
        assert (s["cp_comm"], s["cp_comm_overlap"]) == ("p2p_ring", True)


def test_unknown_cp_comm_is_refused(tmp_path):
    from mechsim.sim import recipes as r
    (tmp_path / "x.toml").write_text('[recipe."x"]\nframework = "f"\nrelease = "1"\nsoftware = ["x 1"]\n'
                                     'source = "s"\n[recipe."x".set]\ncp_comm = "ring"\n')
    with pytest.raises(ValueError, match="cp_comm"):
        r._all.__wrapped__(tmp_path)


def test_parallelism_cp_comm_reaches_the_op_list_and_the_exposure():
    """A plan's cp_comm builds that method's calls (model/ops_layer -> comm.cp_ring) and an estimate exposes
    them by overlap.cp_exposed_s: waited where issued exposes at least the overlapped all_gather, which
    exposes at least the overlapped ring; the default plan is the p2p ring."""
    import mechsim
    from mechsim.model import TrainingWorkload, build_ops, preset
    from mechsim.model.parallel import Parallelism

    def est(**kw):
        w = TrainingWorkload(model=preset("llama3.1-8b"), mbs=1, seq=65536,
                             parallel=Parallelism(tp=1, cp=8, dp=1, **kw))
        return w, mechsim.estimate(w, "hgx_h100")

    (w_ring, ring), (w_ag, ag), (_, ag_waited) = est(), est(cp_comm="allgather"), \
        est(cp_comm="allgather", cp_comm_overlap=False)
    names = {o.name for o in build_ops(w_ag)}
    assert any("kv_allgather" in n for n in names)
    assert not any("kv_allgather" in n for n in {o.name for o in build_ops(w_ring)})
    assert ag_waited.step_time_s >= ag.step_time_s > 0 and ring.step_time_s > 0


def test_unknown_plan_cp_comm_names_the_field():
    from pydantic import ValidationError

    from mechsim.model.parallel import Parallelism
    with pytest.raises(ValidationError, match="cp_comm"):
        Parallelism(cp=2, cp_comm="ring")
