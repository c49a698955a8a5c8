"""The clock a workload sustains under the power cap (sim/power.py)."""

import pytest

from mechsim.model import TrainingWorkload
from mechsim.sim.estimate import estimate
from mechsim.sim.power import cap_clock, cap_power, power_state, speed_at

F_GEMM, F_BOOST, W_MEM = 1.47e9, 1.98e9, 0.29


def test_a_pure_gemm_stream_runs_at_the_measured_sustained_clock():
    assert cap_clock(1.0, 0.0, F_GEMM, F_BOOST, W_MEM) == pytest.approx(F_GEMM)


def test_a_light_step_stays_at_boost_and_a_heavy_one_sits_on_the_cap():
    assert cap_clock(0.2, 0.5, F_GEMM, F_BOOST, W_MEM) == F_BOOST
    f = cap_clock(0.7, 0.3, F_GEMM, F_BOOST, W_MEM)
    assert F_GEMM < f < F_BOOST
    assert cap_power(0.7, 0.3, f, F_GEMM, W_MEM) == pytest.approx(1.0)


def test_speed_is_one_at_the_sustained_clock_and_boost_speedup_at_boost():
    assert speed_at(F_GEMM, F_GEMM, F_BOOST, 1.18) == pytest.approx(1.0)
    assert speed_at(F_BOOST, F_GEMM, F_BOOST, 1.18) == pytest.approx(1.18)


def test_gpus_without_a_clock_model_are_left_alone():
    assert power_state({"matmul_compute": 1.0}, 1.0, "b200", 1.98e9, 1.2) is None


def test_estimates_report_the_clock_and_big_steps_run_slower_than_small_ones():
    small = estimate(TrainingWorkload(model="llama3.2-1b", mbs=1, seq=512), "h200")
    big = estimate(TrainingWorkload(model="llama3-8b", mbs=2, seq=4096), "h200")
    assert F_GEMM <= big.sm_clock_hz < small.sm_clock_hz <= F_BOOST
    assert estimate(TrainingWorkload(model="llama3-8b", mbs=2, seq=4096), "b200").sm_clock_hz == 0.0


def test_a_lower_power_cap_runs_the_same_die_below_its_calibrated_speed():
    from mechsim.sim.power import calibration_clock, clock_params
    # Grand Teton's H100 (500 W) uses the H200's calibrated efficiencies, whose speed 1 is 1,470 MHz
    assert calibration_clock("h100_gt_96gb") == pytest.approx(F_GEMM)
    f_gemm = clock_params("h100_gt_96gb")[0]
    assert f_gemm < F_GEMM
    ps = power_state({"matmul_compute": 1.0}, 1.0, "h100_gt_96gb", F_BOOST, 1.18)
    assert ps.clock_hz == pytest.approx(f_gemm) and ps.speed == pytest.approx(speed_at(f_gemm, F_GEMM, F_BOOST, 1.18))
    assert ps.speed < 1.0
    same = power_state({"matmul_compute": 1.0}, 1.0, "h100_sxm", F_BOOST, 1.18)
    assert same.speed == pytest.approx(1.0)                      # 700 W: the calibrated clock itself
    w = TrainingWorkload(model="llama3-8b", mbs=2, seq=4096)
    assert estimate(w, "h100_gt_96gb").step_time_s > estimate(w, "h100_sxm").step_time_s
