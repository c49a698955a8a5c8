"""Megatron-LM 2021 fp16 with --DDP-impl torch (stack form grads_16bit, ops_train.GRADS_16BIT): the 16-bit
parameters' .grad is the gradient (NVIDIA/Megatron-LM de7dc40f88 megatron/arguments.py: fp32 accumulation and
all-reduce only with local DDP), so the wgrad GEMMs write 16-bit grads, AccumulateGrad adds the later
micro-batches in 16 bits and torch DDP copies and all-reduces 16-bit buckets."""

import pytest

from mechsim.model import TrainingWorkload
from mechsim.model.build import build_ops
from mechsim.model.ops_train import GRADS_16BIT
from mechsim.model.parallel import Parallelism
from mechsim.sim.stacks import get_stack

GPT = dict(name="gpt-1b", n_layers=4, d_model=2048, n_heads=16, n_kv_heads=16, ffn=8192, vocab=51200,
           max_seq=2048, mlp="gelu", norm="layernorm", linear_bias=True, pos_embedding="learned",
           tie_embeddings=True)
GA = 3


def _ops(fused, precision="bf16", dp=8):
    w = TrainingWorkload(model=GPT, mbs=2, seq=1024, grad_accum=GA, precision=precision, stack="megatron_2021",
                         recompute="full", parallel=Parallelism(tp=1, pp=1, dp=dp, zero=0))
    return build_ops(w, fused)


def _named(ops, name):
    return [o for o in ops if o.name.split("/strided")[0] == name]


def test_the_2021_fp16_stacks_without_local_ddp_list_it():
    for s in ("megatron_2021", "deepspeed_zero3_2021"):
        assert GRADS_16BIT in get_stack(s).fused
    for s in ("megatron_2021_local_ddp", "megatron_te", "eager"):   # local DDP: grad_hooks_16bit
        assert GRADS_16BIT not in get_stack(s).fused


def test_16bit_grads_are_written_accumulated_and_all_reduced():
    on = _ops(get_stack("megatron_2021").fused)
    off = _ops(get_stack("megatron_2021").fused - {GRADS_16BIT})
    (ar_on,), (ar_off,) = _named(on, "comm/dp/grad_ar"), _named(off, "comm/dp/grad_ar")
    assert ar_on.dtype == "bf16" and ar_off.dtype == "fp32"
    size = lambda op: op.shape.bytes * op.count
    assert size(ar_on) == pytest.approx(size(ar_off) / 2, rel=1e-3)
    assert not _named(on, "grad/zero") and _named(off, "grad/zero")          # no fp32 main_grad buffer to zero
    (acc,) = _named(on, "grad/accumulate")
    P = acc.shape.numel
    assert acc.count == GA - 1 and acc.bytes_read == pytest.approx(4.0 * P) and acc.bytes_written == pytest.approx(2.0 * P)
    wg = lambda ops: next(o for o in ops if o.name == "layer/mlp/up/wgrad")
    assert wg(on).bytes_read < wg(off).bytes_read                             # no read-modify-write of an fp32 main_grad
    assert _named(on, "dp/grad_to_bucket") and _named(on, "dp/bucket_to_grad")   # torch DDP copies into its buckets


def test_fp32_parameters_keep_fp32_grads():
    f = get_stack("megatron_2021").fused
    a, b = _ops(f, "amp_bf16"), _ops(f - {GRADS_16BIT}, "amp_bf16")
    assert [(o.name, o.bytes_read, o.bytes_written, o.count) for o in a] == \
        [(o.name, o.bytes_read, o.bytes_written, o.count) for o in b]


def test_zero3_keeps_no_fp32_grad_buffer():
    w = TrainingWorkload(model=GPT, mbs=2, seq=1024, grad_accum=GA, precision="bf16", stack="deepspeed_zero3_2021",
                         recompute="full", parallel=Parallelism(tp=1, pp=1, dp=8, zero=3))
    f = get_stack("deepspeed_zero3_2021").fused
    on, off = build_ops(w, f), build_ops(w, f - {GRADS_16BIT})
    wg = lambda ops: next(o for o in ops if o.name == "layer/mlp/up/wgrad")
    assert wg(on).bytes_read < wg(off).bytes_read                             # no fp32 main_grad read-modify-write
    for ops in (on, off):   # ZeRO-3's grads are sharded: nothing of the whole model zeroed or accumulated per step
        assert not _named(ops, "grad/zero") and not _named(ops, "grad/accumulate")


# gpt-1b above, by hand: embedding 51200 x 2048 + positions 2048 x 2048 + final LayerNorm 2 x 2048, and per layer
# q/k/v/o with biases 4 d^2 + 4 d, the MLP 2 d F + F + d, two LayerNorms 4 d (d 2048, F 8192)
LAYER = 4 * 2048**2 + 4 * 2048 + 2 * 2048 * 8192 + 8192 + 2048 + 4 * 2048
P_GPT = 51200 * 2048 + 2048 * 2048 + 2 * 2048 + 4 * LAYER


def test_ddp_bucket_copies_count_elements_of_16bit_grads():
    assert P_GPT == 310_489_088
    (into,) = _named(_ops(get_stack("megatron_2021").fused), "dp/grad_to_bucket")
    assert into.shape.numel == P_GPT and into.flops == P_GPT                # one 1/n multiply per element
    assert into.bytes_read == pytest.approx(2.0 * P_GPT) and into.bytes_written == pytest.approx(2.0 * P_GPT)
    (back,) = _named(_ops(get_stack("megatron_2021").fused), "dp/bucket_to_grad")
    assert back.shape.numel == P_GPT and back.bytes_written == pytest.approx(2.0 * P_GPT)
    (into32,) = _named(_ops(get_stack("eager").fused, "amp_bf16"), "dp/grad_to_bucket")   # fp32 .grad
    assert into32.flops == P_GPT and into32.bytes_read == pytest.approx(4.0 * P_GPT)
