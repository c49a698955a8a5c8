"""Invariants of whole-step estimates (sim/estimate.py, sim/whatif.py)."""

import pytest

import mechsim
from mechsim.model import InferenceWorkload, TrainingWorkload
from mechsim.sim.estimate import estimate

W = TrainingWorkload(model="llama3-8b", mbs=1, seq=4096)
DECODE = InferenceWorkload(model="llama3-8b", batch=1, phase="decode", prompt_len=2048, context_len=2048)


def test_total_is_sum_of_categories():
    e = estimate(W, "h100")
    assert sum(e.by_category.values()) == pytest.approx(e.total, rel=1e-9)
    assert sum(o.time_s for o in e.ops) + e.launch_overhead_s == pytest.approx(e.total, rel=1e-9)


@pytest.mark.parametrize("w", [W, DECODE])
def test_more_bandwidth_is_never_slower(w):
    base = estimate(w, "h100").total
    assert estimate(w, "h100", overrides={"hbm_bandwidth": "+20%"}).total <= base
    assert estimate(w, "h100", overrides={"hbm_bandwidth": "-20%"}).total >= base


def test_throttled_clock_is_slower_for_compute_bound_training():
    assert estimate(W, "h100", overrides={"sustained_clock": 0.8}).total > estimate(W, "h100").total


def test_decode_is_bandwidth_bound_fused_training_is_not():
    s_dec = mechsim.sensitivity(DECODE, "h100", stack="serving", knobs=("hbm_bandwidth", "compute"))
    fused = TrainingWorkload(model="llama3-8b", mbs=2, seq=4096, precision="bf16", stack="megatron_te")
    s_tr = mechsim.sensitivity(fused, "h100", knobs=("hbm_bandwidth", "compute"))
    assert s_dec["hbm_bandwidth"] < -0.5 and s_dec["hbm_bandwidth"] < s_dec["compute"]
    assert s_tr["compute"] < s_tr["hbm_bandwidth"]


def test_h200_decodes_faster_than_h100():
    assert estimate(DECODE, "h200").total < estimate(DECODE, "h100").total


def test_graphs_remove_launch_overhead():
    eager = estimate(DECODE, "h200", "eager")
    graphs = estimate(DECODE, "h200", "eager_graphs")
    assert graphs.total < eager.total and 0 < graphs.launch_overhead_s < 0.1 * eager.launch_overhead_s
    # what a graph leaves is the GPU's idle between its kernels (stacks.toml eager_graphs launch_graph_s)
    from mechsim.sim.stacks import get_stack
    gap = get_stack("eager_graphs").launch_graph_s
    kernels = sum(o.kernels * o.count for o in graphs.ops)
    assert gap > 0 and abs(graphs.launch_overhead_s - kernels * gap) < 1e-9
    assert abs(sum(o.time_s for o in graphs.ops) - graphs.gpu_busy_s) < 1e-9   # the gap is in no op


def test_memory_that_does_not_fit_is_reported_not_raised():
    e = estimate(TrainingWorkload(model="llama3-70b", mbs=1, seq=4096), "h100")
    assert not e.memory.fits and e.memory.headroom < 0
    assert e.memory.total == pytest.approx(sum(e.memory.components.values()))


def test_fp8_on_a100_is_a_clear_error():
    with pytest.raises(ValueError, match="a100_sxm_80gb has no fp8"):
        estimate(TrainingWorkload(model="llama3-8b", mbs=1, seq=1024, precision="fp8"), "a100")


@pytest.mark.parametrize("hw", ["h100", "hgx_h100"])   # one GPU and the multi-GPU path
def test_mxfp8_needs_blackwell(hw):
    par = {} if hw == "h100" else {"parallel": {"tp": 8, "sp": True}}
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=1024, precision="fp8", fp8_recipe="mxfp8", **par)
    with pytest.raises(ValueError, match="mxfp8.*Blackwell.*hopper"):
        estimate(w, hw)
    assert estimate(w, "b200" if hw == "h100" else "hgx_b200").total > 0


@pytest.mark.parametrize("bad,match", [({"hbm_bandwith": "+1%"}, "unknown override"),
                                       ({"sustained_clock": 1.2}, "at most 1"),
                                       ({"hbm_bandwidth": "fast"}, "hbm_bandwidth")])
def test_bad_overrides_name_the_field(bad, match):
    with pytest.raises(ValueError, match=match):
        estimate(W, "h100", overrides=bad)


def test_unknown_gpu_lists_close_matches():
    with pytest.raises(ValueError, match="h100"):
        estimate(W, "H10O")


def test_mfu_is_plausible_for_large_training():
    e = estimate(W, "h100")
    assert 0.2 < e.mfu < 0.8 and e.hfu >= e.mfu * 0.99


def test_fusion_moves_training_toward_compute_bound():
    """Eager HF-style modules spend a large share in unfused memory-bound kernels."""
    w = TrainingWorkload(model="llama3-8b", mbs=2, seq=4096, precision="bf16", stack="eager")
    eager = mechsim.sensitivity(w, "h100", knobs=("hbm_bandwidth",))["hbm_bandwidth"]
    te = mechsim.sensitivity(w, "h100", stack="megatron_te", knobs=("hbm_bandwidth",))["hbm_bandwidth"]
    assert eager < te < 0


def test_h100_uses_h200_calibration_same_chip():
    from mechsim.sim.calibration import calibration_source
    assert calibration_source("h100_sxm") == "h200_sxm"
    assert calibration_source("b200") is None
