"""Streaming-memory law (sim/kernels.streaming_memory_s) and the unrolled cast class."""

import pytest

from mechsim.model.microops import memory_kernel
from mechsim.model.ops_common import UNROLLED, cast, chain
from mechsim.sim.estimate import efficiency, estimate_op, resolve_gpu, hw_rates
from mechsim.sim.kernels import kernel_times, streaming_memory_s
from mechsim.sim.optable import build_table

GPU = "h200_sxm"


def _mem_s(*ops):
    g = resolve_gpu(GPU)
    return streaming_memory_s(build_table(tuple(ops)), hw_rates(g, 1.0), efficiency(g))


def test_vectorised_kernels_are_bound_by_total_traffic():
    """1:1 (silu, pow), 2:1 (add) and write-only (fill) kernels of equal total bytes take equal time:
    total / (HBM x stream_fraction)."""
    g = resolve_gpu(GPU)
    t = _mem_s(memory_kernel(3e8, 3e8), memory_kernel(4e8, 2e8), memory_kernel(1.0, 6e8 - 1.0))
    expect = 6e8 / (g.hbm_bandwidth * efficiency(g).get("memory.stream_fraction"))
    assert t == pytest.approx([expect] * 3, rel=1e-9)


def test_streaming_time_is_additive_over_a_chain():
    a, b = memory_kernel(3e8, 1e8), memory_kernel(1e8, 1e8)
    assert _mem_s(memory_kernel(4e8, 2e8))[0] == pytest.approx(sum(_mem_s(a, b)), rel=1e-9)


def test_widening_cast_is_unrolled_and_slower_than_narrowing():
    n = 64 * 2 ** 20
    wide, narrow = cast(n, 2, 4), cast(n, 4, 2)
    assert (wide.strided_class, wide.elements) == (UNROLLED, n) and narrow.strided_class is None
    g = resolve_gpu(GPU)
    eff = efficiency(g)
    tw = sum(estimate_op(o, GPU).time_s for o in chain("c", "elementwise", "fwd", [wide], 1, n))
    tn = sum(estimate_op(o, GPU).time_s for o in chain("c", "elementwise", "fwd", [narrow], 1, n))
    assert tw > 1.5 * tn   # same bytes, half the bytes/s (H200: 2.1 vs 4.3 TB/s)
    op = chain("c", "elementwise", "fwd", [wide], 1, n)[0]
    k = kernel_times(build_table((op,)), hw_rates(g, 1.0), eff, "fa2")
    # the element rate is instruction-bound: compute side, so it follows the SM clock in a power state
    assert k.compute_s[0] == pytest.approx(n / eff.get("memory.unrolled_elem_rate"), rel=1e-9)
    assert k.gpu_s[0] == pytest.approx(max(k.compute_s[0], k.memory_s[0]) + k.fixed_s[0], rel=1e-12)


def test_element_rate_kernels_follow_the_clock_of_a_power_state():
    """at_compute_speed: GEMMs at their sustained-rate speed, every other op's compute (attention,
    element-rate kernels) at f / f_boost; a purely HBM-bound copy does not change."""
    from mechsim.sim.estimate import at_compute_speed
    n = 64 * 2 ** 20
    g = resolve_gpu(GPU)
    op = chain("c", "elementwise", "fwd", [cast(n, 2, 4)], 1, n)[0]
    t = build_table((op,))
    k = kernel_times(t, hw_rates(g, 1.0), efficiency(g), "fa2")
    slow = at_compute_speed(t, k, 0.8, 0.8)
    assert slow.gpu_s[0] == pytest.approx(max(k.compute_s[0] / 0.8, k.memory_s[0]) + k.fixed_s[0], rel=1e-12)
    assert slow.gpu_s[0] > k.gpu_s[0]
    copy = build_table((memory_kernel(4e8, 4e8),))
    kc = kernel_times(copy, hw_rates(g, 1.0), efficiency(g), "fa2")
    assert at_compute_speed(copy, kc, 0.8, 0.8).gpu_s[0] == pytest.approx(kc.gpu_s[0], rel=1e-12)


def test_optimizer_step_runs_at_its_own_fraction():
    """The fused AdamW (multi_tensor_apply) is timed at memory.optimizer_fraction of HBM, slower
    than a vectorised streaming kernel of the same bytes (H200 step profiles: 0.67-0.74)."""
    from mechsim.model.ops import Op
    from mechsim.sim.calibration import efficiency_for
    from mechsim.sim.estimate import hw_rates, resolve_gpu
    from mechsim.sim.kernels import kernel_times
    from mechsim.sim.optable import build_table
    g = resolve_gpu("h200_sxm")
    eff = efficiency_for(g.key, g.arch)
    nb = 28e9
    ops = (Op("optimizer/adamw", "optimizer", "optimizer", 12e9, 16e9, 12e9, dtype="fp32", kernels=60),
           Op("x/add", "elementwise", "fwd", 1e9, 16e9, 12e9, dtype="fp32", kernels=60))
    k = kernel_times(build_table(ops), hw_rates(g), eff, "fa2")
    frac = eff.get("memory.optimizer_fraction")
    assert 0.5 < frac < eff.get("memory.stream_fraction")
    assert k.memory_s[0] == pytest.approx(nb / (g.hbm_bandwidth * frac))
    assert k.memory_s[0] > k.memory_s[1]
