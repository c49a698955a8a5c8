"""The host an estimate assumes: launch cost per stack per CPU, probe scaling, host-bound bands."""

from __future__ import annotations

import dataclasses

import pytest

import mechsim
from mechsim import hwdb
from mechsim.sim import host
from mechsim.sim.launch import launch_costs, on_host
from mechsim.sim.stacks import get_stack, list_stacks


def decode(stack: str = "eager", batch: int = 1):
    return mechsim.InferenceWorkload(model=mechsim.preset("llama3-8b"), batch=batch, phase="decode",
                                     prompt_len=1024, context_len=1025, stack=stack)


def train(mbs: int = 4, seq: int = 4096):
    return mechsim.TrainingWorkload(model=mechsim.preset("llama3-8b"), mbs=mbs, seq=seq, stack="eager")


def test_on_host_scales_host_costs_only():
    st = get_stack("eager")
    slow = on_host(st, 2.0)
    assert slow.launch_host_s == 2 * st.launch_host_s and slow.launch_host_bwd_s == 2 * st.launch_host_bwd_s
    assert on_host(st, 1.0) is st and slow.launch_graph_s == st.launch_graph_s


def test_on_host_backward_scale_of_its_own():
    st = get_stack("eager")
    both = on_host(st, 2.0, 0.5)
    assert both.launch_host_s == 2 * st.launch_host_s and both.launch_host_bwd_s == 0.5 * st.launch_host_bwd_s
    assert on_host(st, 1.0, 1.0) is st and on_host(st, 1.0, 3.0).launch_host_bwd_s == 3 * st.launch_host_bwd_s


def test_launch_costs_per_stack_per_cpu():
    stacks = [get_stack(k) for k in list_stacks()]
    costs = launch_costs(stacks, hwdb.get_cpu("grace").launch_scale)
    assert set(costs) == set(list_stacks())
    assert costs["serving"] == (0.0, 0.0) and costs["eager"][0] == pytest.approx(get_stack("eager").launch_host_s)
    assert launch_costs(stacks, 1.5)["eager"][0] == pytest.approx(1.5 * get_stack("eager").launch_host_s)


def test_slower_host_never_faster_step():
    from mechsim.sim.estimate import calibrated_stack, estimate, resolve_gpu
    st = calibrated_stack(resolve_gpu("h200_sxm"), get_stack("eager"))
    times = [estimate(decode(), "h200_sxm", on_host(st, f)).step_time_s for f in (0.5, 1.0, 1.5, 2.0)]
    assert times == sorted(times) and times[-1] > 1.5 * times[0]     # eager b1 decode is host-bound


def test_graphs_do_not_move_with_the_host():
    a = mechsim.estimate(decode("eager_graphs"), "h200_sxm")
    assert a.error_band.host_bound == 0.0


def test_host_bound_band_without_probe_only():
    est = mechsim.estimate(decode(), "h200_sxm")
    high = host.host_spread()["high"]["value"]
    assert est.error_band.host.startswith("default host")
    assert est.error_band.host_bound > 0.5 * (high - 1)                # mostly host-bound
    assert 0 < est.error_band.host_bound_fast < est.error_band.host_bound
    assert "host-bound: -" in host.host_line(est.error_band)
    gpu_bound = mechsim.estimate(train(), "h200_sxm")                  # 8B mbs 4 x 4096: GPU-bound
    assert gpu_bound.error_band.host_bound == 0.0 and host.host_line(gpu_bound.error_band) == ""


def test_band_grows_with_spread():
    at = lambda f: 1.0 + max(0.0, f - 0.9)            # noqa: E731 - a step that follows the host above 0.9x
    assert host.host_swing(at, (1.0, 1.0)) == (0.0, 0.0)
    narrow, wide = host.host_swing(at, (0.8, 1.2)), host.host_swing(at, (0.5, 2.0))
    assert narrow == pytest.approx((0.1 / 1.1, 0.2 / 1.1)) and wide[1] > narrow[1] and wide[0] == narrow[0]


def test_system_names_its_cpu():
    est = mechsim.estimate(decode(), "hgx_h200")
    assert "xeon_8480c" in est.error_band.host
    assert hwdb.get_system("gb200_nvl72").host_cpu.key == "grace"


def test_explicit_stack_keeps_its_costs():
    st = dataclasses.replace(get_stack("eager"), launch_host_s=50e-6)
    est = mechsim.estimate(decode(), "h200_sxm", st)
    assert est.error_band.host.startswith("as the given Stack")
    from mechsim.sim.estimate import estimate
    assert est.step_time_s == pytest.approx(estimate(decode(), "h200_sxm", st).step_time_s)


def test_default_host_is_a_measured_cpu_record():
    data = host.host_spread()
    cpu = hwdb.get_cpu(data["default_cpu"])
    assert cpu.spec("launch_scale").kind == "measured"
    assert 0 < data["low"]["value"] <= 1 <= data["high"]["value"] and data["center"]["value"] > 0
