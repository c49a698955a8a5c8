"""Op lists: FLOP identities, scaling invariants, GQA/MLA bytes, fusion, names, speed."""

import pytest

from mechsim.model import (FUSION_GROUPS, InferenceWorkload, TrainingWorkload, build_ops, count_flops,
                           count_kernels, hardware_flops_per_step, model_flops_per_step, preset)
from mechsim.model.build import _build
from mechsim.model.ops import AttentionShape, GemmShape
from mechsim.model.ops_common import causal_pairs

TRAIN_MODELS = ["llama3.2-1b", "llama3-8b", "llama3-70b", "gpt3-175b", "mixtral-8x7b", "deepseek-v3",
                "qwen3-30b-a3b"]


def _op(ops, name, phase="fwd"):
    hits = [o for o in ops if o.name == name and o.phase == phase]
    assert len(hits) == 1, (name, phase, [o.name for o in ops])
    return hits[0]


@pytest.mark.parametrize("name", TRAIN_MODELS)
def test_matmul_flops_exactly_6N(name):
    w = TrainingWorkload(model=name, mbs=2, seq=1024, grad_accum=2)
    cfg = w.model
    expected = 6 * (cfg.matmul_params_per_token() + cfg.d_model * cfg.vocab) * w.tokens
    assert count_flops(build_ops(w), ["matmul"]) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("name", TRAIN_MODELS)
def test_total_close_to_model_flops(name):
    w = TrainingWorkload(model=name, mbs=1, seq=2048)
    ratio = hardware_flops_per_step(w) / model_flops_per_step(w)
    assert 1.0 < ratio < 1.05   # FA backward at 2.5x fwd vs 2x in the MFU convention


def test_llama3_70b_model_flops_match_nemo():
    # validation/published/reference.md (A5): NeMo Llama3-70B, 1602 tok/s/GPU -> 719 TFLOP/s/GPU = 448.8 GFLOP/token at S=8192
    w = TrainingWorkload(model="llama3-70b", mbs=1, seq=8192)
    assert model_flops_per_step(w) / w.tokens == pytest.approx(719e12 / 1602, rel=0.005)
    # NeMo flops_formulas.llama3 closed form
    L, h, g, a, F, S, V = 80, 8192, 8, 64, 28672, 8192, 128256
    nemo = S * L * h * h * (12 + 12 * g / a + 18 * F / h + 12 * S / h * 0.5 + 6 * V / (L * h))
    assert model_flops_per_step(w) == pytest.approx(nemo, rel=1e-12)


def test_doubling_mbs_doubles_matmul_flops():
    a = count_flops(build_ops(TrainingWorkload(model="llama3-8b", mbs=1, seq=2048)), ["matmul"])
    b = count_flops(build_ops(TrainingWorkload(model="llama3-8b", mbs=2, seq=2048)), ["matmul"])
    assert b == pytest.approx(2 * a)


def test_grad_accum_scales_counts_not_optimizer():
    o1 = build_ops(TrainingWorkload(model="llama3-8b", seq=1024, grad_accum=1))
    o4 = build_ops(TrainingWorkload(model="llama3-8b", seq=1024, grad_accum=4))
    assert _op(o4, "layer/attn/o_proj").count == 4 * _op(o1, "layer/attn/o_proj").count == 4 * 32
    assert _op(o4, "optimizer/adamw", "optimizer").count == 1
    assert not [o for o in o1 if o.name == "grad/accumulate"]
    assert _op(o4, "grad/accumulate", "bwd").count == 3


def test_swiglu_three_matrices():
    cfg = preset("llama3-8b")
    w = TrainingWorkload(model=cfg, mbs=1, seq=1024)
    ops = build_ops(w)
    mlp = sum(o.flops * o.count for o in ops if o.phase == "fwd" and o.name.startswith("layer/mlp/")
              and o.kind == "matmul")
    assert mlp == 6 * cfg.d_model * cfg.ffn * w.tokens * cfg.n_layers


def test_matmul_backward_shapes():
    ops = build_ops(TrainingWorkload(model="llama3-8b", mbs=1, seq=1024))
    assert _op(ops, "layer/mlp/down").shape == GemmShape(1024, 4096, 14336, 1)
    assert _op(ops, "layer/mlp/down/dgrad", "bwd").shape == GemmShape(1024, 14336, 4096, 1)
    assert _op(ops, "layer/mlp/down/wgrad", "bwd").shape == GemmShape(14336, 4096, 1024, 1)


def test_attention_flops_and_bwd_ratio():
    w = TrainingWorkload(model="llama3-8b", mbs=2, seq=1024)
    ops = build_ops(w)
    f, b = _op(ops, "layer/attn/core"), _op(ops, "layer/attn/core", "bwd")
    assert f.flops == 2 * 2 * 32 * causal_pairs(1024, 1024) * (128 + 128)
    assert f.flops == pytest.approx(4 * 2 * 32 * 1024 * 1024 * 128 / 2, rel=1e-3)
    assert b.flops == 2.5 * f.flops
    assert f.shape == AttentionShape(2, 32, 8, 1024, 1024, 128, 128, True)


def _decode(model, **kw):
    return build_ops(InferenceWorkload(model=model, batch=8, phase="decode", context_len=4096, **kw))


def test_gqa_decode_attention_reads_kv_once_per_kv_head():
    base = preset("llama3-8b")
    ops8 = _decode(base)
    ops32 = _decode(base.model_copy(update={"n_kv_heads": 32}))
    a8, a32 = _op(ops8, "layer/attn/core"), _op(ops32, "layer/attn/core")
    kv8 = 8 * 4096 * 8 * 2 * 128 * 2
    q_o = 2 * 8 * 32 * 128 * 2
    assert a8.bytes_read + a8.bytes_written == kv8 + q_o
    assert a32.bytes_read - 8 * 32 * 128 * 2 == 4 * kv8
    assert a8.flops == a32.flops == 2 * 8 * 32 * 4096 * 256
    assert a8.shape == AttentionShape(8, 32, 8, 1, 4096, 128, 128, False)


def test_decode_gemms_are_skinny_and_read_weights():
    ops = _decode("llama3-70b")
    down = _op(ops, "layer/mlp/down")
    assert down.shape == GemmShape(8, 8192, 28672, 1)
    assert down.bytes_read == pytest.approx(8192 * 28672 * 2 + 8 * 28672 * 2)
    assert _op(ops, "head/logits").shape.M == 8
    assert _op(ops, "layer/attn/kv_append").bytes_written == 2 * 8 * 8 * 128 * 2


def test_int4_weights_quarter_bytes():
    bf = _op(_decode("llama3-70b"), "layer/mlp/down")
    q4 = _op(_decode("llama3-70b", weight_dtype="int4"), "layer/mlp/down")
    assert q4.bytes_read < 0.3 * bf.bytes_read and q4.dtype == "bf16"
    assert _op(_decode("llama3-70b", weight_dtype="fp8"), "layer/mlp/down").dtype == "fp8"


def test_prefill_causal_and_last_token_logits():
    w = InferenceWorkload(model="llama3-8b", batch=4, phase="prefill", prompt_len=1024)
    ops = build_ops(w)
    core = _op(ops, "layer/attn/core")
    assert core.shape == AttentionShape(4, 32, 8, 1024, 1024, 128, 128, True)
    assert _op(ops, "head/logits").shape.M == 4
    all_rows = build_ops(w.model_copy(update={"prefill_logits": "all"}))
    assert _op(all_rows, "head/logits").shape.M == 4 * 1024
    assert all(o.phase == "fwd" for o in ops)


def test_mla_decode_absorbed_reads_latent_cache():
    ops = _decode("deepseek-v3")
    core = _op(ops, "layer/attn/core")
    assert core.shape == AttentionShape(8, 128, 1, 1, 4096, 576, 512, False)
    assert core.bytes_read == pytest.approx(8 * 4096 * 576 * 2 + 8 * 128 * 576 * 2)
    assert _op(ops, "layer/attn/q_absorb").shape == GemmShape(8, 512, 128, 128)
    assert not [o for o in ops if o.name == "layer/attn/kv_up"]


def test_moe_expert_flops_and_weights_touched():
    cfg = preset("mixtral-8x7b")
    w = TrainingWorkload(model=cfg, mbs=1, seq=4096)
    ops = build_ops(w, {"grouped_gemm", "concat_proj"})
    gu = _op(ops, "layer/moe/experts/gate_up")
    assert gu.shape == GemmShape(4096 * 2 // 8, 2 * 14336, 4096, 8) and gu.kernels == 1
    assert gu.flops == 2 * 4096 * 2 * 2 * 14336 * 4096
    eager = _op(build_ops(w), "layer/moe/experts/gate_up")
    assert eager.kernels == 8
    dec = _op(_decode("deepseek-v3"), "layer/moe/experts/gate_up")
    assert dec.shape.batch < 256   # batch 8 x top-8 touches ~57 of 256 experts


def test_fused_norm_fewer_bytes_one_kernel():
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=2048)
    for phase in ("fwd", "bwd"):
        e, f = _op(build_ops(w), "layer/norm_attn", phase), _op(build_ops(w, {"norm"}), "layer/norm_attn", phase)
        assert e.kernels > 1 and f.kernels == 1
        assert f.bytes_read + f.bytes_written < e.bytes_read + e.bytes_written


def _chain_kernels(ops, name: str, phase: str = "fwd") -> int:
    """Kernels of one chain: its op plus its non-vectorised part (name/strided<class>)."""
    return sum(o.kernels for o in ops if o.phase == phase and (o.name == name or o.name.startswith(name + "/strided")))


def test_eager_kernel_counts_follow_llama_ref():
    ops = build_ops(TrainingWorkload(model="llama3-8b", mbs=1, seq=1024))
    assert _chain_kernels(ops, "layer/norm_attn") == 6 + 3     # pow mean add rsqrt mul mul-w + 3 autocast casts
    assert _chain_kernels(ops, "layer/norm_mlp") == 6 + 2
    assert _chain_kernels(ops, "layer/attn/rope") == 12        # (mul, neg, cat, mul, add, cast) x q, k
    assert _chain_kernels(ops, "layer/mlp/act") == 2           # silu, mul
    inf = _decode("llama3-8b")
    assert _chain_kernels(inf, "layer/norm_attn") == 8         # + to-fp32 and to-bf16 casts


@pytest.mark.parametrize("group", sorted(FUSION_GROUPS))
def test_each_group_changes_something(group):
    w = TrainingWorkload(model="deepseek-v3" if group in ("grouped_gemm", "moe_permute") else "llama3-8b",
                         mbs=1, seq=1024, grad_accum=2)
    assert build_ops(w, {group}) != build_ops(w)


def test_fusion_reduces_kernels_and_bytes():
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=2048)
    e, f = build_ops(w), build_ops(w, FUSION_GROUPS)
    assert count_kernels(f) < count_kernels(e) / 3
    assert sum(o.bytes_total * o.count for o in f) < sum(o.bytes_total * o.count for o in e)
    assert count_flops(f, ["matmul"]) == pytest.approx(count_flops(e, ["matmul"]))


def test_amp_casts_and_loss_bytes():
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=1024)
    ops = build_ops(w)
    P = w.model.param_count() - w.model.vocab * w.model.d_model - (2 * 32 + 1) * 4096  # linears incl. lm_head
    cast = _op(ops, "cast/weights")
    assert (cast.bytes_read, cast.bytes_written) == (4 * P, 2 * P)
    lc = _op(ops, "loss/logits_cast/strided4")   # .float() widening: an unrolled kernel (ops_common.UNROLLED)
    assert lc.bytes_read + lc.bytes_written == 1024 * 128256 * (2 + 4)
    opt = _op(build_ops(w, {"optimizer"}), "optimizer/adamw", "optimizer")
    assert opt.bytes_read + opt.bytes_written == 28 * w.model.param_count()
    assert not [o for o in build_ops(w.model_copy(update={"precision": "bf16"})) if o.name == "cast/weights"]


def test_names_unique_per_phase():
    for w in (TrainingWorkload(model="deepseek-v3", seq=1024, recompute="full", precision="fp8"),
              InferenceWorkload(model="qwen3-30b-a3b", phase="prefill", prompt_len=512)):
        keys = [(o.name, o.phase) for o in build_ops(w)]
        assert len(keys) == len(set(keys))


def test_recompute():
    base = TrainingWorkload(model="llama3-8b", mbs=1, seq=2048)
    none = build_ops(base)
    full = build_ops(base.model_copy(update={"recompute": "full"}))
    sel = build_ops(base.model_copy(update={"recompute": "selective"}))
    layer_fwd = sum(o.flops * o.count for o in none if o.phase == "fwd" and o.name.startswith("layer/"))
    extra = count_flops(full) - count_flops(none)
    assert extra == pytest.approx(layer_fwd)
    assert [o.name for o in sel if o.name.endswith("/recompute")] == ["layer/attn/core/recompute"]
    assert all(o.phase == "bwd" for o in full if o.name.endswith("/recompute"))


def test_fp8_gemms():
    ops = build_ops(TrainingWorkload(model="llama3-8b", mbs=1, seq=1024, precision="fp8"))
    assert _op(ops, "layer/mlp/down").dtype == "fp8"
    assert _op(ops, "layer/cast_fp8").kernels > 1
    assert _op(ops, "grad/zero").bytes_written == 4 * preset("llama3-8b").param_count()


def test_unknown_group_raises():
    with pytest.raises(ValueError, match="fused"):
        build_ops(TrainingWorkload(model="llama3-8b"), {"flash"})


@pytest.mark.parametrize("name", ["llama3-70b", "deepseek-v3"])
def test_build_is_short(name):
    """The op list stays short (its build time is bench/small_calls_speed.py's)."""
    w = TrainingWorkload(model=name, mbs=1, seq=4096, recompute="full")
    ops = _build.__wrapped__(w, frozenset(), 0)
    assert len(ops) < 150     # eager chains split their non-vectorised kernels into /strided ops
