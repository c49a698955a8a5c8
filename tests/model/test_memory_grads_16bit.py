"""Memory of the 16-bit gradient stack forms (ops_train.step_dtypes): grads_16bit (Megatron-LM 2021 torch DDP,
DeepSpeed ZeRO-3 2021: the fp16 .grad is the gradient, no fp32 buffer; torch DDP's buckets are a second 16-bit
copy) and grad_hooks_16bit (LocalDDP: a persistent 16-bit contiguous buffer that is the bucket), against closed
forms on a hand-counted GPT."""

import pytest

from mechsim.model import TrainingWorkload
from mechsim.model import memory as M
from mechsim.model.memory_parallel import gpu_memory
from mechsim.model.parallel import Parallelism
from mechsim.sim.stacks import get_stack

GPT = dict(name="gpt-1b", n_layers=4, d_model=2048, n_heads=16, n_kv_heads=16, ffn=8192, vocab=51200,
           max_seq=2048, mlp="gelu", norm="layernorm", linear_bias=True, pos_embedding="learned",
           tie_embeddings=True)
# by hand: per layer q/k/v/o + biases 4 d^2 + 4 d, MLP 2 d F + F + d, two LayerNorms 4 d; embedding V d,
# positions 2048 d, final LayerNorm 2 d (d 2048, F 8192, V 51200; tied lm_head)
LAYER = 4 * 2048**2 + 4 * 2048 + 2 * 2048 * 8192 + 8192 + 2048 + 4 * 2048
P = 51200 * 2048 + 2048 * 2048 + 2 * 2048 + 4 * LAYER
DP = 8


def _w(stack, zero=0, dp=DP, ga=2, precision="bf16"):
    return TrainingWorkload(model=GPT, mbs=2, seq=1024, grad_accum=ga, precision=precision, stack=stack,
                            recompute="full", parallel=Parallelism(dp=dp, zero=zero))


def _mem(stack, **kw):
    return gpu_memory(_w(stack, **kw), get_stack(stack).fused)


def test_hand_count():
    assert P == 310_489_088 == _w("megatron_2021").model.param_count()


def test_torch_ddp_16bit_grads_and_their_bucket_copy():
    g = _mem("megatron_2021")
    assert g.grads == pytest.approx(2.0 * P)          # fp16 .grad, no fp32 main_grad (was 4 P)
    assert g.dp_buffers == pytest.approx(2.0 * P)     # torch DDP buckets: gradient_as_bucket_view=False (was 0)
    assert g.weights == pytest.approx(2.0 * P) and g.optimizer == pytest.approx(12.0 * P)


def test_local_ddp_16bit_buffer_is_the_bucket():
    g = _mem("megatron_2021_local_ddp")
    assert g.grads == pytest.approx(2.0 * P) and g.dp_buffers == 0.0


def test_main_grad_stacks_unchanged():
    g = _mem("megatron_te")
    assert g.grads == pytest.approx(4.0 * P) and g.dp_buffers == 0.0


def test_zero3_2021_fp16_partitions_and_one_layer_unsharded():
    g = _mem("deepspeed_zero3_2021", zero=3)
    assert g.grads == pytest.approx(2.0 * P / DP)                       # fp16 grads_in_partition
    assert g.dp_buffers == pytest.approx(LAYER * (2 * 2.0 + 2.0))       # one layer gathered twice + its fp16 grad


def test_single_gpu_parts():
    for stack in ("megatron_2021", "megatron_2021_local_ddp"):
        f = get_stack(stack).fused
        w = _w(stack, dp=1, ga=1)
        assert M.grad_bytes(w, f) == pytest.approx(2.0 * P)
    w, f = _w("megatron_2021", dp=1, ga=1), get_stack("megatron_2021").fused
    assert not M.grads_persist(w, f)                                      # .grad set to None by zero_grad
    assert M.grads_persist(_w("megatron_2021", dp=1, ga=2), f)            # later micro-batches find it
    assert M.grads_persist(w, get_stack("megatron_2021_local_ddp").fused)   # the 16-bit buffer persists
    assert M.grads_persist(w, get_stack("megatron_te").fused)
    assert M.grad_accumulate_transient_bytes(w, f) == pytest.approx(2.0 * 51200 * 2048)   # tied embedding's 2nd grad


def test_fp32_params_ignore_grads_16bit():
    f = get_stack("megatron_2021").fused
    w = _w("megatron_2021", precision="amp_bf16")
    assert gpu_memory(w, f) == gpu_memory(w, f - {"grads_16bit"})
