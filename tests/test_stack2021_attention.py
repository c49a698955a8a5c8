"""Pre-FlashAttention attention (math_attention) and the 2021 stacks the Megatron-LM 2021 rows ran."""

import pytest

from mechsim.model import TrainingWorkload, build_ops
from mechsim.sim.stacks import get_stack
from mechsim.validation.analysis.published import load_published
from mechsim.validation.analysis.published_compare import stack_for, workload_for

GPT = dict(name="gpt-small", n_layers=2, d_model=1024, n_heads=16, n_kv_heads=16, ffn=4096, vocab=51200,
           max_seq=2048, mlp="gelu", norm="layernorm", linear_bias=True, pos_embedding="learned",
           tie_embeddings=True)


def _core(ops, phase):
    return [o for o in ops if o.name.startswith("layer/attn/core") and o.phase == phase]


def test_math_attention_flops_are_the_full_score_matrix():
    B, S, H, D = 2, 1024, 16, 64
    w = TrainingWorkload(model=GPT, mbs=B, seq=S)
    ops = build_ops(w, {"math_attention"})
    fwd, bwd = _core(ops, "fwd"), _core(ops, "bwd")
    gemm_f = sum(o.flops * o.count for o in fwd if o.kind == "matmul")
    gemm_b = sum(o.flops * o.count for o in bwd if o.kind == "matmul")
    n = 2  # layers
    assert gemm_f == pytest.approx(n * 2 * B * H * S * S * (D + D))          # no causal skipping
    assert gemm_b == pytest.approx(2 * gemm_f)
    assert not [o for o in ops if o.kind == "attention"]
    # forward: qk, softmax, dropout, pv, ctx copy; backward: 4 GEMMs + dropout + softmax
    assert sum(o.kernels for o in fwd) == 5 and sum(o.kernels for o in bwd) == 6


def test_softmax_reads_the_causal_triangle_and_writes_the_whole_matrix():
    B, S, H = 1, 512, 16
    ops = build_ops(TrainingWorkload(model=GPT, mbs=B, seq=S), {"math_attention"})
    sm = next(o for o in ops if o.name == "layer/attn/core/softmax" and o.phase == "fwd")
    P = B * H * S * S
    assert sm.bytes_written == 2 * P
    assert sm.bytes_read == pytest.approx(2 * (S * S - S * (S - 1) / 2) / (S * S) * P)
    drop = next(o for o in ops if o.name == "layer/attn/core/dropout" and o.phase == "fwd")
    assert drop.bytes_written == 3 * P                                        # fp16 probs + bool mask


def test_flash_path_unchanged_without_the_form():
    ops = build_ops(TrainingWorkload(model=GPT, mbs=1, seq=512), {"norm"})
    assert [o.kind for o in _core(ops, "fwd")] == ["attention"]


def test_2021_stacks_use_math_attention_and_modern_ones_do_not():
    assert "math_attention" in get_stack("megatron_2021").fused
    assert "math_attention" in get_stack("deepspeed_zero3_2021").fused
    assert "math_attention" not in get_stack("megatron_te").fused


def test_megatron2021_rows_get_their_stack_and_run_config():
    rows = {r.id: r for r in load_published() if r.source_id == "megatron2021_a1"}
    t1 = workload_for(rows["megatron2021-t1-1.7b"])
    assert (t1.stack, t1.mbs, t1.grad_accum, t1.parallel.zero, t1.parallel.sp) == ("megatron_2021", 16, 1, 0, False)
    p = workload_for(rows["megatron2021-t2-ptd-p-174.6b-768g"]).parallel
    assert (p.tp, p.pp, p.vp, p.dp, p.schedule) == (8, 12, 4, 8, "interleaved")
    z = rows["megatron2021-t2-zero-3-529.6b-640g"]
    assert stack_for(z) == "deepspeed_zero3_2021" and workload_for(z).recompute == "full"
