"""The clock state as an input (sim/clock.py, sim/clock_state.py), the row-kernel laws
(sim/kernel_laws.py) and the GEMM alignment path, through the public API."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import mechsim
from mechsim import RunPattern, burst, duty_cycle, estimate, estimate_op, get_stack, sustained
from mechsim.model.microops import gemm, row_norm, softmax
from mechsim.sim.clock import boost_left_s, mean_boosted_share, relax

H200 = "h200_sxm"
BIG = gemm(8192, 8192, 8192)


def tflops(run=None) -> float:
    return BIG.flops / estimate_op(BIG, H200, run=run).time_s / 1e12


def test_a_short_burst_runs_faster_than_the_sustained_stream() -> None:
    assert tflops(burst(3)) > 1.1 * tflops(sustained())


def test_a_long_burst_converges_to_the_sustained_rate() -> None:
    assert tflops(burst(3)) > tflops(burst(100)) > tflops(burst(2000)) > 0.99 * tflops(sustained())
    assert tflops(burst(20000)) == pytest.approx(tflops(sustained()), rel=0.01)


def test_a_light_duty_cycle_keeps_the_boost_and_sustained_is_the_default() -> None:
    assert tflops(duty_cycle(0.2)) == pytest.approx(tflops(burst(0.5)), rel=0.02)
    assert tflops(sustained()) == pytest.approx(tflops(None), rel=1e-9)   # a full-rate GEMM: calibrated state


def test_a_warm_start_leaves_less_boost_than_a_cold_one() -> None:
    assert tflops(burst(30, start_load=0.0)) > tflops(burst(30, start_load=0.9)) > tflops(burst(30, start_load=1.0)) * 0.999


@pytest.mark.parametrize("kw, field", [({"busy_s": 0.0}, "busy_s"), ({"duty": 0.0}, "duty"),
                                       ({"start_load": 1.5}, "start_load"), ({"report": "median"}, "report"),
                                       ({"idle_before_s": -1.0}, "idle_before_s")])
def test_bad_patterns_name_their_field(kw: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        RunPattern(**kw)


def test_mean_boosted_share_is_the_integral_of_the_step_down() -> None:
    w, tb, d = 0.05, 0.01, 0.011
    t = np.linspace(0.0, w, 200001)
    numeric = float(np.mean(np.minimum(1.0, np.exp(-(t - tb) / d))))
    assert mean_boosted_share(w, tb, d) == pytest.approx(numeric, rel=1e-3)


def test_power_average_closed_forms() -> None:
    assert boost_left_s(0.0, 2.0, 0.1) == pytest.approx(0.1 * math.log(2.0))
    assert relax(0.0, 2.0, 0.1 * math.log(2.0), 0.1) == pytest.approx(1.0)
    assert mechsim.power_average(0.0, 0.0, 5.0, H200) == 0.0
    assert mechsim.power_demand(BIG, H200) > 1.0 > mechsim.power_demand(gemm(1, 4096, 4096), H200)


def test_estimate_takes_the_pattern_for_a_gemm_bound_step() -> None:
    w = mechsim.TrainingWorkload(model=mechsim.preset("llama3-8b").model_copy(update={"n_layers": 2}), mbs=1,
                                 seq=4096, precision="amp_bf16")
    t_sus = estimate(w, H200).step_time_s
    assert estimate(w, H200, run=burst(20)).step_time_s < 0.97 * t_sus
    assert estimate(w, H200, run=sustained()).step_time_s == pytest.approx(t_sus)


def test_a_stack_object_keeps_the_hardware_calibration() -> None:
    from mechsim.sim.estimate import estimate   # the core (the facade may add a host model on top)
    w = mechsim.InferenceWorkload(model=mechsim.preset("llama3-8b").model_copy(update={"n_layers": 2}),
                                  batch=1, prompt_len=128, context_len=129, phase="decode")
    st = get_stack("eager")
    assert estimate(w, H200, st).step_time_s == pytest.approx(estimate(w, H200, "eager").step_time_s)
    slow = dataclasses.replace(mechsim.stack_for("eager", H200), launch_host_s=1e-3)
    assert estimate(w, H200, slow).step_time_s > 2 * estimate(w, H200, "eager").step_time_s


def test_few_long_rows_are_latency_bound() -> None:
    few = estimate_op(softmax(9, 30064, "bf16"), H200)          # 9 rows: 9 of 132 SMs busy
    assert few.time_s > 5 * few.memory_s and few.bound == "compute"


def test_the_warp_softmax_walks_the_next_power_of_two() -> None:
    from mechsim.sim.kernel_laws import row_elements
    assert row_elements(1025, "softmax_warp") == 2048 and row_elements(1025, "softmax_block") == 1025


def test_misaligned_rows_take_the_scalar_path() -> None:
    aligned = estimate_op(row_norm(100000, 416, "bf16", "rms_norm"), H200).time_s
    odd = estimate_op(row_norm(100000, 415, "bf16", "rms_norm"), H200).time_s
    assert odd > 1.5 * aligned


def test_odd_n_costs_tensor_core_gemms_but_not_sgemm() -> None:
    eff = lambda n, d: estimate_op(gemm(4096, n, 4096, d), H200).efficiency  # noqa: E731
    assert eff(4097, "fp32") == pytest.approx(eff(4096, "fp32"), rel=0.05)
    assert eff(4097, "bf16") < 0.9 * eff(4096, "bf16")
