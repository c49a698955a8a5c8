"""Memory helpers: closed forms and the Korthikanti et al. 2022 cross-check."""
import pytest

from mechsim.model import (InferenceWorkload, TrainingWorkload, activation_bytes_per_layer,
                           activation_bytes_saved, grad_bytes, kv_cache_bytes, logits_bytes,
                           optimizer_state_bytes, weight_bytes, weight_cast_cache_bytes)


def test_korthikanti_gpt3_per_layer():
    # Korthikanti et al. 2022 eq. (1): 34*s*b*h + 5*a*s^2*b bytes per layer (16-bit, dropout).
    # Flash attention removes the s^2 terms; no dropout removes 2*s*b*h of masks -> 32*s*b*h.
    s, b, h = 2048, 2, 12288
    w = TrainingWorkload(model="gpt3-175b", mbs=b, seq=s, precision="bf16")
    assert activation_bytes_per_layer(w, {"norm", "act"}) == pytest.approx(32 * s * b * h, rel=0.002)


def test_recompute_ordering():
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=4096)
    none, sel, full = (activation_bytes_saved(w.model_copy(update={"recompute": r}))
                       for r in ("none", "selective", "full"))
    assert full < sel < none
    # full: each layer keeps only its fp32 input (amp residual stream); the head norm (not
    # checkpointed) keeps x, x*rstd (fp32), rstd and the bf16 cast for lm_head
    T, d = 4096, 4096
    assert full == 32 * 4 * T * d + (4 + 4 + 2) * T * d + 4 * T


def test_fused_saves_less():
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=4096)
    assert activation_bytes_saved(w, {"norm", "act"}) < activation_bytes_saved(w)


def test_state_bytes():
    w = TrainingWorkload(model="llama3-8b")
    P = w.model.param_count()
    assert weight_bytes(w) == 4 * P and grad_bytes(w) == 4 * P and optimizer_state_bytes(w) == 8 * P
    wb = TrainingWorkload(model="llama3-8b", precision="bf16")
    assert weight_bytes(wb) == 2 * P and optimizer_state_bytes(wb) == 12 * P
    assert weight_cast_cache_bytes(w) > 0 and weight_cast_cache_bytes(wb) == 0
    assert optimizer_state_bytes(TrainingWorkload(model="llama3-8b", optimizer="sgd")) == 4 * P


def test_logits_bytes():
    # backward start: log_softmax's saved fp32 output + its fp32 grad in + fp32 grad out
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=4096)
    assert logits_bytes(w) == 4096 * 128256 * 12
    # fused cross-entropy (Megatron, main_grad: no lm_head weight-grad cast): logits + grad
    wb = TrainingWorkload(model="llama3-8b", mbs=1, seq=4096, precision="bf16")
    assert logits_bytes(wb, {"cross_entropy"}) == 4096 * 128256 * 4
    # amp + fused CE: the lm_head weight grad (bf16 + fp32 .grad, 6*V*d) is then larger
    assert logits_bytes(w, {"cross_entropy"}) == 6 * 128256 * 4096 + 2 * 4096 * 4096
    # a short sequence: the lm_head weight gradient (bf16, then its fp32 .grad) dominates
    s = TrainingWorkload(model="llama3-8b", mbs=1, seq=256)
    V, d, T = 128256, 4096, 256
    assert logits_bytes(s) == (2 + 4) * V * d + 2 * T * d


def test_loss_parallel_and_allocator_reserve():
    """Measured on H200 (validation/experiments/records/*_loss_memory_*): torch's loss_parallel
    peaks at 16 T V_local, the plain eager loss at 12 T V; the allocator reserves 2 T V more."""
    from mechsim.model.memory import loss_allocator_reserve_bytes
    w = TrainingWorkload(model="llama3-8b", mbs=1, seq=4096)
    T, V = 4096, 128256
    assert logits_bytes(w, {"loss_parallel"}, vocab_shards=8) == 16 * T * V
    assert logits_bytes(w, {"loss_parallel"}, vocab_shards=1) == 12 * T * V   # no shards: plain loss
    assert loss_allocator_reserve_bytes(w) == 2 * T * V
    assert loss_allocator_reserve_bytes(w, {"cross_entropy"}) == 0.0


def test_grad_lifetimes():
    from mechsim.model.memory import grad_accumulate_transient_bytes, grads_persist
    amp = TrainingWorkload(model="llama3-8b")
    assert not grads_persist(amp)                       # zero_grad(set_to_none=True)
    assert grads_persist(amp.model_copy(update={"grad_accum": 2}))
    assert grads_persist(TrainingWorkload(model="llama3-8b", precision="bf16"))   # main_grad buffer
    assert grad_accumulate_transient_bytes(amp) == 0     # untied: the grad is stolen
    tied = TrainingWorkload(model="llama3.2-1b")
    assert tied.model.tie_embeddings
    assert grad_accumulate_transient_bytes(tied) == 4 * tied.model.vocab * tied.model.d_model


def test_cublas_workspaces():
    from mechsim.model.memory import cublas_workspace_bytes
    assert cublas_workspace_bytes(TrainingWorkload(model="llama3-8b")) == 2 * 32 * 2**20
    assert cublas_workspace_bytes(InferenceWorkload(model="llama3-8b")) == 32 * 2**20
    assert cublas_workspace_bytes(TrainingWorkload(model="llama3-8b"), "ampere") == 2 * (8 * 2**20 + 128 * 2**10)


def test_kv_cache_and_inference_weights():
    i = InferenceWorkload(model="llama3-70b", batch=8, phase="decode", context_len=4096)
    assert kv_cache_bytes(i) == 8 * 4096 * 327_680
    q = InferenceWorkload(model="llama3-70b", weight_dtype="int4")
    assert weight_bytes(q) < 0.3 * weight_bytes(i)


def test_inference_activations_transient():
    pre = InferenceWorkload(model="llama3-8b", batch=2, phase="prefill", prompt_len=1024)
    dec = InferenceWorkload(model="llama3-8b", batch=2, phase="decode", context_len=1024)
    T = 2 * 1024
    assert activation_bytes_saved(pre) == 2 * (2 * T * 4096 + 3 * T * 14336)
    assert activation_bytes_saved(dec) * 1024 == activation_bytes_saved(pre)
