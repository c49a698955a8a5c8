"""Per-GPU op lists of parallel plans (model/shard.py, model/comm.py, model/ops_dp.py)."""

import math

import pytest
from pydantic import ValidationError

from mechsim.model import InferenceWorkload, TrainingWorkload, build_ops, count_flops
from mechsim.model.memory_parallel import gpu_memory, inflight_microbatches, stage_param_count
from mechsim.model.ops import StreamShape
from mechsim.model.parallel import Parallelism
from mechsim.model.shard import kv_replicated_weight_bytes, padded_vocab

F = frozenset({"norm", "act", "rope", "cross_entropy", "optimizer", "concat_proj"})


ONE_GPU = Parallelism()


def tw(par=ONE_GPU, model="llama3-8b", **kw):
    kw = {"seq": 4096, "precision": "bf16", **kw}
    return TrainingWorkload(model=model, parallel=par, **kw)


def colls(w, fused=F):
    return [o for o in build_ops(w, fused) if o.kind == "collective"]


def layer_mm(w, fused=F):
    return sum(o.flops * o.count for o in build_ops(w, fused) if o.kind == "matmul" and o.name.startswith("layer/"))


def coll_bytes(ops, prefix):
    return sum(o.shape.bytes * o.count for o in ops if o.name.startswith(prefix))


@pytest.mark.parametrize("model", ["llama3-8b", "mixtral-8x7b", "deepseek-v3", "gpt3-175b"])
def test_default_parallelism_is_identity(model):
    w = TrainingWorkload(model=model, seq=2048)
    assert build_ops(w, F) == build_ops(w.model_copy(update={"parallel": Parallelism()}), F)
    assert not colls(w)


def test_tp2_halves_layer_matmul_flops_exactly():
    assert layer_mm(tw(Parallelism(tp=2))) == layer_mm(tw()) / 2


def test_tp_all_reduce_bytes_four_per_layer_per_microbatch():
    w = tw(Parallelism(tp=4), grad_accum=2)
    ops = colls(w)
    T, d, L = 4096, 4096, 32
    layer_ar = [o for o in ops if o.name.split("/")[2].startswith(("attn_", "mlp_"))]
    assert {o.shape.op for o in layer_ar} == {"all_reduce"}
    assert sum(o.shape.bytes * o.count for o in layer_ar) == 4 * L * 2 * T * d * 2


def test_sp_conserves_bytes_forward():
    """AG + RS carry the volume of one AR (ring bus factors (n-1)/n twice vs 2(n-1)/n)."""
    ar = colls(tw(Parallelism(tp=4)))
    sp = colls(tw(Parallelism(tp=4, sp=True)))
    fwd = lambda ops, f: sum(o.shape.bytes * o.count * f(o) for o in ops if o.phase == "fwd" and "/ce_" not in o.name)
    bus = lambda o: 2.0 if o.shape.op == "all_reduce" else 1.0
    assert fwd(ar, bus) == fwd(sp, bus)


def test_sp_splits_norms_over_tp():
    ops = {o.name: o for o in build_ops(tw(Parallelism(tp=4, sp=True)), F) if o.phase == "fwd"}
    assert ops["layer/norm_mlp"].shape == StreamShape(4096 * 4096 // 4)


def test_pp4_puts_a_quarter_of_the_layers_on_a_gpu():
    ops = build_ops(tw(Parallelism(pp=4)), F)
    o = next(o for o in ops if o.name == "layer/attn/o_proj")
    assert o.count == 32 // 4
    assert not [o for o in ops if o.name.startswith("embed/")]          # last stage: no embedding
    assert [o for o in ops if o.name == "head/logits"]
    p2p = [o for o in ops if o.name.startswith("comm/pp/")]
    assert {o.count for o in p2p} == {1} and {o.shape.bytes for o in p2p} == {4096 * 4096 * 2}


def test_zero3_gathers_twice_the_parameter_bytes():
    w = tw(Parallelism(dp=8, zero=3))
    ops = colls(w)
    ag = sum(o.shape.bytes * o.count for o in ops if "param_ag" in o.name)
    assert ag == pytest.approx(2 * w.model.param_count() * 2, rel=1e-6)


def test_zero0_buckets_the_fp32_gradients():
    w = tw(Parallelism(dp=4))
    ops = [o for o in colls(w) if o.name == "comm/dp/grad_ar"]
    grad = 4 * w.model.param_count()
    assert ops[0].count == math.ceil(grad / (25 * 2**20))
    assert ops[0].shape.bytes * ops[0].count == pytest.approx(grad, rel=1e-6)


def test_dp_grad_buckets_follow_the_layer_backward():
    names = [o.name for o in build_ops(tw(Parallelism(dp=4)), F)]
    i = names.index("comm/dp/grad_ar")
    assert names[i - 1].startswith("layer/") and names[i + 1].startswith("embed/")


def test_zero1_optimizer_runs_on_a_dp_shard():
    opt = lambda w: next(o for o in build_ops(w, F) if o.kind == "optimizer")
    assert opt(tw(Parallelism(dp=4, zero=1))).flops == pytest.approx(opt(tw()).flops / 4)


def test_sum_over_gpus_of_matmul_flops_matches_one_gpu():
    """tp*pp GPUs of one replica: layer matmuls add up exactly; replicated: MLA down-projections
    (not here), padded vocab rows (none for Llama 3 at tp=2: 128256 = 501*256)."""
    one = layer_mm(tw())
    shard = layer_mm(tw(Parallelism(tp=2, pp=4)))
    assert shard * 2 * 4 == one
    head = lambda w: sum(o.flops * o.count for o in build_ops(w, F) if o.name.startswith("head/logits"))
    assert head(tw(Parallelism(tp=2))) * 2 == head(tw())


def test_cp_attention_flops_split_exactly():
    att = lambda w: count_flops(build_ops(w, F), ["attention"])
    assert att(tw(Parallelism(cp=2))) * 2 == pytest.approx(att(tw()), rel=1e-12)
    ring = [o for o in colls(tw(Parallelism(cp=4))) if o.name.startswith("comm/cp/")]
    assert {o.count for o in ring} == {32 * 3}


def test_ep_all_to_all_and_local_experts():
    w = tw(Parallelism(ep=4, dp=4), model="mixtral-8x7b")
    a2a = [o for o in colls(w) if o.name.startswith("comm/ep/")]
    assert len(a2a) == 4 and {o.shape.bytes for o in a2a} == {4096 * 2 * 4096 * 2}
    exp = next(o for o in build_ops(w, F) if o.name == "layer/moe/experts/gate_up")
    assert exp.shape.batch == 2                                              # 8 experts / ep 4


def test_inference_tp_all_reduces():
    w = InferenceWorkload(model="llama3-70b", batch=8, parallel=Parallelism(tp=8))
    ar = [o for o in build_ops(w) if o.name in ("comm/tp/attn_out_ar", "comm/tp/mlp_out_ar")]
    assert [o.count for o in ar] == [80, 80] and ar[0].shape.bytes == 8 * 8192 * 2


@pytest.mark.parametrize("kw, words", [
    ({"tp": 3}, ["tp=3", "n_heads=32", "n_kv_heads=8", "nearest valid tp: 2, 4"]),
    ({"pp": 3}, ["n_layers=32", "pp*vp=3*1", "nearest valid pp: 2, 4"]),
    ({"cp": 3}, ["seq=4096", "2*cp", "nearest valid cp: 2, 4"]),
    ({"pp": 2, "vp": 2, "schedule": "interleaved"}, ["grad_accum=3", "pp=2", "nearest valid grad_accum: 2, 4"]),
])
def test_divisibility_errors_name_fields_and_suggest(kw, words):
    with pytest.raises(ValidationError) as e:
        tw(Parallelism(**kw), grad_accum=3)
    for wd in words:
        assert wd in str(e.value)


def test_ep_errors():
    with pytest.raises(ValidationError, match="ep=3 does not divide moe.n_experts=8"):
        tw(Parallelism(ep=3, dp=3), model="mixtral-8x7b")
    with pytest.raises(ValidationError, match="needs a MoE model"):
        tw(Parallelism(ep=2, dp=2))


def test_vocab_padding_and_kv_replication():
    assert padded_vocab(50257, 1) == 50257 and padded_vocab(50257, 4) == 50688
    w = tw(Parallelism(tp=16))                       # 8 KV heads: each replicated on 2 GPUs
    cfg = w.model
    assert kv_replicated_weight_bytes(cfg, w.parallel, 2) == 2 * 4096 * 128 * 0.5 * 32 * 2


def test_inflight_microbatches():
    assert inflight_microbatches(Parallelism(pp=4), 0, 8) == 4
    assert inflight_microbatches(Parallelism(pp=4), 3, 8) == 1
    # Korthikanti et al. 2022: interleaved first stage holds pp*(1 + (pp-1)/(pp*vp)) micro-batches
    assert inflight_microbatches(Parallelism(pp=4, vp=2, schedule="interleaved"), 0, 8) == 4 * (1 + 3 / 8)


def test_memory_default_matches_single_gpu_and_shards():
    from mechsim.model import memory as M
    w = tw()
    g = gpu_memory(w, F)
    assert (g.weights, g.grads, g.optimizer) == (M.weight_bytes(w), M.grad_bytes(w), M.optimizer_state_bytes(w))
    assert g.activations == pytest.approx(M.activation_bytes_saved(w, F) + M.logits_bytes(w, F))
    z = gpu_memory(tw(Parallelism(dp=4, zero=3)), F)
    assert z.weights == pytest.approx(g.weights / 4) and z.optimizer == pytest.approx(g.optimizer / 4)
    pp = tw(Parallelism(pp=4, tp=2))
    assert sum(stage_param_count(pp, s) for s in range(4)) * 2 == pytest.approx(w.model.param_count(), rel=1e-4)
