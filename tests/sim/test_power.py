"""The clock a workload sustains under the power cap (sim/power.py)."""

import pytest

from mechsim.model import TrainingWorkload
from mechsim.sim.estimate import estimate
from mechsim.sim.power import (attention_clock_ratio, cap_clock, cap_power, curve_beta, gemm_speed, power_curve,
                               power_curve_inverse, power_state)

F_GEMM, F_BOOST, W_MEM = 1.47e9, 1.98e9, 0.29
BETA = curve_beta("h200_sxm")


def test_a_pure_gemm_stream_runs_at_the_measured_sustained_clock():
    assert cap_clock(((1.0, F_GEMM),), 0.0, W_MEM, F_GEMM, F_BOOST, BETA) == pytest.approx(F_GEMM)


def test_a_light_step_stays_at_boost_and_a_heavy_one_sits_on_the_cap():
    assert cap_clock(((0.2, F_GEMM),), 0.5, W_MEM, F_GEMM, F_BOOST, BETA) == F_BOOST
    loads = ((0.7, F_GEMM),)
    f = cap_clock(loads, 0.3, W_MEM, F_GEMM, F_BOOST, BETA)
    assert F_GEMM < f < F_BOOST
    assert cap_power(f, loads, 0.3, W_MEM, F_BOOST, BETA) == pytest.approx(1.0)


def test_attention_draws_less_power_per_clock_than_gemms():
    fa2, cudnn = attention_clock_ratio("fa2"), attention_clock_ratio("cudnn")
    assert fa2 > cudnn > 1.0 and attention_clock_ratio("unmeasured") == 1.0
    half = ((0.5, F_GEMM), (0.5, fa2 * F_GEMM))
    f = cap_clock(half, 0.0, W_MEM, F_GEMM, F_BOOST, BETA)
    assert F_GEMM < f < fa2 * F_GEMM and cap_power(f, half, 0.0, W_MEM, F_BOOST, BETA) == pytest.approx(1.0)


def test_mixed_clocks_match_the_alternating_gemm_attention_measurement():
    """validation/experiments/attention_power.py on H200: GEMM and attention phases alternating
    every few ms; the clock from the measured time shares within 5 % of the measured clock."""
    import json
    from pathlib import Path
    rec = Path(__file__).resolve().parents[2] / "validation/experiments/records/20261130T2200Z_attention_power_h200.json"
    runs = {r["run"]: r for r in json.loads(rec.read_text())["runs"]}
    f_gemm = runs["gemm"]["power_state"]["sm_clock_mhz"]["median"] * 1e6
    checked = 0
    for r in runs.values():
        names = [n for n, _ in r["pattern"]]
        if len(names) < 2 or "mem" in names:
            continue
        total = sum(p["total_s"] for p in r["phases"].values())
        share = {n: sum(p["total_s"] for k, p in r["phases"].items() if k.split("/")[0] == n) / total
                 for n in names}
        loads = tuple((share[n], f_gemm * (1.0 if n == "gemm" else attention_clock_ratio(n))) for n in names)
        f = cap_clock(loads, 0.0, W_MEM, f_gemm, F_BOOST, BETA)
        measured = r["power_state"]["sm_clock_mhz"]["median"] * 1e6
        assert f == pytest.approx(measured, rel=0.05), r["run"]
        checked += 1
    assert checked == 5


@pytest.mark.parametrize("beta", [0.0, 0.3, BETA, 1.0])
def test_the_power_curve_inverts_and_is_the_cube_law_at_beta_one(beta):
    for x in (0.05, 0.4, 0.742, 1.0, 1.3):
        assert power_curve_inverse(power_curve(x, beta), beta) == pytest.approx(x, rel=1e-9)
    assert power_curve(0.5, 1.0) == pytest.approx(0.125) and power_curve(1.0, beta) == pytest.approx(1.0)


def test_the_recorded_beta_is_the_fit_of_the_committed_gemm_power_curve():
    """hwdb/data/power.toml [dynamic_power_curve] h200_sxm re-fitted from its record; the fit
    beats the cube law, and the curve is steeper at boost than at the sustained GEMM clock."""
    import numpy as np

    from mechsim.validation.analysis.power_curve import capped_points, fit_beta, load_record
    beta, rms = fit_beta(load_record())
    assert beta == pytest.approx(BETA, abs=0.005) and rms < 0.05
    x, g = np.array(capped_points(load_record())).T
    cube_rms = np.sqrt(np.mean((3 * np.log(x) - np.log(g)) ** 2))
    assert rms < 0.5 * cube_rms
    def slope(xx):
        return (3 * BETA * xx ** 3 + (1 - BETA) * xx) / power_curve(xx, BETA)
    assert slope(1.0) > slope(F_GEMM / F_BOOST) + 0.15 and 2.4 < slope(F_GEMM / F_BOOST) < 2.6


def test_the_grand_teton_gemm_clock_is_the_700_w_clock_moved_along_the_curve():
    """power.toml's derived h100_gt_96gb cap clock: G(f) = G(f_700) (500 - idle) / (700 - idle)."""
    from mechsim.hwdb.loader import get_gpu
    from mechsim.hwdb.prices import load_prices
    from mechsim.sim.power import clock_params
    book = load_prices()
    idle = book.value("power.gpu_idle.h100_gt_96gb")
    tdp_gt, tdp = get_gpu("h100_gt_96gb").tdp_w, get_gpu("h100_sxm").tdp_w
    beta = curve_beta("h100_gt_96gb")
    h = (tdp_gt - idle) / (tdp - idle)
    f = F_BOOST * power_curve_inverse(h * power_curve(clock_params("h100_sxm")[0] / F_BOOST, beta), beta)
    assert clock_params("h100_gt_96gb")[0] == pytest.approx(f, abs=1e6)


def test_gemm_speed_is_one_at_the_sustained_clock_and_boost_speedup_at_boost():
    assert gemm_speed(F_GEMM, F_GEMM, F_BOOST, 1.18) == pytest.approx(1.0)
    assert gemm_speed(F_BOOST, F_GEMM, F_BOOST, 1.18) == pytest.approx(1.18)


def test_attention_time_follows_the_clock_it_runs_at():
    """Attention is calibrated at boost and slows linearly with the clock; an attention-only step
    sits at the attention cap clock, above the GEMM one."""
    ps = power_state({"attention": 1.0}, 1.0, "h200_sxm", F_BOOST, 1.18, "fa2")
    assert ps.attention_speed == pytest.approx(ps.clock_hz / F_BOOST)
    assert ps.clock_hz > F_GEMM * 1.3
    gemm_like = power_state({"attention": 1.0}, 1.0, "h200_sxm", F_BOOST, 1.18, "unmeasured")
    assert gemm_like.clock_hz == pytest.approx(F_GEMM, rel=1e-3)


def test_gpus_without_a_clock_model_are_left_alone():
    assert power_state({"matmul_compute": 1.0}, 1.0, "a100_sxm_80gb", 1.41e9, 1.2) is None


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
    assert ps.clock_hz == pytest.approx(f_gemm) and ps.speed == pytest.approx(gemm_speed(f_gemm, F_GEMM, F_BOOST, 1.18))
    assert ps.speed < 1.0
    same = power_state({"matmul_compute": 1.0}, 1.0, "h100_sxm", F_BOOST, 1.18)
    assert same.speed == pytest.approx(1.0)                      # 700 W: the calibrated clock itself
    w = TrainingWorkload(model="llama3-8b", mbs=2, seq=4096)
    assert estimate(w, "h100_gt_96gb").step_time_s > estimate(w, "h100_sxm").step_time_s


def test_pipeline_bubbles_and_the_final_dp_block_do_not_raise_the_clock():
    """Contiguous idle blocks of seconds (pipeline warm-up / cool-down, the exposed DP reduction
    at the step's end) leave the power window; fine-grained exposed comm stays in it."""
    from mechsim.sim.distributed import StepParts, power_window
    cats = {"matmul_compute": 6.0, "attention": 1.0, "memory_bound": 1.0, "communication": 2.5,
            "pipeline_bubble": 4.0}
    parts = StepParts(8.0, {"tp": 0.5, "dp": 2.0}, 4.0, 0.0, 14.5)
    window_cats, window = power_window(cats, parts)
    assert window == pytest.approx(8.5) and window_cats["communication"] == pytest.approx(0.5)
    busy = power_state(window_cats, window, "h200_sxm", F_BOOST, 1.18, "cudnn")
    diluted = power_state(cats, parts.step_s, "h200_sxm", F_BOOST, 1.18, "cudnn")
    assert busy.clock_hz < diluted.clock_hz


def test_gemms_that_use_the_tensor_cores_less_hold_the_cap_at_a_higher_clock():
    """The 14 GEMM shapes of record 20261130T2320Z_gemm_shape_clocks_h200, each alone at the cap
    (1,470-1,650 MHz): weighting power by the model's efficiency over the 8192^3 GEMM's predicts
    their clocks better than one cap clock for all."""
    import json
    from pathlib import Path

    import numpy as np

    from mechsim.model.microops import gemm
    from mechsim.sim.estimate import estimate_op
    rec = Path(__file__).resolve().parents[2] / "validation/experiments/records/20261130T2320Z_gemm_shape_clocks_h200.json"
    ref = estimate_op(gemm(8192, 8192, 8192), "h200_sxm").efficiency
    weighted, flat = [], []
    for r in json.loads(rec.read_text())["runs"]:
        w = min(estimate_op(gemm(*r["gemm_shape"]), "h200_sxm").efficiency / ref, 1.0)
        measured = r["power_state"]["sm_clock_mhz"]["median"] * 1e6
        ps = power_state({"matmul_compute": 1.0, "matmul_power": w}, 1.0, "h200_sxm", F_BOOST, 1.18)
        weighted.append(ps.clock_hz / measured - 1)
        flat.append(F_GEMM / measured - 1)
    assert np.mean(np.abs(weighted)) < 0.025 and np.mean(np.abs(weighted)) < 0.75 * np.mean(np.abs(flat))


def test_a_small_gemm_step_runs_at_a_higher_clock_than_its_unweighted_gemm_time_says():
    from mechsim.model import InferenceWorkload
    from mechsim.sim import step as est
    w = InferenceWorkload(model="llama3.2-1b", batch=8, prompt_len=1024, context_len=1024, phase="prefill")
    base = estimate(w, "h200")
    orig = est.gemm_power_weight
    try:
        est.gemm_power_weight = lambda *a: 1.0
        est.clear_stages()   # the kernel stage (sim/step.py) holds the weighted GEMM time
        unweighted = estimate(w, "h200")
    finally:
        est.gemm_power_weight = orig
        est.clear_stages()
    assert base.sm_clock_hz > unweighted.sm_clock_hz
