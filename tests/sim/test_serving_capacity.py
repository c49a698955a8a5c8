"""Max rate within latency targets, best_serving_plan, serve(), quantization rules."""

import math

import pytest

import mechsim
from mechsim import hwdb
from mechsim.sim.serving import (Deployment, Engine, Lengths, Server, best_serving_plan, max_rate, serve)
from mechsim.sim.serving.quant import check_quant, dequant_time_s, gemm_dtype, normalize_dtype


@pytest.fixture(scope="module")
def srv():
    dep = Deployment.make("llama3-70b", "hgx_h200", 4, "fp8", "fp8")
    return Server(dep, Lengths.of(2048, 256, 8192), Engine.default())


@pytest.mark.parametrize("pct", ["mean", "p90", "p99"])
def test_max_rate_is_the_edge_of_the_targets(srv, pct):
    lim = max_rate(srv, ttft_s=0.5, tpot_s=0.04, percentile=pct)
    assert lim.feasible and lim.binding in ("ttft", "tpot")
    p = lim.point
    assert p.ttft_at(pct) <= 0.5 and p.tpot_at(pct) <= 0.04
    over = srv.at_rate(lim.max_rate_per_s * 1.01)
    assert over.ttft_at(pct) > 0.5 or over.tpot_at(pct) > 0.04 or not over.stable


def test_a_percentile_target_admits_less_than_the_same_mean_target(srv):
    """A p99 bound is stricter than a bound on the mean: the replica sustains a lower rate."""
    rates = [max_rate(srv, ttft_s=0.5, tpot_s=0.04, percentile=q).max_rate_per_s for q in ("mean", "p90", "p99")]
    assert rates[0] > rates[1] > rates[2] > 0


def test_looser_target_never_lowers_the_max_rate(srv):
    a = max_rate(srv, tpot_s=0.03).max_rate_per_s
    b = max_rate(srv, tpot_s=0.06).max_rate_per_s
    assert b >= a > 0


def test_no_targets_is_throughput_bound(srv):
    lim = max_rate(srv)
    assert lim.feasible and lim.max_rate_per_s == pytest.approx(srv.saturation_rate(), rel=1e-5)


def test_impossible_targets_report_the_closest_point(srv):
    lim = max_rate(srv, ttft_s=0.001, tpot_s=0.001)
    assert not lim.feasible and lim.max_rate_per_s == 0
    assert "infeasible" in lim.reason and "TTFT" in lim.reason and "TPOT" in lim.reason
    assert lim.point.ttft_s > 0.001 and lim.point.tpot_s > 0.001


@pytest.mark.parametrize("field,kw", [("ttft_s", {"ttft_s": 0}), ("tpot_s", {"tpot_s": -1.0})])
def test_bad_targets_name_the_field(srv, field, kw):
    with pytest.raises(ValueError, match=field):
        max_rate(srv, **kw)


def test_best_plan_fields_and_choice():
    plan = best_serving_plan("llama3-70b", "hgx_h200", 2048, 256, ttft_s=0.5, tpot_s=0.04,
                             weight_dtype="fp8", kv_dtype="fp8")
    assert plan.meets_targets and plan.gpus == plan.tp * plan.replicas == plan.tp
    assert plan.ttft_s <= 0.5 and plan.tpot_s <= 0.04 and plan.max_rate_per_s > 0
    best = max(c["output_tokens_per_s_per_gpu"] for c in plan.candidates if c["feasible"])
    assert plan.output_tokens_per_s_per_gpu == pytest.approx(best)
    assert {c["tp"] for c in plan.candidates} == {1, 2, 4, 8}
    d = plan.to_dict()
    for k in ("gpus", "tp", "output_tokens_per_s_per_gpu", "max_rate_per_s", "ttft_s", "tpot_s", "meets_targets", "reason"):
        assert k in d


def test_best_plan_for_a_rate_counts_replicas():
    one = best_serving_plan("llama3-8b", "hgx_h200", 1024, 256, ttft_s=0.3, tpot_s=0.03, weight_dtype="fp8", kv_dtype="fp8")
    plan = best_serving_plan("llama3-8b", "hgx_h200", 1024, 256, ttft_s=0.3, tpot_s=0.03, rate=10 * one.max_rate_per_s,
                             weight_dtype="fp8", kv_dtype="fp8")
    per = plan.max_rate_per_s / plan.replicas
    assert plan.replicas == math.ceil(10 * one.max_rate_per_s / per - 1e-9)
    assert plan.gpus == plan.tp * plan.replicas
    assert plan.rate_per_s == pytest.approx(10 * one.max_rate_per_s)
    assert plan.meets_targets and plan.ttft_s <= 0.3 and plan.tpot_s <= 0.03


def test_best_plan_infeasible_says_so():
    plan = best_serving_plan("llama3-70b", "hgx_h100", 2048, 256, ttft_s=0.01, tpot_s=0.001)
    assert not plan.meets_targets
    assert "no configuration meets the targets" in plan.reason and "closest" in plan.reason
    assert plan.ttft_s > 0.01 and plan.tpot_s > 0.001


def test_nvl72_offers_larger_tp():
    plan = best_serving_plan("llama3.1-405b", "gb200_nvl72", 1024, 256, tpot_s=0.05, weight_dtype="fp8", kv_dtype="fp8")
    assert max(c["tp"] for c in plan.candidates) > 8


def test_model_that_fits_nowhere_is_an_error():
    with pytest.raises(ValueError, match="model"):
        best_serving_plan("llama3.1-405b", "h100_sxm", 1024, 128, tps=(1,))


@pytest.mark.parametrize("kw,field", [(dict(rate=0), "rate"), (dict(rate=-2.0), "rate")])
def test_best_plan_bad_rate(kw, field):
    with pytest.raises(ValueError, match=field):
        best_serving_plan("llama3-8b", "h200_sxm", 128, 128, **kw)


def test_serve_answers_whole():
    rep = mechsim.serve("llama3-70b", "hgx_h200", 4, 2048, 256, ttft_s=0.5, tpot_s=0.04, weight_dtype="fp8",
                        kv_dtype="fp8")
    assert rep.meets_targets and rep.kv_sequences > 0 and rep.point.tpot_s <= 0.04
    d = rep.to_dict()
    assert d["kv"]["bytes_per_token"] == 2 * 80 * 8 * 128 * 1 / 4


def test_serve_unstable_rate_and_no_kv_room():
    rep = serve("llama3-8b", "h200_sxm", 1, 1024, 128, rate=1e4, weight_dtype="fp8", kv_dtype="fp8")
    assert not rep.point.stable and "unstable" in rep.reason
    with pytest.raises(ValueError, match="tp"):
        serve("llama3.1-405b", "h200_sxm", 1, 1024, 128, weight_dtype="fp8")


@pytest.mark.parametrize("kw,field", [
    (dict(tp=3), "tp"), (dict(tp=16), "tp"), (dict(tp=0), "tp"),
    (dict(weight_dtype="fp5"), "weight_dtype"), (dict(kv_dtype="int3"), "kv_dtype"),
])
def test_deployment_bad_inputs(kw, field):
    args = dict(model="llama3-70b", hw="hgx_h200")
    args.update(kw)
    with pytest.raises(ValueError, match=field):
        Deployment.make(**args)


def test_fp4_only_on_blackwell_fp8_not_on_ampere():
    check_quant(hwdb.get_gpu("b200"), "fp4", "fp8")
    with pytest.raises(ValueError, match="weight_dtype"):
        check_quant(hwdb.get_gpu("h200_sxm"), "fp4", "fp8")
    with pytest.raises(ValueError, match="weight_dtype"):
        check_quant(hwdb.get_gpu("a100_sxm_80gb"), "fp8", "bf16")
    check_quant(hwdb.get_gpu("a100_sxm_80gb"), "int4", "bf16")    # weight-only: bf16 GEMMs
    assert normalize_dtype("NVFP4", "weight_dtype", ("fp4",)) == "fp4"
    assert gemm_dtype("int4") == "bf16" and gemm_dtype("fp8") == "fp8"


def test_int4_dequant_cost_closed_form_and_growth():
    gpu = hwdb.get_gpu("h200_sxm")
    P = 1e9
    assert dequant_time_s(P, 100, "bf16", gpu) == 0.0
    one = dequant_time_s(P, 128, "int4", gpu)
    assert one == pytest.approx(P * 1 * 2.0 / gpu.peak_flops("fp32"))
    assert dequant_time_s(P, 129, "int4", gpu) == pytest.approx(2 * one)


def test_int4_weights_halve_decode_weight_reads_vs_fp8_on_ampere():
    a = Deployment.make("llama3-8b", "a100_sxm_80gb", 1, "bf16", "bf16")
    q = Deployment.make("llama3-8b", "a100_sxm_80gb", 1, "int4", "bf16")
    from mechsim.sim.serving import decode_s
    assert decode_s(q, 1, 512) < 0.6 * decode_s(a, 1, 512)


def test_expert_parallel_moe_deployment():
    from mechsim.sim.serving import kv_capacity
    ep8 = Deployment.make("deepseek-v3", "hgx_h200", 1, "fp8", "fp8", ep=8)
    tp8 = Deployment.make("deepseek-v3", "hgx_h200", 8, "fp8", "fp8")
    assert ep8.gpus == tp8.gpus == 8
    L = Lengths.of(1024, 256, 8192)

    s_ep = Server(ep8, L, Engine.default())
    one = kv_capacity(ep8.model, ep8.gpu, 1, "fp8", "fp8", ep=8)
    assert s_ep.kv_sequences == 8 * one.sequences(1280)          # each attention rank keeps its own KV
    # routed experts split over 8 GPUs, attention replicated: more weight bytes per GPU than tp=8
    assert one.weights_bytes > kv_capacity(tp8.model, tp8.gpu, 8, "fp8", "fp8").weights_bytes
    plan = best_serving_plan("deepseek-v3", "hgx_h200", 1024, 256, tpot_s=0.05, weight_dtype="fp8", kv_dtype="fp8")
    assert any(c["ep"] > 1 for c in plan.candidates) and plan.gpus == plan.tp * plan.ep * plan.replicas


@pytest.mark.parametrize("kw,field", [
    (dict(model="llama3-8b", ep=2), "ep"), (dict(model="deepseek-v3", ep=3), "ep"),
    (dict(model="deepseek-v3", tp=16), "tp: 16 GPUs exceed"),   # tp*ep may span nodes (wide EP), tp may not
])
def test_bad_ep(kw, field):
    args = dict(hw="hgx_h200", weight_dtype="fp8")
    args.update(kw)
    with pytest.raises(ValueError, match=field):
        Deployment.make(**args)
    if kw["model"] == "llama3-8b":
        with pytest.raises(ValueError, match="ep"):
            best_serving_plan("llama3-8b", "hgx_h200", 128, 128, eps=(2,))


def test_pipeline_parallel_deployment():
    from mechsim.sim.serving import decode_s, kv_bytes_per_token
    from mechsim.sim.serving.steps import _estimate_s
    cfg = mechsim.model.preset("llama3.1-405b")
    assert kv_bytes_per_token(cfg, "fp8", tp=8, pp=2) == kv_bytes_per_token(cfg, "fp8", tp=8) / 2
    dep = Deployment.make("llama3.1-405b", "hgx_h200", 8, "fp8", "fp8", pp=2)
    assert dep.gpus == 16
    # a token of a sequence passes both stages; each micro-batch carries half of the sequences
    assert decode_s(dep, 64, 2048) == pytest.approx(_estimate_s(dep, "decode", 32, 2048))
    plan = best_serving_plan("llama3.1-405b", "hgx_h200", 2048, 256, tpot_s=0.06, weight_dtype="fp8",
                             kv_dtype="fp8", tps=(8,), pps=(1, 2))
    assert {(c["tp"], c["pp"]) for c in plan.candidates} == {(8, 1), (8, 2)}
    assert plan.gpus == plan.tp * plan.pp * plan.replicas
    with pytest.raises(ValueError, match="pp"):
        Deployment.make("llama3.1-405b", "hgx_h200", 1, "fp8", pp=8)     # 126 layers


def test_plan_for_a_rate_uses_the_fewest_gpus():
    plan = best_serving_plan("llama3-70b", "hgx_h200", 2048, 256, ttft_s=0.5, tpot_s=0.04, rate=30,
                             weight_dtype="fp8", kv_dtype="fp8")
    for c in plan.candidates:
        if c["feasible"]:
            assert plan.gpus <= c["gpus"] * math.ceil(30 / c["max_rate_per_s"] - 1e-9)
