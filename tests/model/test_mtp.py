"""Multi-token prediction in the training op list (TransformerConfig.mtp_layers; model/ops_train._mtp)."""

import pytest

from mechsim.model import TrainingWorkload, TransformerConfig, preset
from mechsim.model.build import build_ops
from mechsim.model.flops import model_flops_per_step, mtp_model_flops
from mechsim.model.memory_parallel import gpu_memory, stage_param_count
from mechsim.model import memory as M
from mechsim.model.parallel import Parallelism
from mechsim.model.shard import local_config, mtp_stage, train_local_config

DSV3 = preset("deepseek-v3")
T = 384    # not 512: test_mla_up_recompute caches a stale-config workload of that shape (see _small)


ONE_GPU = Parallelism()


def _small(mtp: int, parallel: Parallelism = ONE_GPU, n_layers: int = 4, **kw) -> TrainingWorkload:
    # a fresh config: model_copy would carry a cached n_moe_layers of the 61-layer preset
    m = TransformerConfig(**{**DSV3.model_dump(), "n_layers": n_layers, "mtp_layers": mtp})
    return TrainingWorkload(model=m, mbs=1, seq=T, precision="bf16", parallel=parallel, **kw)


def _count(ops, name: str) -> int:
    return sum(o.count for o in ops if o.name == name)


def test_mtp_adds_a_layer_its_projection_and_a_second_head():
    base, mtp = build_ops(_small(0)), build_ops(_small(1))
    assert not any(o.name.startswith("mtp/") for o in base)
    assert _count(mtp, "layer/attn/o_proj") == _count(base, "layer/attn/o_proj") + 1   # its transformer layer
    assert _count(mtp, "layer/moe/router") == _count(base, "layer/moe/router") + 1     # of the last (MoE) kind
    d = DSV3.d_model
    eh = [o for o in mtp if o.name == "mtp/eh_proj"]
    assert len(eh) == 1 and (eh[0].shape.M, eh[0].shape.N, eh[0].shape.K) == (T, d, 2 * d) and eh[0].flops == 2 * T * d * 2 * d
    head = next(o for o in base if o.name == "head/logits")
    second = next(o for o in mtp if o.name == "mtp/head/logits")
    assert second.flops == head.flops and second.count == head.count
    assert any(o.name == "mtp/embed/fwd" for o in mtp) and any(o.name.startswith("mtp/loss/") for o in mtp)


def test_mtp_ops_sit_on_the_last_stage_only():
    p = Parallelism(pp=2, dp=1)
    w = _small(1, p, grad_accum=2)
    assert mtp_stage(w.model, p) == 1
    assert train_local_config(w.model, p, 0) == local_config(w.model, p, 0)
    last = train_local_config(w.model, p, 1)
    assert last.n_layers == local_config(w.model, p, 1).n_layers + 1
    assert last.n_moe_layers == local_config(w.model, p, 1).n_moe_layers + 1
    ops = build_ops(w)     # the timed stage of an even split: the last, with the MTP ops
    assert any(o.name == "mtp/eh_proj" for o in ops)
    # its embedding copy is summed with the first stage's (untied DeepSeek-V3: only with MTP)
    assert any(o.name == "comm/pp/embed_grad_ar" for o in ops)
    assert not any(o.name == "comm/pp/embed_grad_ar" for o in build_ops(_small(0, p, grad_accum=2)))


def test_mtp_tp_collectives_move_the_2d_wide_input():
    p = Parallelism(tp=2, sp=True, dp=1)
    ops = build_ops(_small(1, p))
    d = DSV3.d_model
    ag = next(o for o in ops if o.name == "comm/tp/mtp_eh_in_ag" and o.phase == "fwd")
    assert ag.shape.bytes == T * 2 * d * 2       # bf16, the whole T x 2d input gathered
    assert any(o.name == "comm/tp/mtp_eh_out_ag" for o in ops)
    eh = next(o for o in ops if o.name == "mtp/eh_proj")
    assert (eh.shape.M, eh.shape.N, eh.shape.K) == (T, d // 2, 2 * d)


def test_model_flops_count_mtp_as_megatron_bridge():
    w = _small(1, n_layers=61)
    tokens, d, V = w.tokens, DSV3.d_model, DSV3.vocab
    m, a = DSV3.moe, DSV3.mla
    attn = DSV3.attn_matmul_params()
    ffn = m.n_experts * d + (m.top_k + m.n_shared_experts) * 3 * d * m.expert_ffn
    core = 3 * DSV3.n_heads * (a.qk_head_dim + a.v_head_dim) * T
    per_token = 6 * (attn + ffn + 3 * d + 2 * d * d + d * V) + core
    assert mtp_model_flops(w) == pytest.approx(per_token * tokens, rel=1e-12)
    assert model_flops_per_step(w) == pytest.approx(model_flops_per_step(_small(0, n_layers=61)) + per_token * tokens)


def test_memory_holds_the_mtp_modules_on_their_stage():
    # one GPU: the parallel breakdown equals the single-GPU functions, MTP included
    w = _small(1)
    g = gpu_memory(w)
    assert g.weights == M.weight_bytes(w) and g.optimizer == M.optimizer_state_bytes(w)
    assert g.activations == pytest.approx(M.activation_bytes_saved(w) + M.logits_bytes(w))
    d = DSV3.d_model
    extra = 3 * d + 2 * d * d + DSV3.layer_params(3)
    assert M.weight_bytes(w) == (_small(0).model.param_count() + extra) * 2
    assert M.activation_bytes_saved(w) > M.activation_bytes_saved(_small(0))
    # pp 2: the last stage adds its MTP layer, norms, eh_proj and a copy of the embedding
    p = Parallelism(pp=2, dp=1)
    with_mtp, without = _small(1, p, grad_accum=2), _small(0, p, grad_accum=2)
    assert stage_param_count(with_mtp, 0) == stage_param_count(without, 0)
    assert stage_param_count(with_mtp, 1) - stage_param_count(without, 1) == extra + DSV3.vocab * d


def test_published_rows_train_mtp_as_they_say():
    from mechsim.validation.analysis.published import load_published
    from mechsim.validation.analysis.published_compare import workload_for
    rows = {r.id: r for r in load_published()}
    on = workload_for(rows["mbridge-26.02-pretrain-gb200-deepseekv3-256g-fp8-mxfp8"])
    off = workload_for(rows["mbridge-25.11-pretrain-gb200-deepseekv3-w-o-mtp-256g-bf16"])
    assert on.model.mtp_layers == 1 and off.model.mtp_layers == 0
    llama = workload_for(rows["mbridge-26.02-pretrain-gb200-llama3-70b-64g-fp8"])
    assert llama.model.mtp_layers == 0


def test_mtp_stage_runs_slower():
    from mechsim.sim.estimate import estimate
    on, off = estimate(_small(1), "h100_sxm"), estimate(_small(0), "h100_sxm")
    assert on.step_time_s > off.step_time_s * 1.15      # 4 layers + head -> 5 layers + 2 heads
