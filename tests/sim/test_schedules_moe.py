"""Zero-bubble and DualPipe in the multi-GPU estimate; MoE sharding with few local experts."""

from mechsim.model import TrainingWorkload, preset
from mechsim.model.parallel import Parallelism
from mechsim.model.shard import local_config
from mechsim.sim.cluster import Cluster
from mechsim.sim.estimate import estimate
from mechsim.validation.analysis.published_compare import pipeline_split


def _dsv3(schedule: str) -> TrainingWorkload:
    cfg = preset("deepseek-v3")
    par = Parallelism(pp=16, ep=64, dp=128, zero=1, schedule=schedule, **pipeline_split(cfg, 16, 1))
    return TrainingWorkload(model="deepseek-v3", mbs=1, seq=4096, grad_accum=32, precision="fp8",
                            stack="megatron_te", parallel=par)


def test_local_experts_may_be_fewer_than_top_k():
    loc = local_config(preset("deepseek-v3"), Parallelism(pp=16, ep=64, dp=128, **pipeline_split(preset("deepseek-v3"), 16, 1)))
    assert loc.moe.n_experts == 256 // 64 and loc.moe.top_k == 8


def test_zero_bubble_and_dualpipe_schedules():
    cl = Cluster(system="hgx_h100", nodes=256)
    e1, zb, dp = (estimate(_dsv3(s), cl) for s in ("1f1b", "zero_bubble", "dualpipe"))
    assert zb.by_category["pipeline_bubble"] < e1.by_category["pipeline_bubble"]
    assert zb.exposed_comm["ep"] == e1.exposed_comm["ep"]          # zero bubble hides no all-to-all
    assert dp.exposed_comm["ep"] < e1.exposed_comm["ep"]           # DualPipe: a2a under the paired compute
    assert dp.step_time_s < zb.step_time_s < e1.step_time_s


def test_tp_comm_overlap_leaves_one_chunk_exposed_and_the_hidden_rest_contends():
    import pytest
    from mechsim.sim.overlap import default_contention
    base = dict(tp=4, sp=True, pp=1, dp=2, zero=1)
    w = lambda **kw: TrainingWorkload(model="llama3-70b", mbs=1, seq=4096, grad_accum=2, precision="bf16",  # noqa: E731
                                      stack="megatron_te", parallel=Parallelism(**base, **kw))
    cl = Cluster(system="hgx_h100", nodes=1)
    off, on = estimate(w(), cl), estimate(w(tp_comm_overlap=True), cl)
    # one chunk of tp exposed; the other 3/4 slow the GEMMs beside them by the contention slowdown
    e = 1 / 4 + 3 / 4 * default_contention()
    assert on.exposed_comm["tp"] == pytest.approx(off.exposed_comm["tp"] * e, rel=1e-9)
    assert off.exposed_comm["tp"] / 4 < on.exposed_comm["tp"] < off.exposed_comm["tp"]
    assert on.step_time_s < off.step_time_s
    with pytest.raises(ValueError, match="sequence parallelism"):
        Parallelism(tp=4, tp_comm_overlap=True)


def test_tp_overlap_chunks_the_tp_gemms_and_never_speeds_them_up():
    from mechsim.sim.distributed import chunked_tp_gemms
    from mechsim.sim.estimate import calibrated_stack, efficiency, hw_rates, prepare
    from mechsim.sim.kernels import kernel_times
    from mechsim.sim.stacks import get_stack
    from mechsim import hwdb
    par = Parallelism(tp=4, sp=True, dp=2, zero=1, tp_comm_overlap=True)
    w = TrainingWorkload(model="llama3-70b", mbs=1, seq=4096, precision="bf16", stack="megatron_te", parallel=par)
    g = hwdb.get_gpu("h100")
    st = calibrated_stack(g, get_stack("megatron_te"))
    t = prepare(w, st.fused).table
    rates, eff = hw_rates(g, 1.0), efficiency(g)
    base = kernel_times(t, rates, eff, st.attention).gpu_s
    ch = chunked_tp_gemms(t, base, 4, rates, eff, st.attention)
    names = [o.name for o in t.ops]
    i, j = names.index("layer/mlp/gate_up"), names.index("layer/mlp/gate_up/wgrad")
    assert ch[i] >= base[i] and ch[j] == base[j]            # wgrad runs whole
    assert (ch >= base - 1e-15).all() and ch.sum() > base.sum()


def test_hidden_cp_ring_contends_with_the_attention_it_runs_beside():
    """CP send/recv hidden behind attention still costs contention x hidden seconds; with no
    contention only the unhidden part is exposed."""
    from mechsim.sim import overlap
    from mechsim.sim.step import clear_stages
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=8192, grad_accum=4, precision="bf16", stack="megatron_te",
                         parallel=Parallelism(cp=4, dp=2))
    cl = Cluster(system="hgx_h100", nodes=1)
    e = estimate(w, cl)
    assert e.exposed_comm["cp"] > 0.0
    orig = overlap.default_contention
    try:
        overlap.default_contention = lambda: 0.0
        clear_stages()   # the step of w is memoised (sim/step.py)
        e0 = estimate(w, cl)
    finally:
        overlap.default_contention = orig
    assert e0.exposed_comm["cp"] < e.exposed_comm["cp"]
