"""Failures and goodput: Young/Daly closed forms, the Llama 3 reproduction, invariants, bad input."""

from __future__ import annotations

import math

import pytest
from mechsim.model import TrainingWorkload, preset
from mechsim.sim.reliability import (
    ReliabilityParams,
    checkpoint_bytes,
    daly_interval_s,
    goodput,
    interruptions_per_day,
    job_failure_rate,
    poisson_quantile,
    reliability_params,
    run_reliability,
    spares_needed,
    transfer_time_s,
    wall_time_s,
    young_interval_s,
)

H = 3600.0


def test_young_interval_closed_form():
    assert young_interval_s(300.0, 86400.0) == pytest.approx(math.sqrt(2 * 300 * 86400))


@pytest.mark.parametrize("mtbf_h,minutes", [(24, 117), (6, 57), (0.25, 9.1)])
def test_daly_reproduces_the_paper_cases(mtbf_h, minutes):
    """Daly (2006) worked cases, delta = 5 min: M = 24 h -> 117 min, 6 h -> 57 min, 15 min -> 9.1 min."""
    assert daly_interval_s(300.0, mtbf_h * H) / 60 == pytest.approx(minutes, abs=0.5)


def test_daly_caps_at_mtbf_when_checkpoints_are_slow():
    assert daly_interval_s(3 * H, 1 * H) == 1 * H


def test_interruptions_per_day():
    assert interruptions_per_day(16384, 50000) == pytest.approx(16384 * 24 / 50000)


def test_default_rates_reproduce_llama3_interruptions():
    """419 unexpected interruptions in 54 days on 16,384 H100 (2,048 nodes): one per ~3.1 h."""
    p = reliability_params()
    mtbf_h = 1 / job_failure_rate(16384, 2048, p.gpu_mtbf_s, p.node_mtbf_s) / H
    assert mtbf_h == pytest.approx(54 * 24 / 419, rel=0.01)


def test_llama3_scale_goodput_is_above_90_percent_as_published():
    r = run_reliability(16384, 2048, 405e9 * 14)
    assert 0.90 < r.goodput < 1.0
    assert r.interruptions_per_day == pytest.approx(419 / 54, rel=0.01)


def test_checkpoint_is_weights_plus_optimizer_state():
    w = TrainingWorkload(model=preset("llama3-8b"), seq=4096, precision="bf16", stack="megatron_te")
    assert checkpoint_bytes(w) == pytest.approx(14 * w.model.param_count())


def test_transfer_time():
    assert transfer_time_s(2e12, 1e12) == pytest.approx(2.0)


def test_more_failures_never_raise_goodput():
    base = reliability_params()
    goods = [run_reliability(1024, 128, 1e12, ReliabilityParams(**{**base.__dict__, "failure_rate_scale": f})).goodput
             for f in (0.25, 0.5, 1, 2, 4, 8)]
    assert goods == sorted(goods, reverse=True) and goods[0] < 1.0


def test_young_interval_is_near_the_goodput_optimum():
    d, m, rec = 60.0, 5 * H, 600.0
    tau = young_interval_s(d, m)
    assert goodput(tau, d, rec, m) >= max(goodput(tau / 2, d, rec, m), goodput(2 * tau, d, rec, m))


def test_wall_time_closed_form_and_never_ending_runs():
    assert wall_time_s(100.0, 10.0, 1.0, 5.0, 1e9) == pytest.approx(110.0, rel=1e-6)
    assert math.isinf(wall_time_s(100.0, 3 * H, 1.0, H, 2 * H))
    assert goodput(3 * H, 1.0, H, 2 * H) == 0.0


def test_spares_poisson_quantile():
    assert poisson_quantile(0.0, 0.999) == 0
    assert poisson_quantile(1.0, 0.5) == 1           # P(X<=0)=0.37, P(X<=1)=0.74
    s = [spares_needed(n, 10000 * H, 24 * H, 0.999) for n in (8, 64, 512, 4096)]
    assert s == sorted(s) and s[-1] > s[0]


@pytest.mark.parametrize("kw,field", [
    ({"gpu_mtbf_s": 0.0}, "gpu_mtbf_s"),
    ({"node_mtbf_s": -1.0}, "node_mtbf_s"),
    ({"write_Bps_per_gpu": 0.0}, "write_Bps_per_gpu"),
    ({"restart_s": -5.0}, "restart_s"),
])
def test_zero_or_negative_rates_are_errors(kw, field):
    with pytest.raises(ValueError, match=field):
        reliability_params(kw)


def test_zero_mtbf_in_formulas_is_an_error():
    with pytest.raises(ValueError, match="gpu_mtbf"):
        interruptions_per_day(8, 0.0)
    with pytest.raises(ValueError, match="mtbf_s"):
        young_interval_s(10.0, 0.0)
    with pytest.raises(ValueError, match="unknown reliability"):
        reliability_params({"gpu_mtbf": 5.0})
