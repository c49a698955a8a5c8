"""The layer-kernel and tail lower bounds of the plan search (sim/search_bounds.py): below the estimate
of every plan of ten spaces. The pruned search's equivalence with estimating every plan (sim/search.py) is
tests/sim/test_search_pruned.py."""

import pytest

from mechsim.model import TrainingWorkload, preset
from mechsim.sim import cluster as C
from mechsim.sim.estimate import calibrated_stack, estimate
from mechsim.sim.power import calibration_boost, calibration_clock, gemm_speed
from mechsim.sim.prepare import boost_speedup, efficiency
from mechsim.sim.search import enumerate_plans
from mechsim.sim.search_bounds import LayerBound, uniform_layers
from mechsim.sim.search_space import Bounds, SearchSpace
from mechsim.sim.stacks import get_stack


def _space_bounds(model, cluster, gbs, seq, space, stack="megatron_te", precision="bf16"):
    """(candidate, layer bound, FLOP bound, estimate or None, tail bound) of every plan of the space that fits."""
    gpu = cluster.sys.gpu
    base = TrainingWorkload(model=preset(model), seq=seq, precision=precision, stack=stack)
    st = calibrated_stack(gpu, get_stack(stack))
    cands, _ = enumerate_plans(base, cluster, gbs, space, Bounds(base, st.fused, gpu))
    layer = LayerBound(base, st, gpu, cluster)
    out = []
    for c in cands:
        try:
            e = estimate(c.workload, cluster).step_time_s
        except ValueError:
            e = None
        out.append((c, layer.step_lb(c.workload), c.step_lb_s, e, layer.tail_lb(c.workload)))
    return out


SPACES = [
    # model, cluster, gbs, seq, space[, stack, precision]: an 8-GPU node, two nodes (TP and PP over
    # the NIC), NVL72, a B200 node (no boost-clock GEMM speed-up), an MoE model with every layer
    # MoE; Megatron-LM 2021 on A100s (blocking p2p), DeepSpeed's serial ZeRO-3, FP8; where the clock matters:
    # 70B's heavy GEMMs on 32 H200s and 128 H100s (estimates at 1,530-1,890 MHz, below the 1,980 boost)
    ("llama3-8b", C.Cluster(system="hgx_h100", nodes=1), 32, 4096, SearchSpace()),
    ("llama3-8b", C.Cluster(system="hgx_h100", nodes=2), 64, 4096, SearchSpace(mbs=(1, 2), zero=(0, 1))),
    ("llama3.2-1b", C.Cluster(system="hgx_b200", nodes=1), 64, 8192, SearchSpace(mbs=(1, 4))),
    ("llama3-8b", C.Cluster(system="gb200_nvl72", nodes=1), 72, 4096,
     SearchSpace(mbs=(1,), zero=(1,), recompute=("none", "full"))),
    ("mixtral-8x7b", C.Cluster(system="hgx_h200", nodes=2), 32, 4096,
     SearchSpace(mbs=(1,), zero=(0, 1), max_pp=4)),
    ("llama3-8b", C.Cluster(system="dgx_a100", nodes=2), 64, 2048, SearchSpace(mbs=(1,)), "megatron_2021"),
    ("llama3-8b", C.Cluster(system="hgx_h100", nodes=1), 32, 4096, SearchSpace(mbs=(1,)), "deepspeed_zero3_2021"),
    ("llama3-8b", C.Cluster(system="hgx_h100", nodes=1), 32, 4096, SearchSpace(mbs=(2,)), "megatron_te", "fp8"),
    ("llama3-70b", C.Cluster(system="hgx_h200", nodes=4), 64, 8192,
     SearchSpace(mbs=(1, 2), zero=(1,), recompute=("none", "selective"))),
    ("llama3-70b", C.Cluster(system="hgx_h100", nodes=16), 256, 8192, SearchSpace(mbs=(1,), zero=(1,), recompute=("none",))),
]
CLOCKED = SPACES[-2:]


@pytest.fixture(scope="module", params=range(len(SPACES)), ids=[f"{s[0]}-{s[1].system}x{s[1].nodes}-{'-'.join(s[5:]) or 'megatron_te'}" for s in SPACES])
def space_bounds(request):
    return _space_bounds(*SPACES[request.param])


@pytest.mark.slow
def test_layer_bound_is_below_every_estimate(space_bounds):
    """A true lower bound: <= the estimate on every plan of the space (and so it prunes nothing
    that could enter the table); tighter than the FLOP bound on almost every plan. (Also checked
    by hand on 2,338 plans of 70B on 1,024 H100s, 800 of 405B on 16,384, and torchtitan, eager
    and Qwen3-30B-A3B spaces: none above its estimate.)"""
    timed = [(c, lb, flops, e) for c, lb, flops, e, _ in space_bounds if e is not None]
    assert len(timed) > 10
    for c, lb, flops, e in timed:
        assert lb is not None, c.workload.parallel
        assert lb <= e * (1 + 1e-12), (c.workload.parallel, c.workload.mbs, c.workload.recompute, lb, e)
        assert flops <= e * (1 + 1e-12)
    tighter = sum(lb > flops for _, lb, flops, _ in timed)
    assert tighter >= 0.9 * len(timed)


@pytest.mark.slow
def test_tail_bound_is_below_every_estimate(space_bounds):
    """The tail bound (layer bound + pipeline p2p + DP / FSDP tail): <= the estimate on every plan,
    >= the layer bound; None only for MoE models (their host syncs and all-to-all overlap are not
    in it) and a stack's serial ZeRO-3 (sim/zero3_2021.py)."""
    timed = [(c, lb, e, tail) for c, lb, _, e, tail in space_bounds if e is not None]
    for c, lb, e, tail in timed:
        w = c.workload
        if tail is None:
            assert w.model.moe is not None or (w.parallel.zero == 3 and w.stack == "deepspeed_zero3_2021"), w.parallel
            continue
        assert lb * (1 - 1e-9) <= tail <= e * (1 + 1e-12), (w.parallel, w.mbs, w.recompute, lb, tail, e)


@pytest.mark.slow
@pytest.mark.parametrize("case", CLOCKED, ids=[f"{s[0]}-{s[1].system}x{s[1].nodes}" for s in CLOCKED])
def test_bound_gemm_speed_is_the_fastest_power_state(case):
    """The layer bound's premise (sim/search_bounds.py): no power state runs a GEMM faster than the
    bound's speed s_mm (gemm_speed at the boost clock), whatever clock the estimate's power model gives
    the plan; on these spaces the clock is throttled below boost on most plans (the room a sound bound
    on the clock would have: docs/speed.md, "What a bound on the sustained clock would buy")."""
    model, cluster, gbs, seq, space = case
    gpu = cluster.sys.gpu
    base = TrainingWorkload(model=preset(model), seq=seq, precision="bf16", stack="megatron_te")
    st = calibrated_stack(gpu, get_stack("megatron_te"))
    layer = LayerBound(base, st, gpu, cluster)
    cands, _ = enumerate_plans(base, cluster, gbs, space, Bounds(base, st.fused, gpu))
    f_boost, r = float(gpu.boost_clock_hz), boost_speedup(efficiency(gpu))
    line = calibration_boost(gpu.key) or f_boost
    clocks = [estimate(c.workload, cluster).sm_clock_hz for c in cands]
    assert layer.s_mm == pytest.approx(max(1.0, r, float(gemm_speed(f_boost, calibration_clock(gpu.key), line, r))))
    for f in clocks:
        assert 0 < f <= f_boost and float(gemm_speed(f, calibration_clock(gpu.key), line, r)) <= layer.s_mm * (1 + 1e-12)
    assert sum(f < 0.95 * f_boost for f in clocks) >= 0.5 * len(clocks)


def test_no_layer_bound_where_layers_differ():
    """MoE with dense first layers and MTP modules (DeepSeek-V3): no per-layer bound, the FLOP bound stays."""
    assert not uniform_layers(preset("deepseek-v3"))
    assert uniform_layers(preset("mixtral-8x7b")) and uniform_layers(preset("llama3-70b"))
    cl = C.Cluster(system="hgx_h100", nodes=1)
    base = TrainingWorkload(model=preset("deepseek-v3"), seq=4096, precision="bf16", stack="megatron_te")
    st = calibrated_stack(cl.sys.gpu, get_stack("megatron_te"))
    assert LayerBound(base, st, cl.sys.gpu, cl).step_lb(base) is None
