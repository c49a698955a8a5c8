"""The power history of back-to-back GEMM microbenchmarks: validation/analysis/gemm_power.py carries the
board's power average through a run with the simulator's controller model (sim/clock.py)."""

import math

import pytest

from mechsim.sim.clock import boost_left_s, boosted_share, relax
from mechsim.validation.analysis import gemm_power as G
from mechsim.validation.analysis.predict import predict

H200 = "h200_sxm"


def test_boost_left_closed_form():
    assert boost_left_s(0.0, 2.0, 0.1) == pytest.approx(0.1 * math.log(2.0))
    assert boost_left_s(0.5, 2.0, 0.1) == pytest.approx(0.1 * math.log(1.5))
    assert boost_left_s(1.0, 2.0, 0.1) == 0.0
    assert boost_left_s(0.3, 0.9, 0.1) == math.inf   # under the cap: never throttled


def test_relax_reaches_the_boost_time_and_holds_at_the_cap():
    t = boost_left_s(0.2, 1.5, 0.05)
    assert relax(0.2, 1.5, t, 0.05) == pytest.approx(1.0)
    assert relax(0.2, 1.5, 10 * t, 0.05) == 1.0            # the controller holds p at the cap
    assert relax(1.0, 0.0, 0.05, 0.05) == pytest.approx(math.exp(-1.0))   # idle: decays


def _case(idle=0.0, pre=0.005, win=0.03):
    return G.CaseTimeline(idle, pre, win)


def test_a_hot_history_raises_the_start_load_and_idle_restores_it():
    x = G.loads_at_windows([_case(), _case()], [2.0, 2.0], [True, False], 0.0, H200)
    assert x[1] > x[0] + 0.1
    cooled = G.loads_at_windows([_case(), _case(idle=5.0)], [2.0, 2.0], [True, False], 0.0, H200)
    assert cooled[1] < 0.2
    low = G.loads_at_windows([_case(), _case()], [0.2, 2.0], [True, False], 0.0, H200)
    assert low[1] < x[1]                                   # low-power work heats less


def test_boosted_share_of_the_median():
    assert boosted_share(0.02, 0.05, 0.01) == pytest.approx(1.0)
    assert boosted_share(0.2, 0.05, 0.01) == pytest.approx(math.exp(-5.0))
    assert boosted_share(10.0, math.inf, 0.01) == pytest.approx(1.0)


def _rec(cid, m, wall, median, n=30, inner=1):
    return {"case_id": cid, "kind": "gemm", "params": {"dtype": "bf16", "m": m, "n": m, "k": m, "tags": ["square"]},
            "timing": {"method": "graph_rotating", "median_s": median, "min_s": median, "max_s": median,
                       "n": n, "inner": inner}, "extra": {"case_wall_s": wall, "t_estimate_s": median},
            "env_sample": {"group": "gemm/square"}}


def test_case_timeline_splits_the_wall():
    c = G.case_timeline(_rec("a", 8192, 0.1, 1.4e-3))
    assert c.window_s == pytest.approx(30 * 1.4e-3)
    assert c.prework_s == pytest.approx(3 * 1.4e-3 + 2e-3 + 1.4e-3)
    assert c.idle_s == pytest.approx(0.1 - c.window_s - c.prework_s)


def test_the_same_gemm_after_a_long_hot_case_is_predicted_slower():
    env = {"gpu_name": "NVIDIA H200"}
    probe = _rec("probe", 8192, 0.06, 1.4e-3)
    hot = _rec("hot", 16384, 0.4, 11e-3, n=30)
    first = predict(probe, env, {"run_id": "t1", "records": [probe], "env": env})
    after = predict(probe, env, {"run_id": "t2", "records": [hot, probe], "env": env})
    assert after > first * 1.03
