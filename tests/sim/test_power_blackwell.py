"""The Blackwell clock data of power.toml: GB200's sustained GEMM clock, the other Blackwell parts'
moved along the dynamic power curve to their power per SM, and the clock their shared (GB200-measured)
GEMM efficiencies mean on each part's own axis (sim/power.calibration_clock / calibration_boost)."""

import pytest

from mechsim.hwdb.loader import get_gpu
from mechsim.hwdb.prices import load_prices
from mechsim.sim.power import (calibration_boost, calibration_clock, clock_params, curve_beta, gemm_speed, power_curve,
                               power_curve_inverse, power_state)

BOOK = load_prices()
GB200_SUSTAINED_TFLOPS, GB200_MAMF_TFLOPS = 2800.0, 3615.6     # azure_bench_gb200_gemm


def _idle(key: str) -> float:
    return BOOK.value(f"power.gpu_idle.{key}")


def _dynamic_w_per_sm(key: str) -> float:
    g = get_gpu(key)
    return (g.tdp_w - _idle(key)) / g.sm_count


def test_gb200_sustained_clock_is_its_max_clock_scaled_by_the_sustained_over_burst_rate():
    f = get_gpu("gb200").boost_clock_hz * GB200_SUSTAINED_TFLOPS / GB200_MAMF_TFLOPS
    assert clock_params("gb200")[0] == pytest.approx(f, abs=1e6)


@pytest.mark.parametrize("key", ["b200", "gb300", "b300"])
def test_other_blackwell_clocks_are_gb200s_moved_to_their_power_per_sm(key):
    beta, fb = curve_beta(key), get_gpu("gb200").boost_clock_hz
    h = _dynamic_w_per_sm(key) / _dynamic_w_per_sm("gb200")
    f = fb * power_curve_inverse(h * power_curve(clock_params("gb200")[0] / fb, beta), beta)
    assert clock_params(key)[0] == pytest.approx(f, abs=1e6)


@pytest.mark.parametrize("key", ["b200", "gb300", "b300"])
def test_the_calibration_clock_is_gb200s_on_the_parts_tensor_clock_axis(key):
    r = get_gpu(key).tensor_clock_hz / get_gpu("gb200").tensor_clock_hz
    assert calibration_clock(key) == pytest.approx(clock_params("gb200")[0] * r, abs=5e5)
    assert calibration_boost(key) == pytest.approx(get_gpu("gb200").boost_clock_hz * r, abs=1e5)


def test_same_die_gpus_keep_their_calibration_gpus_clocks():
    assert calibration_boost("h100_gt_96gb") is None and calibration_boost("gb200") is None
    assert calibration_clock("h100_gt_96gb") == pytest.approx(clock_params("h200_sxm")[0])


def test_a_pure_gemm_stream_runs_faster_per_peak_on_the_part_with_more_power_per_sm():
    """GB300 prints GB200's dense FP8 / BF16 peak on the same 152 SMs with 1,400 W instead of 1,200:
    its sustained GEMM rate over the peak is higher. B200's 4.5 PF peak already sits at a lower
    clock, which its 1,000 W cap nearly sustains."""
    bs = get_gpu("gb200").boost_clock_hz / clock_params("gb200")[0]     # linear in the clock
    speed = {k: power_state({"matmul_compute": 1.0}, 1.0, k, get_gpu(k).boost_clock_hz, bs).speed
             for k in ("gb200", "b200", "gb300", "b300")}
    assert speed["gb200"] == pytest.approx(1.0)
    assert speed["gb300"] == pytest.approx(clock_params("gb300")[0] / calibration_clock("gb300"), rel=1e-3)
    assert 1.04 < speed["gb300"] < 1.10 and 1.04 < speed["b300"] < 1.12
    assert speed["b200"] == pytest.approx(1.0, abs=0.02)
    f = clock_params("gb300")[0]
    assert speed["gb300"] == pytest.approx(gemm_speed(f, calibration_clock("gb300"), calibration_boost("gb300"), bs),
                                            rel=1e-3)
