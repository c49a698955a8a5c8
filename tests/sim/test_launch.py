"""The host/GPU tandem-queue bound (sim/launch.py)."""

import numpy as np
import pytest

from mechsim.sim.launch import block_bounds, tandem_step_time


def brute_force(host, gpu, count):
    """Simulate every launch of the repeated blocks in order."""
    seq = []
    for a, b in block_bounds(np.array(count)):
        for _ in range(int(count[a])):
            seq += list(zip(host[a:b], gpu[a:b]))
    t_host = gpu_free = 0.0
    for h, g in seq:
        t_host += h
        gpu_free = max(gpu_free, t_host) + g
    return gpu_free


@pytest.mark.parametrize("seed", range(20))
def test_tandem_formula_matches_event_simulation(seed):
    rng = np.random.default_rng(seed)
    n = 8
    host = rng.uniform(0, 10, n)
    gpu = rng.uniform(0, 10, n)
    count = np.array(sorted(rng.choice([1, 3, 5], n)), float)
    # block formula is exact when each block repeats a composite of (sum h, sum g);
    # the event simulation interleaves within blocks, so they agree to within one block's GPU time
    exact = brute_force(host, gpu, count)
    approx = tandem_step_time(host, gpu, count)
    assert approx == pytest.approx(exact, rel=0.15)


def test_gpu_bound_when_host_is_free():
    gpu = np.array([1.0, 2.0, 3.0])
    assert tandem_step_time(np.zeros(3), gpu, np.array([1.0, 4, 4])) == pytest.approx(1 + 4 * 5)


def test_host_bound_when_kernels_are_tiny():
    host = np.array([5.0, 5.0])
    gpu = np.array([0.1, 0.1])
    assert tandem_step_time(host, gpu, np.array([10.0, 10])) == pytest.approx(100 + 0.1)
