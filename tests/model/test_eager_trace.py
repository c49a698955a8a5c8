"""Eager kernel counts pinned against real profiler traces of llama_ref.py (H200, torch 2.11, CUDA 13).

Source: validation/data/h200/20261130T115625Z_full_251040.json, records' extra.kernel_launches.
That count includes one profiler annotation row ("Optimizer.step#AdamW.step") that is not a
kernel, so the traced training numbers below are kernel_launches - 1 (= launch_api_calls).
Memsets (cuBLAS / cuDNN / reduction workspaces, cub sort) and DtoD memcpys are not kernel
launches and are not counted in Op.kernels.
"""
import pytest

from mechsim import hwdb
from mechsim.model import InferenceWorkload, TrainingWorkload, TransformerConfig, build_ops

EAGER = frozenset({"optimizer"})   # sim/data/stacks.toml [eager]
TRACED_SMS = hwdb.get_gpu("h200_sxm").sm_count   # the traces are H200 runs: split kernels below its SM count

# validation/runners/models.py SHAPES (rope_theta 500000; max_seq large enough for the cases)
C1B = TransformerConfig(name="1b", n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8, head_dim=64, ffn=8192,
                        vocab=128256, tie_embeddings=True, max_seq=8320, rope_theta=500000.0)
C125 = TransformerConfig(name="125m", n_layers=12, d_model=768, n_heads=12, n_kv_heads=12, ffn=2048, vocab=32000,
                         rope_theta=500000.0)
C8L4 = TransformerConfig(name="8b_l4", n_layers=4, d_model=4096, n_heads=32, n_kv_heads=8, ffn=14336,
                         vocab=128256, rope_theta=500000.0)
C8B = C8L4.model_copy(update={"name": "8b", "n_layers": 32, "max_seq": 8320})


def _kernels(ops, pred=lambda o: True):
    return sum(o.count * o.kernels for o in ops if pred(o))


def test_1b_training_step_kernels_per_layer_match_trace():
    # record train_step/1b/eager/mbs2_seq2048: kernel_launches 2248 = 2247 kernels + 1 annotation.
    # Per layer the trace has 48 forward kernels (Block_3: 41 + 7 autocast weight casts) and
    # 85 backward ones (78 + 7 bf16->fp32 weight-grad casts): 133; the rest (embedding,
    # head norm, lm_head, loss, fused AdamW 60 + 2 step-counter launches) is 119.
    w = TrainingWorkload(model=C1B, mbs=2, seq=2048)
    ops = build_ops(w, EAGER, split_below=TRACED_SMS)
    L = C1B.n_layers
    layer = _kernels(ops, lambda o: o.name.startswith("layer/"))
    casts = _kernels(ops, lambda o: o.name.startswith("cast/")) - 2        # - the lm_head's two casts
    assert layer % L == 0 and casts % L == 0
    assert layer // L + casts // L == 133
    assert _kernels(ops, lambda o: o.name.startswith("layer/") and o.phase == "fwd") // L + casts // (2 * L) == 48
    assert _kernels(ops) == 2247


@pytest.mark.parametrize("w, traced", [
    (TrainingWorkload(model=C125, mbs=8, seq=1024), 1637),                      # train_step/125m/eager/mbs8_seq1024
    (TrainingWorkload(model=C8L4, mbs=2, seq=4096), 684),                       # train_step/8b_l4/eager/mbs2_seq4096
    (InferenceWorkload(model=C1B, phase="prefill", batch=1, prompt_len=512, prefill_logits="all",
                       sampling="none", stack="eager"), 650),                   # prefill/1b/eager/b1_s512
    (InferenceWorkload(model=C8B, phase="decode", batch=1, context_len=2049, sampling="none",
                       stack="eager"), 1482),                                   # decode/8b/eager/b1_ctx2048
])
def test_eager_step_kernels_match_traces(w, traced):
    assert _kernels(build_ops(w, EAGER, split_below=TRACED_SMS)) == pytest.approx(traced, rel=0.02)


def test_attention_and_optimizer_launches_as_traced():
    ops = build_ops(TrainingWorkload(model=C1B, mbs=2, seq=2048), EAGER, split_below=TRACED_SMS)
    bwd = [o for o in ops if o.name == "layer/attn/core" and o.phase == "bwd"][0]
    assert bwd.kernels == 5       # cuDNN: dot(dO,O), bprop, convert dq, 2x GQA reduce_head
    mha = build_ops(TrainingWorkload(model=C125, mbs=8, seq=1024), EAGER, split_below=TRACED_SMS)
    assert [o for o in mha if o.name == "layer/attn/core" and o.phase == "bwd"][0].kernels == 3
    opt = [o for o in ops if o.phase == "optimizer"][0]
    assert opt.kernels == 60 + 2  # multi_tensor_apply launches + _foreach_add_ on the step counters
