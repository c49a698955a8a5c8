"""The host/GPU tandem-queue bound (sim/launch.py)."""

import numpy as np
import pytest

from mechsim.sim.launch import block_bounds, tandem_step_time
from mechsim.sim.optable import block_starts


def brute_force(host, gpu, count):
    """Simulate every launch of the repeated blocks in order: each repetition of a block
    issues each of its ops count / repeats times."""
    seq = []
    count = np.array(count, float)
    for a, b in block_bounds(count):
        reps = int(count[a:b].min())
        for _ in range(reps):
            for i in range(a, b):
                seq += [(host[i], gpu[i])] * int(count[i] // reps)
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


def test_ops_issued_twice_per_layer_stay_in_the_layer():
    """A layer (count L) with an op issued twice per layer (count 2L) is one block of L
    repetitions, not three runs: a host-heavy op and a GPU-heavy op of the same layer overlap."""
    count = np.array([1.0, 32, 64, 32, 1])
    assert block_starts(count).tolist() == [0, 1, 4]
    host = np.array([0.0, 10.0, 0.0, 0.0, 0.0])   # host-heavy first op of the layer
    gpu = np.array([0.0, 0.0, 5.0, 0.0, 0.0])     # GPU-heavy op issued twice per layer
    assert tandem_step_time(host, gpu, count) == pytest.approx(brute_force(host, gpu, count), rel=0.05)
    assert tandem_step_time(host, gpu, count) == pytest.approx(320 + 10, rel=0.01)


def test_phase_change_starts_a_block():
    count = np.array([32.0, 32, 32, 32])
    assert block_starts(count, np.array([0, 0, 1, 1])).tolist() == [0, 2]
    assert block_starts(np.array([3.0, 58]), np.zeros(2)).tolist() == [0, 1]


def test_library_kernels_cost_a_fraction_of_a_dispatch():
    """A split-K GEMM's reduce kernel and a split-KV attention's combine kernel are launched inside
    the library call (no aten dispatch): they cost LIBRARY_KERNEL_FRACTION of a kernel; an unfused
    norm's kernels are each their own aten call."""
    from mechsim.model import InferenceWorkload, preset
    from mechsim.sim.estimate import calibrated_stack, prepare, resolve_gpu
    from mechsim.sim.launch import LIBRARY_KERNEL_FRACTION, host_dispatches, host_times
    from mechsim.sim.stacks import get_stack

    assert 0.0 < LIBRARY_KERNEL_FRACTION < 1.0
    w = InferenceWorkload(model=preset("llama3-8b"), batch=1, phase="decode", prompt_len=2048, context_len=2049,
                          stack="eager")
    st = calibrated_stack(resolve_gpu("h200_sxm"), get_stack("eager"))
    t = prepare(w, st.fused).table
    d = host_dispatches(t)
    names = [o.name for o in t.ops]
    q, norm = names.index("layer/attn/q_proj"), names.index("layer/norm_attn")
    assert t.kernels[q] == 2 and d[q] == pytest.approx(1 + LIBRARY_KERNEL_FRACTION)
    assert d[norm] == t.kernels[norm] > 1
    assert np.allclose(host_times(t, st), d * st.launch_host_s)


def test_per_expert_gemms_of_a_python_loop_are_calls():
    """An eager MoE loop's expert GEMMs (kernels = batch = experts hit: ``xe @ w[e]`` per expert) are
    each an aten call; the same op under a stack whose grouped GEMM launches them from C++ is one
    call plus library launches."""
    from mechsim.model import MoEConfig, TrainingWorkload, TransformerConfig
    from mechsim.sim.estimate import calibrated_stack, prepare, resolve_gpu
    from mechsim.sim.launch import LIBRARY_KERNEL_FRACTION, host_dispatches
    from mechsim.sim.stacks import get_stack

    cfg = TransformerConfig(name="m", n_layers=1, d_model=256, n_heads=4, n_kv_heads=2, ffn=512, vocab=512,
                            moe=MoEConfig(n_experts=8, top_k=2, expert_ffn=512, impl="loop_modules"))
    w = TrainingWorkload(model=cfg, mbs=1, seq=256, precision="amp_bf16", optimizer="adamw", stack="eager")
    st = calibrated_stack(resolve_gpu("h200_sxm"), get_stack("eager"))
    t = prepare(w, st.fused).table
    i = [o.name for o in t.ops].index("layer/moe/experts/down")
    assert t.kernels[i] == t.gemm.batch[i] == 8
    assert host_dispatches(t)[i] == 8
    assert host_dispatches(t, grouped_gemm=True)[i] == pytest.approx(1 + 7 * LIBRARY_KERNEL_FRACTION)


def test_phase_end_times_match_the_blockwise_definition():
    """phase_end_times (one pass over the block sums, the tandem bound from the same sums) equals its
    docstring's definition written out: C_j per block, capped at tandem_step_time, each phase at its
    last block's C (random blocks, phases in order or not)."""
    import numpy as np
    from mechsim.sim.launch import block_starts, phase_end_times, tandem_step_time

    def reference(host, gpu, count, phase, n, starts):
        ends = np.zeros(n)
        bounds = list(zip(starts.tolist(), starts[1:].tolist() + [len(host)]))
        H = [float(np.dot(host[s:e], count[s:e])) for s, e in bounds]
        G = [float(np.dot(gpu[s:e], count[s:e])) for s, e in bounds]
        cap, c, best = tandem_step_time(host, gpu, count, starts), [], -np.inf
        for j, (_s, e) in enumerate(bounds):
            lead = max(sum(H[:i]) + host[bounds[i][0]] + sum(G[i:j + 1]) for i in range(j + 1))
            best = max(best, lead, sum(H[:j + 1]) + gpu[e - 1])
            c.append(min(best, cap))
        for p in range(n):
            mine = [j for j, (s, _) in enumerate(bounds) if phase[s] <= p]
            ends[p] = c[mine[-1]] if mine else 0.0
        return np.maximum.accumulate(ends)

    rng = np.random.default_rng(7)
    for trial in range(300):
        n = int(rng.integers(1, 30))
        host, gpu = rng.random(n) * 1e-5, rng.random(n) * 1e-4
        count = rng.choice([1, 2, 4, 80], n).astype(float)
        phase = np.sort(rng.integers(0, 3, n)) if trial % 2 else rng.integers(0, 3, n)
        starts = block_starts(count, phase)
        assert np.allclose(phase_end_times(host, gpu, count, phase, 3, starts),
                           reference(host, gpu, count, phase, 3, starts), rtol=1e-12, atol=0)
